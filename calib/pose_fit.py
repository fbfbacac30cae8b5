"""Calibrating from 6-DoF probe poses (issue 9), with or without reflector points in the same sessions.

:meth:`KinematicCalibrator.fit` hands sessions that have ``tracker_poses.csv`` to :func:`fit_with_poses`:
the same hold-out by pose, error model, data checks, robust solver and :class:`Calibration` as the
points-only fit, with a :class:`~calib.observations_pose.PoseObservations` block per session and the
probe's mount ``tip_T_probe`` as fitted parameters. When the data does not state the poses' noise,
the position and rotation sigmas are estimated from the residuals and the fit is redone with them.
A fit reads joints.csv, tracker.csv, tracker_poses.csv, session.json and robot.urdf, never ``truth/``.
"""

from __future__ import annotations

import hashlib

import numpy as np
from threadpoolctl import threadpool_limits

from calib.error_model import ErrorModel
from calib.identifiability import analyse
from calib.initialise import initial_frame_and_targets
from calib.observations import TrackerObservations, stack
from calib.observations_pose import PROBE, PoseObservations, estimate_noise, pose_blocks, register_poses
from calib.solver import RobustSolver
from capture.session import Session
from rigs.errors import InputError
from rigs.kinematics import ChainModel
from rigs.transforms import exp6

NOISE_ROUNDS = 2  # estimate-and-refit rounds when the poses' noise is not stated (the second changes < 1 %)


def _has_points(session: Session) -> bool:
    return session.tracker is not None and len(session.tracker.targets) > 0


def pose_data_hash(sessions: list[Session]) -> str:
    """sha256 over the measurement files of the sessions, in order (truth/ excluded)."""
    digest = hashlib.sha256()
    for session in sessions:
        for name in ("session.json", "robot.urdf", "joints.csv", "tracker.csv", "tracker_poses.csv"):
            path = session.path / name
            if path.is_file():
                digest.update(name.encode())
                digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()




def _session_blocks(session: Session, sensor: str, rows: np.ndarray, noise: tuple[float, float] | None = None) -> list:
    from calib.calibrator import tracker_blocks

    blocks = []
    if _has_points(session):
        blocks.append(tracker_blocks(session, sensor, rows))
    if session.tracker_poses is not None:
        blocks.append(pose_blocks(session, sensor, rows, noise))
    return blocks


def fit_with_poses(calibrator, sessions: list[Session], chain: ChainModel, sensors: list[str]):
    """The :class:`~calib.calibrator.Calibration` of ``sessions`` (loaded, one robot), whose tip
    ``chain`` is built and whose sensor frames are named ``sensors``."""
    for session in sessions:
        if not _has_points(session) and session.tracker_poses is None:
            raise InputError(f"{session.path}: has neither tracker points (tracker.csv) nor tracker poses "
                             f"(tracker_poses.csv); nothing to calibrate against.")
    if getattr(calibrator, "previous", None) is not None:
        raise InputError("recalibrating from a previous calibration needs reflector points for now; calibrate "
                         "sessions with 6-DoF tracker poses afresh.")
    first = sessions[0]
    from calib.calibrator import holdout_rows

    fit_rows, held_rows = holdout_rows([len(s.pose_ids) for s in sessions], calibrator.holdout, calibrator.seed)
    blocks_by_session = [_session_blocks(s, name, rows) for s, name, rows in zip(sessions, sensors, fit_rows)]

    references, offsets, probe = {}, {}, None
    for session, name, blocks in zip(sessions, sensors, blocks_by_session):
        tips = chain.base_T_tip_batch(session.q)
        frame = None
        for block in blocks:
            if isinstance(block, TrackerObservations) and len(block.targets):
                frame, block_offsets = initial_frame_and_targets(tips[block.pose_row], block.targets, block.xyz,
                                                                 session.nominal_targets)
                for target, xyz in block_offsets.items():
                    offsets.setdefault(target, xyz)
        for block in blocks:
            if isinstance(block, PoseObservations):
                if not len(block.pose_row):
                    raise InputError(f"{session.path}: no tracker poses left for the fit after the hold-out.")
                # With reflectors in the session the tracker is placed by them; the probe's mount follows.
                frame, tip_T_probe = register_poses(tips[block.pose_row], block.tracker_T_probe, tracker_T_base=frame)
                probe = tip_T_probe if probe is None else probe
        if frame is None:
            raise InputError(f"{session.path}: no tracker points or poses left for the fit after the hold-out.")
        references[name] = frame
    fit_blocks = [b for blocks in blocks_by_session for b in blocks]
    targets_seen = sorted(set().union(*[set(b.targets) for b in fit_blocks if isinstance(b, TrackerObservations)]))
    model = ErrorModel(chain, sensors, targets_seen, references, calibrator.model,
                       reference_tip_T_probe={PROBE: probe} if probe is not None else {})
    theta0 = model.initial_vector(offsets)
    with threadpool_limits(limits=1, user_api="blas"):
        condition_ratio = check_pose_data(calibrator, model, theta0, fit_blocks, sessions)
    from calib.calibrator import KinematicCalibrator

    if type(calibrator)._extend_model is not KinematicCalibrator._extend_model:
        # Extensions (compliance, issue 4) wrap tracker point blocks only so far.
        raise InputError("a deflection model (compliance) cannot be fitted from 6-DoF tracker poses yet; "
                         "calibrate pose sessions with --deflection none.")

    solver = RobustSolver(calibrator.outlier_threshold, jacobian=calibrator.jacobian, progress=calibrator.progress)
    result = solver.solve(fit_blocks, model, theta0)
    noise = None
    if not all(b.stated for b in fit_blocks if isinstance(b, PoseObservations)):
        for _ in range(NOISE_ROUNDS):
            noise = estimate_noise(result.blocks, model, result.theta, result.identifiability.rank)
            fit_blocks = [b.with_noise(*noise) if isinstance(b, PoseObservations) and not b.stated else b
                          for b in fit_blocks]
            result = solver.solve(fit_blocks, model, theta0)
    calibration = calibrator._calibration(model, result, sessions, first)
    std = result.standard_deviations
    calibration.tip_T_probe = {p: model.reference_tip_T_probe[p] @ exp6(result.theta[sl])
                               for p, sl in model.probe_slices.items()}
    summary = calibration.summary
    summary["identifiability"]["condition_ratio_to_spread_poses"] = condition_ratio
    summary["data_hash"] = pose_data_hash(sessions)
    summary["probe_std"] = {p: std[sl].tolist() for p, sl in model.probe_slices.items()}
    summary["pose_noise"] = ({"source": "estimated", "sigma_pos_m": noise[0], "sigma_rot_rad": noise[1]}
                             if noise is not None else {"source": "stated"})
    point_sessions = [i for i, s in enumerate(sessions) if _has_points(s)]
    if point_sessions:
        calibrator._statistics(calibration, model, result, [sessions[i] for i in point_sessions],
                               [sensors[i] for i in point_sessions], [fit_rows[i] for i in point_sessions],
                               [held_rows[i] for i in point_sessions], theta0,
                               [b for b in fit_blocks if isinstance(b, TrackerObservations)])
    _pose_statistics(calibration, model, result, sessions, sensors, fit_rows, held_rows, theta0, noise,
                     replace_points=not point_sessions, holdout=calibrator.holdout)
    return calibration


def _stats(position: np.ndarray, angle: np.ndarray) -> dict:
    from calib.calibrator import ErrorStats

    out = ErrorStats.of(position).as_dict()
    degrees = np.degrees(np.asarray(angle, float))
    out.update(angle_mean_deg=float(degrees.mean()) if degrees.size else float("nan"),
               angle_rms_deg=float(np.sqrt(np.mean(degrees ** 2))) if degrees.size else float("nan"),
               angle_max_deg=float(degrees.max()) if degrees.size else float("nan"))
    return out


def _pose_statistics(calibration, model, result, sessions, sensors, fit_rows, held_rows, theta0, noise,
                     replace_points: bool, holdout: float) -> None:
    """Position and angle errors of the probe poses for the fit and the hold-out, nominal and fitted.

    Without reflector points the position figures are also the calibration's main residuals (and
    the report's histograms)."""
    outliers = {o.label for o in result.outliers}
    errors = {}
    labels = []
    for session, sensor, fit, held in zip(sessions, sensors, fit_rows, held_rows):
        if session.tracker_poses is None:
            continue
        for kind, rows in (("fit", fit), ("held", held)):
            if not len(rows):
                continue
            block = pose_blocks(session, sensor, rows, noise)
            block = block.subset(np.array([l not in outliers for l in block.labels], bool))
            for when, theta in (("before", theta0), ("after", result.theta)):
                position, angle = block.errors(model, theta)
                errors.setdefault((kind, when), []).append((position, angle))
            if kind == "fit":
                labels += [label.rsplit("/", 1)[0] for label in block.labels]
    joined = {key: (np.concatenate([p for p, _ in v]), np.concatenate([a for _, a in v])) for key, v in errors.items()}
    figures = {"fit": _stats(*joined[("fit", "after")]), "fit_nominal": _stats(*joined[("fit", "before")])}
    if ("held", "after") in joined:
        figures["holdout"] = _stats(*joined[("held", "after")])
        figures["holdout_nominal"] = _stats(*joined[("held", "before")])
    else:
        figures["holdout"] = None
    figures["noise"] = calibration.summary["pose_noise"]
    if replace_points:
        history = {f"{kind}_{when}": joined[(kind, when)][0] for kind, when in joined}
        history.update(fit_pose_labels=labels, fit_pose_errors=joined[("fit", "after")][0],
                       fit_rows=fit_rows, held_rows=held_rows)
        calibration.history = history
        residuals = {k: figures[k] for k in ("fit", "fit_nominal", "holdout")}
        if figures["holdout"] is not None:
            residuals["holdout_nominal"] = figures["holdout_nominal"]
        residuals["holdout_fraction"] = holdout
        residuals["poses"] = {"fit": int(sum(len(r) for r in fit_rows)), "holdout": int(sum(len(r) for r in held_rows))}
        calibration.summary["residuals"] = residuals
    calibration.summary["residuals"]["tracker_poses"] = figures


def check_pose_data(calibrator, model: ErrorModel, theta0: np.ndarray, blocks: list, sessions: list[Session]) -> float:
    """Enough poses, and poses varied enough, for what the arm's structure identifies (as the points
    fit checks): returns the data's condition number over that of poses spread over the joint ranges."""
    from calib.calibrator import STRUCTURAL_POSES, check_pose_set

    rng = np.random.default_rng(12345)
    chain = model.chain
    low = np.where(np.isfinite(chain.lower), chain.lower, -np.pi)
    high = np.where(np.isfinite(chain.upper), chain.upper, np.pi)
    q = rng.uniform(low, high, (STRUCTURAL_POSES, chain.dof))
    targets = sorted(set().union(*[set(b.targets) for b in blocks if isinstance(b, TrackerObservations)]))
    # The fake data carries the real data's weights: the condition number depends on them.
    point_scale = np.median([np.median(b.sqrt_information[:, 0, 0]) for b in blocks
                             if isinstance(b, TrackerObservations) and len(b.targets)] or [1.0])
    sigma_pos = np.median(np.concatenate([b.sigma_pos for b in blocks if isinstance(b, PoseObservations)] or [[1.0]]))
    sigma_rot = np.median(np.concatenate([b.sigma_rot for b in blocks if isinstance(b, PoseObservations)] or [[1.0]]))
    probes = []
    for sensor in sorted({b.sensor for b in blocks}):
        mine = [b for b in blocks if b.sensor == sensor]
        if any(isinstance(b, TrackerObservations) for b in mine) and targets:
            rows = np.repeat(np.arange(STRUCTURAL_POSES), len(targets))
            fake = np.zeros((len(rows), 3))
            fake[:, 2] = 3.0  # only the Jacobian's structure matters here
            probes.append(TrackerObservations(sensor, q, rows, targets * STRUCTURAL_POSES, fake,
                                              np.repeat(point_scale * np.eye(3)[None], len(rows), 0), [""] * len(rows)))
        if any(isinstance(b, PoseObservations) for b in mine):
            rows = np.arange(STRUCTURAL_POSES)
            probes.append(PoseObservations(sensor, q, rows, np.repeat(np.eye(4)[None], STRUCTURAL_POSES, 0),
                                           np.full(STRUCTURAL_POSES, sigma_pos), np.full(STRUCTURAL_POSES, sigma_rot),
                                           [""] * STRUCTURAL_POSES))
    rows_per_pose = 3 * len(targets) + 6 * any(isinstance(b, PoseObservations) for b in blocks)
    _, jac, _ = stack(probes, model, theta0)
    structural = analyse(jac, model.free, model.names)
    residuals = sum(len(b.unit_index) for b in blocks)
    poses = len({(b.sensor, int(row)) for b in blocks for row in b.unit_pose})
    return check_pose_set(model, theta0, blocks, structural, residuals, poses, rows_per_pose, calibrator.holdout, sessions)


def probe_html(calibration) -> str:
    """The report's section on 6-DoF probe poses (empty without a probe)."""
    import html

    figures = (calibration.summary.get("residuals") or {}).get("tracker_poses")
    if not calibration.tip_T_probe or not figures:
        return ""
    rows = []
    for name in ("fit", "fit_nominal", "holdout", "holdout_nominal"):
        entry = figures.get(name)
        if entry:
            rows.append(f"<tr><td>{name}</td><td>{entry['n']}</td><td>{entry['rms_mm']:.4f}</td><td>{entry['max_mm']:.4f}</td>"
                        f"<td>{entry['angle_rms_deg']:.5f}</td><td>{entry['angle_max_deg']:.5f}</td></tr>")
    mounts = "".join(f"<li>{html.escape(p)}: xyz {np.round(t[:3, 3] * 1e3, 4).tolist()} mm</li>"
                     for p, t in calibration.tip_T_probe.items())
    noise = figures.get("noise") or {}
    weighting = ("stated in the data" if noise.get("source") == "stated" else
                 f"estimated from the residuals: {noise.get('sigma_pos_m', float('nan')) * 1e3:.4f} mm, "
                 f"{np.degrees(noise.get('sigma_rot_rad', float('nan'))):.5f} deg per axis")
    return (f"<h2>6-DoF probe poses</h2><p>Position and orientation weighted by their noise ({html.escape(weighting)}).</p>"
            "<table><tr><th>set</th><th>n</th><th>rms mm</th><th>max mm</th><th>angle rms deg</th><th>angle max deg</th></tr>"
            + "".join(rows) + f"</table><p>Probe mount in the tip frame:</p><ul>{mounts}</ul>")
