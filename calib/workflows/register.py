"""Validation on another day: the tracker registered again, reflectors the fit never saw located.

A laser tracker is moved between sessions, so a calibration's stored ``tracker_T_base`` does not
hold for a session recorded on another day. ``validate --register`` fits only the tracker's
placement (6 parameters) on the new session, with the calibration's arm, reflector offsets and
deflection held, on the registration poses (a named subset, the usual "registration points", or
every pose), and reports the errors on the other poses. The nominal URDF is treated the same way:
its tracker placement and reflector offsets registered on the same poses, its errors on the same
others. Both the registered and the unregistered figures are reported.

A reflector the calibration does not hold (one measured for validation only) gets its offset in
the tip frame from the registration poses, or from the poses ``--locate-poses`` names (a home
measurement: one pose determines the three numbers), by a linear solve through the registered
frame, and is then validated on the other poses like the others.
"""

from __future__ import annotations

import numpy as np

from calib.sensors.figures import ErrorStats, named_outliers, pose_figures
from calib.sensors.registration import register_frame_and_targets, register_points
from calib.sensors.tracker_poses import pose_errors, register_poses
from calib.workflows.evaluation import noise_floor_rms_mm, pose_noise_floor
from capture.session import Session
from rigs.errors import InputError, setting
from rigs.kinematics import ArmModel
from rigs.transforms import invert, log6

ROUNDS = 3  # registration rounds; points beyond OUTLIER_SIGMA robust deviations leave the next one
OUTLIER_SIGMA = 5.0
MIN_REGISTRATION_POSES = 3


def registration_rows(session: Session, names: list[str] | None) -> tuple[np.ndarray, np.ndarray]:
    """(registration, evaluation) pose rows of the session: the named poses and the rest, or every
    pose for both when ``names`` is None. InputError naming an unknown pose or too few."""
    count = len(session.pose_ids)
    if names is None:
        rows = np.arange(count)
        return rows, rows
    chosen = pose_rows(session, names, setting("registration_poses"))
    if len(chosen) < MIN_REGISTRATION_POSES:
        raise InputError(f"{setting('registration_poses')}: names {len(chosen)} poses; registering the tracker needs at "
                         f"least {MIN_REGISTRATION_POSES}.")
    rest = np.setdiff1d(np.arange(count), chosen)
    if not len(rest):
        raise InputError(f"{setting('registration_poses')}: names every pose of {session.path}; leave some to validate "
                         f"on.")
    return chosen, rest


def _robust_registration(base_points: np.ndarray, measured: np.ndarray) -> np.ndarray:
    keep = np.ones(len(measured), bool)
    frame = np.eye(4)
    for _ in range(ROUNDS):
        frame = register_points(base_points[keep], measured[keep])
        error = np.linalg.norm(base_points @ frame[:3, :3].T + frame[:3, 3] - measured, axis=1)
        scale = 1.4826 * np.median(error[keep])
        keep = error <= max(OUTLIER_SIGMA * scale, 1e-9)
    if not np.all(np.isfinite(frame)):
        raise InputError("tracker points: the registration of the tracker failed (points are degenerate).")
    return frame


def _locate(tips: np.ndarray, measured: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """A reflector's offset (3,) m in the tip frame from tip poses (M, 4, 4) and points (M, 3) seen
    through ``frame`` (tracker_T_base): linear least squares."""
    rotation = frame[:3, :3] @ tips[:, :3, :3]
    origin = tips[:, :3, 3] @ frame[:3, :3].T + frame[:3, 3]
    return np.linalg.lstsq(rotation.reshape(-1, 3), (measured - origin).reshape(-1), rcond=None)[0]


def pose_rows(session: Session, names: list[str], option: str) -> np.ndarray:
    """Rows (K,) of the named poses; InputError naming an unknown one."""
    index = {pose: i for i, pose in enumerate(session.pose_ids)}
    unknown = [name for name in names if name not in index]
    if unknown:
        raise InputError(f"{option}: pose {unknown[0]!r} is not a pose of {session.path / 'joints.csv'}.")
    return np.array(sorted({index[name] for name in names}), int)


def validate_registered(calibration, session: Session, register: bool, names: list[str] | None = None,
                        sensor: str | None = None, outlier_sigma: float = 5.0, locate: list[str] | None = None,
                        tool: bool = False) -> dict:
    """Reflector figures with the tracker registered (``register``) and reflectors the calibration
    lacks located on the ``locate`` poses (a home measurement: one pose is enough) or else on the
    registration poses; see the module docstring. Registration and locating poses are left out of
    the figures.

    Returns the figures of the evaluation poses (n, mean_mm, rms_mm, max_mm, p95_mm: registered
    when ``register``), ``nominal_rms_mm`` (the nominal URDF registered on the same poses),
    ``unregistered`` (the calibration's stored tracker placement on the same poses), ``registration``
    (poses used, how far the tracker moved from the stored placement), ``located`` (reflectors
    located here, with offsets), ``outliers`` among the evaluation points, ``floor_rms_mm`` for a
    simulated session. ``tool``: every reflector is located anew on the registration poses (the
    marker was remounted), jointly with the tracker when ``register``."""
    tracker = session.tracker
    if tracker is None or not len(tracker.targets):
        raise InputError(f"{session.path}: has no tracker points (tracker.csv) to validate against.")
    if session.joint_names != calibration.joint_names:
        raise InputError(f"{session.path}: its joints {session.joint_names} are not the calibration's "
                         f"{calibration.joint_names}.")
    stored = calibration.tracker_T_base[calibration._sensor(sensor)]
    unknown = sorted(set(tracker.targets) - (set() if tool else set(calibration.targets)))
    if unknown and names is None and locate is None and not tool:
        raise InputError(f"{session.path}: tracker target {unknown[0]!r} is not a reflector of the calibration; name "
                         f"the poses that locate it with {setting('registration_poses')} (they are left out of the "
                         f"figures).")
    if not register and not tool and names is not None and not unknown:
        raise InputError(f"{setting('registration_poses')} names the poses that register the tracker or locate a new "
                         f"reflector: add {setting('register')} tracker, or a reflector the calibration does not hold.")
    if locate is not None and not unknown:
        raise InputError(f"{setting('locate_poses')} locates reflectors the calibration does not hold, and every "
                         f"reflector of {session.path} is in it.")
    reg_rows, eval_rows = registration_rows(session, names)
    locate_rows = reg_rows if locate is None else pose_rows(session, locate, setting("locate_poses"))
    if locate is not None:
        eval_rows = np.setdiff1d(eval_rows, locate_rows)
        if not len(eval_rows):
            raise InputError(f"{setting('locate_poses')}: with the registration poses, names every pose of "
                             f"{session.path}; leave some to validate on.")
    tips = calibration.base_T_tip(session.q, session.payload_kg)
    tips[:, :3, 3] += calibration.tip_shift(session.q, session.payload_kg)
    point_tips = tips[tracker.pose_index]
    in_reg, in_eval = np.isin(tracker.pose_index, reg_rows), np.isin(tracker.pose_index, eval_rows)
    in_locate = np.isin(tracker.pose_index, locate_rows)
    known = np.array([t in calibration.targets and not tool for t in tracker.targets])
    offsets = {} if tool else dict(calibration.targets)

    frame = stored
    if register and tool:
        rows = in_reg
        check_turns(point_tips[rows], session, names)
        frame, offsets = register_frame_and_targets(point_tips[rows], [t for t, r in zip(tracker.targets, rows) if r],
                                                    tracker.xyz[rows], session.nominal_targets)
        unknown = []
        located_jointly = {name: [float(v) for v in xyz] for name, xyz in offsets.items()}
    elif register:
        rows = in_reg & known
        if rows.sum() < 3:
            raise InputError(f"{session.path}: the registration poses see {int(rows.sum())} points of the "
                             f"calibration's reflectors; registering the tracker needs at least 3.")
        frame = _robust_registration(_points_of(point_tips, tracker.targets, offsets, rows), tracker.xyz[rows])
    located = located_jointly if register and tool else {}
    for name in unknown:
        rows = in_locate & (np.array(tracker.targets) == name)
        if not rows.any():  # one pose determines the three offsets; more give redundancy
            raise InputError(f"{session.path}: reflector {name!r} is not seen at the poses that locate it "
                             f"({setting('locate_poses') if locate is not None else setting('registration_poses')}); "
                             f"name one where it was measured.")
        offsets[name] = _locate(point_tips[rows], tracker.xyz[rows], frame)
        located[name] = [float(v) for v in offsets[name]]
    all_rows = np.ones(len(tracker.targets), bool)
    predicted = _points_of(point_tips, tracker.targets, offsets, all_rows)
    registered = np.linalg.norm(predicted @ frame[:3, :3].T + frame[:3, 3] - tracker.xyz, axis=1)
    unregistered = np.linalg.norm(predicted @ stored[:3, :3].T + stored[:3, 3] - tracker.xyz, axis=1)
    nominal = nominal_registered_errors(session, calibration.summary.get("tip_link"), np.union1d(reg_rows, locate_rows))
    moved = log6(invert(stored) @ frame)
    evaluation = set(eval_rows.tolist())
    outliers = [o for o in named_outliers(session, registered, outlier_sigma)
                if session.pose_ids.index(o["pose"]) in evaluation]
    return {
        **ErrorStats.of(registered[in_eval]).as_dict(),
        "nominal_rms_mm": ErrorStats.of(nominal[in_eval]).rms_mm,
        "outlier_sigma": outlier_sigma, "outliers": outliers,
        "registration": {"poses": "all" if names is None else [session.pose_ids[i] for i in reg_rows],
                         "locating_poses": [session.pose_ids[i] for i in locate_rows] if unknown else [],
                         "evaluated_poses": int(len(eval_rows)), "tracker_registered": bool(register),
                         "tool_registered": bool(tool),
                         # where the tracker head sits in the base frame, before and after
                         "tracker_moved_mm": float(np.linalg.norm(invert(frame)[:3, 3] - invert(stored)[:3, 3]) * 1e3),
                         "tracker_turned_deg": float(np.degrees(np.linalg.norm(moved[3:]))),
                         "tracker_T_base": frame.tolist()},
        "unregistered": ErrorStats.of(unregistered[in_eval]).as_dict(),
        "rms_mm_by_reflector": {name: ErrorStats.of(registered[in_eval & (np.array(tracker.targets) == name)]).rms_mm
                                for name in sorted(set(tracker.targets))},
        "located": located,
        "floor_rms_mm": noise_floor_rms_mm(session),
    }


MIN_TURN_RAD = np.radians(5.0)  # a turn of the flange that separates a tool's offset from the tracker's placement


def check_turns(tips: np.ndarray, session: Session, names: list[str] | None) -> None:
    """InputError unless the tip poses (M, 4, 4) turn the flange about two different axes by at
    least ``MIN_TURN_RAD``: locating a tool and a tracker together needs that."""
    turns = np.array([log6(invert(tips[0]) @ tip)[3:] for tip in tips]) if len(tips) else np.zeros((0, 3))
    spread = np.linalg.svd(turns, compute_uv=False) / np.sqrt(max(len(tips), 1)) if len(tips) > 1 else np.zeros(1)
    if (spread > MIN_TURN_RAD).sum() < 2:
        where = "every pose" if names is None else f"the {len(tips)} poses {setting('registration_poses')} names"
        raise InputError(f"{session.path}: locating the tool together with the tracker needs registration poses that "
                         f"turn the flange about two different axes by at least {np.degrees(MIN_TURN_RAD):g} deg, and "
                         f"{where} turn it about at most one; name more poses with {setting('registration_poses')}, or "
                         f"register the tracker alone ({setting('register')} tracker).")


def _points_of(tips: np.ndarray, targets: list[str], offsets: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """(K, 3) base-frame points of the tracker rows ``rows`` (bool, M) with reflector ``offsets``."""
    chosen = np.flatnonzero(rows)
    xyz = np.array([offsets[targets[i]] for i in chosen]).reshape(-1, 3)
    return np.einsum("mij,mj->mi", tips[chosen, :3, :3], xyz) + tips[chosen, :3, 3]


def nominal_registered_errors(session: Session, tip_link: str | None, reg_rows: np.ndarray) -> np.ndarray:
    """3D error (M,) m of every tracker point under the nominal URDF, its tracker placement and
    reflector offsets registered on the pose rows ``reg_rows`` only."""
    tracker = session.tracker
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, tip_link or session.tip_link)
    tips = chain.base_T_tip_batch(session.q)[tracker.pose_index]
    rows = np.isin(tracker.pose_index, reg_rows)
    frame, offsets = register_frame_and_targets(tips[rows], [t for t, r in zip(tracker.targets, rows) if r],
                                                tracker.xyz[rows], session.nominal_targets)
    for name in set(tracker.targets) - set(offsets):
        offsets[name] = np.asarray(session.nominal_targets.get(name, np.zeros(3)), float)
    points = _points_of(tips, tracker.targets, offsets, np.ones(len(tracker.targets), bool))
    return np.linalg.norm(points @ frame[:3, :3].T + frame[:3, 3] - tracker.xyz, axis=1)


PROBE_ARM = 0.1  # m: points along the probe's axes weigh its orientation in the registration


def validate_poses_registered(calibration, session: Session, names: list[str] | None = None,
                              sensor: str | None = None, tool: bool = False) -> dict:
    """6-DoF probe figures with the tracker's placement refitted on the registration poses (every
    pose when ``names`` is None): position (mm) and angle (deg) figures of the other poses, the
    nominal URDF registered the same way (tracker and probe mount), the unregistered figures."""
    poses = session.tracker_poses
    if not calibration.tip_T_probe:
        raise InputError(f"{session.path}: has probe poses, but the calibration has no 6-DoF probe "
                         f"(it was fitted without tracker poses).")
    stored = calibration.tracker_T_base[calibration._sensor(sensor)]
    reg_rows, eval_rows = registration_rows(session, names)
    in_reg, in_eval = np.isin(poses.pose_index, reg_rows), np.isin(poses.pose_index, eval_rows)
    tips = calibration.base_T_tip(session.q, session.payload_kg)
    tips[:, :3, 3] += calibration.tip_shift(session.q, session.payload_kg)
    predicted = tips[poses.pose_index] @ next(iter(calibration.tip_T_probe.values()))

    def corners(stack: np.ndarray) -> np.ndarray:  # (M, 4, 4) -> (4 M, 3): origin and a point on each axis
        return np.concatenate([stack[:, :3, 3]] + [stack[:, :3, 3] + PROBE_ARM * stack[:, :3, k] for k in range(3)])

    if tool:  # the probe remounted: its mount and the tracker's placement found together
        check_turns(tips[poses.pose_index][in_reg], session, names)
        frame, tool_T_probe = register_poses(tips[poses.pose_index][in_reg], poses.tracker_T_probe[in_reg], rounds=20)
        predicted = tips[poses.pose_index] @ tool_T_probe
    else:
        frame = _robust_registration(corners(predicted[in_reg]), corners(poses.tracker_T_probe[in_reg]))
    registered = pose_figures(*pose_errors(frame @ predicted[in_eval], poses.tracker_T_probe[in_eval]))
    unregistered = pose_figures(*pose_errors(stored @ predicted[in_eval], poses.tracker_T_probe[in_eval]))
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, calibration.summary.get("tip_link"))
    nominal_tips = chain.base_T_tip_batch(session.q)[poses.pose_index]
    tracker_T_base, tip_T_probe = register_poses(nominal_tips[in_reg], poses.tracker_T_probe[in_reg], rounds=20)
    nominal = pose_figures(*pose_errors(tracker_T_base @ nominal_tips[in_eval] @ tip_T_probe,
                                        poses.tracker_T_probe[in_eval]))
    floor = pose_noise_floor(session)
    return {**registered, "nominal_rms_mm": nominal["rms_mm"], "nominal_angle_rms_deg": nominal["angle_rms_deg"],
            "floor_rms_mm": floor[0] if floor else None, "floor_angle_rms_deg": floor[1] if floor else None,
            "unregistered": unregistered,
            "located": {"probe origin": [float(v) for v in tool_T_probe[:3, 3]]} if tool else {},
            "registration": {"poses": "all" if names is None else [session.pose_ids[i] for i in reg_rows],
                             "evaluated_poses": int(len(eval_rows)), "tool_registered": bool(tool),
                             "tracker_moved_mm": float(np.linalg.norm(invert(frame)[:3, 3] - invert(stored)[:3, 3]) * 1e3),
                             "tracker_turned_deg": float(np.degrees(np.linalg.norm(log6(invert(stored) @ frame)[3:])))}}
