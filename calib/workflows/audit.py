"""ISO 9283 accuracy audits with a laser tracker: the plan to run, and the report of a run.

A plan puts the ISO test cube in the most used part of the workspace (the median of the tip
positions of many random valid poses), picks the largest cube (or the one asked for) whose five
points P1..P5 on a diagonal plane the arm reaches with one tool orientation, and repeats the cycle
P1, P5, P4, P3, P2 a number of times. The report reads the recorded session (tracker points,
``iso_pose`` column) and computes AP, RP, APa, RPa per pose and AD, RD between P2 and P4, with the
commanded poses computed by the nominal model and, when a calibration is given, by the calibrated
model, side by side.

The characteristics hold for a named measuring point on the end effector (ISO 9283 asks for one):
by default a measured reflector, whose centre the tracker reads directly; or the tip frame's
origin (``tcp``) or any point in the tip frame, both registered from three or more reflectors,
which carries the reflectors' noise times the lever arm into the figures. Beside RP the report
gives the instrument's contribution at that point: the RP the tracker's noise alone would give
(its stated uncertainty propagated through the registration, sampled).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from calib.calibration import Calibration
from calib.sensors.registration import register_frame_and_targets
from calib.sensors.tracker_points import tracker_sqrt_information
from calib.workflows import iso9283
from calib.workflows.hand_eye import HandEyeCalibration
from capture.session import Session
from rigs.errors import InputError, setting
from rigs.kinematics import ArmModel
from rigs.transforms import matrix_to_rpy, quat_xyzw

POSES = ["P1", "P2", "P3", "P4", "P5"]
# Tool z axis pointing down, the usual orientation for a tracker audit of a vertical arm.
TOOL_DOWN = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])


@dataclass
class AuditPlan:
    joint_names: list[str]
    center: np.ndarray  # (3,) m, base frame
    side: float  # m
    commanded: dict[str, np.ndarray]  # iso pose -> base_T_tip (4, 4) per the nominal model
    q: dict[str, np.ndarray]  # iso pose -> joint angles (dof,)
    cycles: int

    def rows(self) -> tuple[list[str], list[list]]:
        header = ["pose", "iso_pose", "cycle", *self.joint_names, "cmd_x", "cmd_y", "cmd_z", "cmd_qx", "cmd_qy", "cmd_qz", "cmd_qw"]
        rows = []
        for cycle in range(1, self.cycles + 1):
            for name in iso9283.CYCLE_ORDER:
                pose = self.commanded[name]
                rows.append([f"c{cycle:02d}_{name}", name, cycle, *self.q[name], *pose[:3, 3], *quat_xyzw(pose[:3, :3])])
        return header, rows


def plan_audit(chain: ArmModel, is_valid: Callable[[np.ndarray], bool], cycles: int = 30, cube: float | None = None,
               seed: int = 0, samples: int = 1500) -> AuditPlan:
    """The ISO 9283 cube, its five poses and the cycle order; InputError when the cube does not fit."""
    if cycles < 2:
        raise InputError(f"{setting('cycles')} must be at least 2 (ISO 9283 uses 30), got {cycles}.")
    if cube is not None and cube <= 0:
        raise InputError(f"{setting('cube')} must be a positive side length in metres, got {cube}.")
    rng = np.random.default_rng(seed)
    # The most used part of the workspace for a tool-down audit: where valid poses with the tool
    # pointing (roughly) down put the tool.
    tips, configurations = [], []
    for _ in range(samples * 50):
        q = rng.uniform(chain.lower, chain.upper)
        pose = chain.base_T_frame(q)
        if pose[2, 2] < -0.8 and is_valid(q):
            configurations.append(q)
            tips.append(pose[:3, 3])
            if len(tips) >= samples:
                break
    if len(tips) < 30:
        raise InputError("too few valid tool-down poses found to place the ISO 9283 cube; check the rig's sensors and floor.")
    tips = np.array(tips)
    median = np.median(tips, axis=0)
    # Candidate centres: the tool positions of sampled tool-down poses nearest the median, each
    # with its own configuration as the IK seed; the largest cube wins, ties go to the nearest.
    order = np.argsort(np.linalg.norm(tips - median, axis=1))[:16]
    sides = [cube] if cube is not None else [0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1]
    failure = "no candidate centre reached"
    for side in sides:
        for index in order:
            for plane in (0, 1):
                points = iso9283.test_plane_points(tips[index], side, plane)
                solution, failure = _reach_all(chain, points, configurations[index], is_valid)
                if solution is not None:
                    commanded = {name: chain.base_T_frame(q) for name, q in solution.items()}
                    return AuditPlan(chain.joint_names, tips[index], side, commanded, solution, cycles)
    what = f"a {cube} m cube" if cube is not None else "even a 0.1 m cube"
    raise InputError(f"{what} near {np.round(median, 3).tolist()} m does not fit the workspace ({failure}).")


def _reach_all(chain: ArmModel, points: dict[str, np.ndarray], seed: np.ndarray, is_valid) -> tuple[dict | None, str]:
    """Joint angles for P1..P5 with the tool down, each solved from P1's; (None, why) when one fails."""
    solution: dict[str, np.ndarray] = {}
    start = seed
    for name in POSES:
        target = np.eye(4)
        target[:3, :3], target[:3, 3] = TOOL_DOWN, points[name]
        q, residual = chain.inverse_kinematics(target, start)
        if residual > 1e-6:
            return None, f"{name} at {np.round(points[name], 3).tolist()} m is out of reach with the tool down"
        if not is_valid(q):
            return None, f"{name} at {np.round(points[name], 3).tolist()} m is in collision or hidden from the sensors"
        solution[name] = q
        start = solution["P1"]
    return solution, ""


# -- the report ---------------------------------------------------------------------------------

@dataclass
class Frame:
    """How attained points are read and commanded poses computed: tracker_T_base (4, 4), reflector
    offsets in the tip frame, and ``tip_poses(q (N, dof), payload_kg (N,)) -> (N, 4, 4)`` the tip in
    the base frame by this model (a calibration's includes its deflection)."""

    name: str
    tracker_T_base: np.ndarray
    targets: dict[str, np.ndarray]
    tip_poses: Callable[[np.ndarray, np.ndarray], np.ndarray]


def calibration_frame(calibration_dir: Path, session: Session) -> Frame:
    """The calibrated model of a calibration folder, of any kind: its arm and deflection, and its
    tracker frame and reflectors where it has them (a calibration from camera images or probe poses
    has its tracker frame and reflector offsets registered on the audit's own points)."""
    calibration = Calibration.load(Path(calibration_dir))
    if list(calibration.joint_names) != list(session.joint_names):
        raise InputError(f"{calibration_dir}: calibrates joints {list(calibration.joint_names)}, the session has "
                         f"{session.joint_names}.")

    def tip_poses(q: np.ndarray, payload_kg: np.ndarray) -> np.ndarray:
        poses = calibration.base_T_tip(q, payload_kg)
        poses[:, :3, 3] += calibration.tip_shift(q, payload_kg)
        return poses

    seen = set(session.tracker.targets)
    if calibration.tracker_T_base and seen <= set(calibration.targets):
        return Frame("calibrated", next(iter(calibration.tracker_T_base.values())), dict(calibration.targets), tip_poses)
    tips = tip_poses(session.q, session.payload_kg)[session.tracker.pose_index]
    frame, targets = register_frame_and_targets(tips, session.tracker.targets, session.tracker.xyz,
                                                dict(session.nominal_targets, **calibration.targets))
    return Frame("calibrated", frame, targets, tip_poses)


def nominal_frame(session: Session) -> Frame:
    """The URDF as recorded, with tracker_T_base registered on the session's own points (Kabsch)."""
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    targets = session.nominal_targets
    predicted = np.array([_apply(chain.base_T_frame(session.q[i]), targets[t])
                          for i, t in zip(session.tracker.pose_index, session.tracker.targets)])
    tracker_T_base = _register(predicted, session.tracker.xyz)
    return Frame("nominal", tracker_T_base, targets, lambda q, payload_kg: chain.base_T_tip_batch(q))


def _apply(transform: np.ndarray, point: np.ndarray) -> np.ndarray:
    return transform[:3, :3] @ point + transform[:3, 3]


def _register(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rigid transform (4, 4) that maps source (n, 3) onto target (n, 3) in least squares."""
    sc, tc = source.mean(axis=0), target.mean(axis=0)
    u, _, vt = np.linalg.svd((target - tc).T @ (source - sc))
    rotation = u @ np.diag([1.0, 1.0, np.linalg.det(u @ vt)]) @ vt
    transform = np.eye(4)
    transform[:3, :3], transform[:3, 3] = rotation, tc - rotation @ sc
    return transform


def check_audit_session(session: Session) -> dict[str, list[int]]:
    """Rows of each ISO pose; InputError when the session does not follow an audit plan."""
    if session.tracker is None:
        raise InputError(f"{session.path}: an audit needs tracker points (tracker.csv is missing).")
    labels = session.extra.get("iso_pose")
    if labels is None:
        raise InputError(f"{session.path / 'joints.csv'}: column 'iso_pose' is missing; record the audit with "
                         f"`selfcal capture --plan audit.csv`.")
    rows: dict[str, list[int]] = {name: [] for name in POSES}
    for index, label in enumerate(labels):
        if label not in rows:
            raise InputError(f"{session.path / 'joints.csv'}: row {index + 2}: iso_pose {label!r} is not one of P1..P5.")
        rows[label].append(index)
    _check_cycles(session, labels)
    for name, indices in rows.items():
        if len(indices) < 2:
            raise InputError(f"{session.path / 'joints.csv'}: pose {name} was visited {len(indices)} times; "
                             f"repeatability needs at least 2 cycles (ISO 9283 uses 30).")
        spread = np.abs(session.q[indices] - session.q[indices[0]]).max()
        if spread > 1e-9:
            row = indices[int(np.argmax(np.abs(session.q[indices] - session.q[indices[0]]).max(axis=1)))] + 2
            raise InputError(f"{session.path / 'joints.csv'}: row {row}: {name} is commanded to other joint angles "
                             f"than its first visit; the session does not follow its plan.")
    return rows


def _check_cycles(session: Session, labels: list[str]) -> None:
    """The plan's ``cycle`` column, where the session has one: a whole number from 1 on each row, and
    each ISO pose once per cycle; a session whose cycles are garbled does not follow its plan."""
    cycles = session.extra.get("cycle")
    if cycles is None:
        return
    path, seen = session.path / "joints.csv", {}
    for index, (text, label) in enumerate(zip(cycles, labels)):
        row = index + 2
        try:
            cycle = int(text.strip())
        except ValueError:
            raise InputError(f"{path}: row {row}, column 'cycle': {text!r} is not a cycle number (1, 2, ...); "
                             f"the session does not follow its audit plan.") from None
        if cycle < 1:
            raise InputError(f"{path}: row {row}, column 'cycle': {cycle} is not a cycle number (1, 2, ...).")
        if (cycle, label) in seen:
            raise InputError(f"{path}: row {row}: {label} is recorded twice in cycle {cycle} (first in row "
                             f"{seen[cycle, label]}); the session does not follow its audit plan.")
        seen[cycle, label] = row


@dataclass(frozen=True)
class MeasuringPoint:
    """Where on the end effector the characteristics hold: ``kind`` "reflector" (``name``'s centre,
    read directly), "tcp" (the tip frame's origin) or "point" (``xyz`` (3,) m in the tip frame);
    the last two are registered from three or more reflectors."""

    kind: str
    name: str
    xyz: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def describe(self) -> str:
        if self.kind == "reflector":
            return f"reflector {self.name} (its centre, measured directly)"
        where = "the tip frame's origin (tcp)" if self.kind == "tcp" else \
            f"the point ({', '.join(f'{1000 * v:.1f}' for v in self.xyz)}) mm in the tip frame"
        return f"{where}, registered from the reflectors"

    def tip_xyz(self, targets: dict[str, np.ndarray]) -> np.ndarray:
        """The point (3,) m in the tip frame, with reflector offsets ``targets`` of a model."""
        return np.asarray(targets[self.name] if self.kind == "reflector" else self.xyz, dtype=float)


def measuring_point(text: str | None, session: Session) -> MeasuringPoint:
    """The measuring point ``--point`` names (tcp, a reflector, or X,Y,Z in mm in the tip frame);
    default the first reflector (by name) measured at every pose."""
    tracker = session.tracker
    names = sorted(set(tracker.targets))
    registered = len(names) >= 3
    if text is None:
        for name in names:
            if len(set(tracker.pose_index[np.array(tracker.targets) == name])) == len(session.pose_ids):
                return MeasuringPoint("reflector", name)
        raise InputError(f"{session.path / 'tracker.csv'}: no reflector was measured at every pose; choose the "
                         f"measuring point with {setting('point')} tcp or {setting('point')} X,Y,Z.")
    text = text.strip()
    if text in names:
        return MeasuringPoint("reflector", text)
    if text == "tcp" or "," in text:
        if not registered:
            raise InputError(f"{setting('point')} {text}: a point other than a reflector is registered from three or "
                             f"more reflectors; {session.path / 'tracker.csv'} has {len(names)} ({', '.join(names)}).")
        if text == "tcp":
            return MeasuringPoint("tcp", "tcp")
        try:
            xyz = tuple(float(v) / 1000.0 for v in text.split(","))
        except ValueError:
            xyz = ()
        if len(xyz) != 3 or not np.all(np.isfinite(xyz)):
            raise InputError(f"{setting('point')} {text!r}: give X,Y,Z in mm in the tip frame, e.g. {setting('point')} "
                             f"0,0,120.")
        return MeasuringPoint("point", text, xyz)
    raise InputError(f"{setting('point')} {text!r}: not tcp, X,Y,Z (mm, tip frame) or a reflector of the session "
                     f"({', '.join(names)}).")


def attained_poses(session: Session, frame: Frame, point: MeasuringPoint) -> tuple[np.ndarray, np.ndarray | None]:
    """Attained positions (N, 3) m of the measuring point in the base frame, and tip rotations
    (N, 3, 3) when three or more reflectors give them (None otherwise)."""
    base_T_tracker = np.linalg.inv(frame.tracker_T_base)
    names = sorted(frame.targets)
    positions, rotations = [], []
    for row in range(len(session.pose_ids)):
        mask = session.tracker.pose_index == row
        seen = {t: base_T_tracker[:3, :3] @ p + base_T_tracker[:3, 3]
                for t, p in zip(np.array(session.tracker.targets)[mask], session.tracker.xyz[mask])}
        usable = [t for t in names if t in seen]
        base_T_tip = None
        if len(names) >= 3 and len(usable) >= 3:
            base_T_tip = _register(np.array([frame.targets[t] for t in usable]), np.array([seen[t] for t in usable]))
        rotations.append(None if base_T_tip is None else base_T_tip[:3, :3])
        if point.kind == "reflector":
            if point.name not in seen:
                raise InputError(f"{session.path / 'tracker.csv'}: pose {session.pose_ids[row]} has no point of "
                                 f"reflector {point.name}, the measuring point.")
            positions.append(seen[point.name])
        elif base_T_tip is not None:
            positions.append(_apply(base_T_tip, point.tip_xyz(frame.targets)))
        else:
            raise InputError(f"{session.path / 'tracker.csv'}: pose {session.pose_ids[row]} has fewer than three "
                             f"reflectors, so {point.describe()} cannot be registered.")
    orientation = None if any(r is None for r in rotations) else np.array(rotations)
    return np.array(positions), orientation


def commanded_poses(session: Session, frame: Frame, point: MeasuringPoint) -> np.ndarray:
    """Commanded tool poses (N, 4, 4) by the frame's model at the recorded joint angles, their
    origin moved to the measuring point (the orientation is the tip's)."""
    result = []
    tool = point.tip_xyz(frame.targets)
    for pose in frame.tip_poses(session.q, session.payload_kg):
        pose = pose.copy()
        pose[:3, 3] = _apply(pose, tool)
        result.append(pose)
    return np.array(result)


def instrument_repeatability(session: Session, frame: Frame, point: MeasuringPoint, row: int,
                             draws: int = 400, seed: int = 0) -> float | None:
    """The RP (m) the tracker's noise alone gives at the measuring point at pose ``row``: the stated
    uncertainty of each reflector (its per-point sigma, or half its MPEs) sampled ``draws`` times and
    carried through the registration. None when the session states no uncertainty."""
    tracker = session.tracker
    sensors = session.manifest.get("sensors", {}).get("tracker") or {}
    mask = tracker.pose_index == row
    if tracker.sigma is None and (sensors.get("distance_mpe_m") is None or sensors.get("transverse_mpe_m") is None):
        return None
    xyz = tracker.xyz[mask]
    information = tracker_sqrt_information(xyz, sensors.get("distance_mpe_m"), sensors.get("transverse_mpe_m"),
                                           None if tracker.sigma is None else tracker.sigma[mask])
    factors = np.linalg.cholesky(np.linalg.inv(np.einsum("mji,mjk->mik", information, information)))
    rng = np.random.default_rng(seed)
    noisy = xyz[None] + np.einsum("mij,kmj->kmi", factors, rng.standard_normal((draws, len(xyz), 3)))
    names = list(np.array(tracker.targets)[mask])
    if point.kind == "reflector":
        samples = noisy[:, names.index(point.name)]
    else:
        usable = [k for k, name in enumerate(names) if name in frame.targets]
        offsets = np.array([frame.targets[names[k]] for k in usable])
        tool = point.tip_xyz(frame.targets)
        samples = np.array([_apply(_register(offsets, draw[usable]), tool) for draw in noisy])
    distances = np.linalg.norm(samples - samples.mean(axis=0), axis=1)
    return float(distances.mean() + 3 * distances.std(ddof=1))


def audit_report(session: Session, calibration_dir: Path | None = None, point: str | None = None) -> dict:
    """AP, RP (and APa, RPa with 3+ reflectors) per pose, AD and RD between P2 and P4, per model, at
    the measuring point ``point`` names (see :func:`measuring_point`), with the instrument's RP there."""
    if calibration_dir is not None and HandEyeCalibration.is_one(calibration_dir):
        raise InputError(f"{calibration_dir} is a hand-eye calibration: it places the cameras and the board around the "
                         f"flange and holds no model of the arm, so it commands no pose differently from the nominal "
                         f"one and an ISO 9283 audit has nothing of it to judge; audit the arm without "
                         f"{setting('calibration_dir')}, or with a kinematic calibration (`selfcal calibrate` of a "
                         f"session with joint angles).")
    rows = check_audit_session(session)
    chosen = measuring_point(point, session)
    frames = [nominal_frame(session)]
    if calibration_dir is not None:
        frames.append(calibration_frame(calibration_dir, session))
    tracker = session.manifest.get("sensors", {}).get("tracker") or {}
    transverse = tracker.get("transverse_mpe_m", [15e-6, 6e-6])
    distance = float(np.median(np.linalg.norm(session.tracker.xyz, axis=1)))
    uncertainty = transverse[0] + transverse[1] * distance
    result = {"session": str(session.path), "cycles": min(len(v) for v in rows.values()),
              "tracker_uncertainty_mm": uncertainty * 1e3,
              "measuring_point": {"kind": chosen.kind, "name": chosen.name, "description": chosen.describe(),
                                  "tip_xyz_m": None if chosen.kind == "reflector" else list(chosen.xyz)},
              "models": {}, "warnings": []}
    for frame in frames:
        attained, rotations = attained_poses(session, frame, chosen)
        commanded = commanded_poses(session, frame, chosen)
        poses = []
        for name in POSES:
            idx = rows[name]
            angles = commanded_angles = None
            if rotations is not None:
                angles = np.array([matrix_to_rpy(r) for r in rotations[idx]])
                commanded_angles = matrix_to_rpy(commanded[idx[0]][:3, :3])
            c = iso9283.characteristics(attained[idx], commanded[idx[0]][:3, 3], angles, commanded_angles)
            instrument = instrument_repeatability(session, frame, chosen, idx[0])
            entry = {"pose": name, "AP_mm": c.accuracy * 1e3, "AP_xyz_mm": (c.accuracy_xyz * 1e3).tolist(),
                     "RP_mm": c.repeatability * 1e3, "n": len(idx),
                     "RP_instrument_mm": None if instrument is None else instrument * 1e3,
                     "commanded_xyz_m": commanded[idx[0]][:3, 3].tolist()}
            if c.orientation_accuracy is not None:
                entry["APa_deg"] = np.degrees(c.orientation_accuracy).tolist()
                entry["RPa_deg"] = np.degrees(c.orientation_repeatability).tolist()
            poses.append(entry)
        pairs = min(len(rows["P2"]), len(rows["P4"]))
        AD, RD = iso9283.distance_characteristics(attained[rows["P2"][:pairs]], attained[rows["P4"][:pairs]],
                                                  commanded[rows["P2"][0]][:3, 3], commanded[rows["P4"][0]][:3, 3])
        result["models"][frame.name] = {"poses": poses, "AD_mm": AD * 1e3, "RD_mm": RD * 1e3,
                                        "orientation": rotations is not None,
                                        "attained_m": attained.tolist()}
    limited = [e for e in result["models"]["nominal"]["poses"] if uncertainty > e["RP_mm"] / 1e3 / 4]
    if limited:
        rps = [e["RP_mm"] for e in limited]
        result["warnings"].append(
            f"the tracker's uncertainty ({uncertainty * 1e3:.3f} mm) exceeds a quarter of RP at "
            f"{', '.join(e['pose'] for e in limited)} (RP {min(rps):.3f}-{max(rps):.3f} mm): repeatability is at "
            f"the instrument's limit.")
    result["poses"] = result["models"]["calibrated" if calibration_dir is not None else "nominal"]["poses"]
    result["iso_pose_of_row"] = list(session.extra["iso_pose"])
    return result
