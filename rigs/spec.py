"""What a set-up is: the rig file (TOML), validated into plain dataclasses.

A rig names the robot (URDF, base and tip link), its sensors (a laser tracker with reflector
targets on the tip link, depth cameras, a marker board) and, for a simulated rig, the hidden truth
that the simulator plays (kinematic errors, compliance, damage, added bodies, noise). Built-in rigs
ship in ``rigs/builtin/`` and are named on the command line (``--rig iiwa-tracker``).

Units in the file are named in the key (``_mm``, ``_deg``, ``_um``); everything is converted to SI
here, once.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rigs import urdf as urdf_io
from rigs.depth_model import DepthModel, parse_depth_model
from rigs.documents import Table as _Table
from rigs.errors import InputError
from rigs.transforms import look_at, make_transform

BUILTIN_DIR = Path(__file__).parent / "builtin"


@dataclass(frozen=True)
class RobotSpec:
    urdf: Path
    base_link: str
    tip_link: str
    package_dirs: tuple[Path, ...] = ()
    payload_com: np.ndarray = field(default_factory=lambda: np.zeros(3))  # (3,) m, tip frame
    floor_z: float | None = None  # m in the base frame; poses keep every link above it
    # Movable joints off the base-to-tip chain (gripper fingers) held still, rad or m (SI in the file).
    held_joints: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrackerSpec:
    """A laser tracker. Accuracy is the ISO 10360-10 MPE, ``a + b * distance``, in metres."""

    base_T_tracker: np.ndarray  # (4, 4)
    distance_mpe: tuple[float, float]  # (m, m per m)
    transverse_mpe: tuple[float, float]
    # kind "points": reflectors ([[targets]]); "6dof": a probe on the tip whose full pose is measured.
    kind: str = "points"
    pose_noise: tuple[float, float] = (0.0, 0.0)  # 6dof: per-axis sigma of position (m) and rotation (rad)
    tip_T_probe: np.ndarray | None = None  # 6dof: (4, 4) nominal probe frame in the tip frame

    def sigmas(self, distance: float, scale: float = 0.5) -> tuple[float, float]:
        """(radial, transverse) per-axis standard deviations in m at ``distance`` m."""
        return (scale * (self.distance_mpe[0] + self.distance_mpe[1] * distance),
                scale * (self.transverse_mpe[0] + self.transverse_mpe[1] * distance))


@dataclass(frozen=True)
class TargetSpec:
    name: str
    xyz: np.ndarray  # (3,) nominal offset in the tip frame, m


@dataclass(frozen=True)
class CameraSpec:
    """A depth camera; pose is the optical frame (x right, y down, z forward) in the base frame."""

    name: str
    width: int
    height: int
    K: np.ndarray  # (3, 3)
    base_T_camera: np.ndarray  # (4, 4)
    depth_noise: float  # relative standard deviation of depth (the gaussian depth model's)
    near: float
    far: float
    depth_model: DepthModel = field(default_factory=DepthModel)  # how depth is measured (rigs.depth_model)


@dataclass(frozen=True)
class SceneBoxSpec:
    """A box the cameras see besides the arm (a table top, a wall): visual only, never collides."""

    name: str
    size: np.ndarray  # (3,) full side lengths, m
    base_T_box: np.ndarray  # (4, 4) box centre in the base frame
    rgba: tuple[float, float, float, float]


@dataclass(frozen=True)
class SceneSpec:
    """What stands around the arm. ``mount_plane_z``: the surface the base is bolted to (m, base
    frame); below it nothing is the arm. None: the arm hangs in empty space."""

    boxes: tuple[SceneBoxSpec, ...] = ()
    mount_plane_z: float | None = None


@dataclass(frozen=True)
class BoardSpec:
    """A ChArUco board fixed to the tip link; its pose is the board frame in the tip frame."""

    squares: tuple[int, int]
    square: float
    marker: float
    dictionary: str
    tip_T_board: np.ndarray


@dataclass(frozen=True)
class BendSpec:
    link: str
    angle: float  # rad
    axis: np.ndarray  # (3,) in the link frame


@dataclass(frozen=True)
class AddedBodySpec:
    link: str
    box: np.ndarray  # (3,) full side lengths, m
    link_T_body: np.ndarray
    mass: float


@dataclass(frozen=True)
class TorqueSensingSpec:
    """Joint torque sensing of a simulated arm: what ``effort_<joint>`` columns record.

    ``effort = sign * tau + offset + noise``: ``tau`` the true arm's inverse dynamics at the pose
    it reached (Pinocchio's convention, the torque the drive applies: at rest, the one that holds
    the arm and payload up) plus joint friction ``viscous * v + coulomb * sign(v)`` at the pose's
    velocity; ``sign`` +1 or -1 (drives that report the opposite convention); ``offset`` per joint
    (N m) drawn once per arm with standard deviation ``offset_sigma``; ``noise`` gaussian with
    standard deviation ``noise`` (N m) per reading.
    """

    noise: float  # N m
    sign: int  # +1 or -1
    offset_sigma: float  # N m
    viscous: np.ndarray | None  # (dof,) N m s / rad
    coulomb: np.ndarray | None  # (dof,) N m


@dataclass(frozen=True)
class TruthSpec:
    seed: int
    placement_translation: float  # m, standard deviation per axis
    placement_rotation: float  # rad
    zero_offset: float  # rad
    target_offset: float  # m, true reflector offsets differ from nominal by this
    repeatability: float  # m at the tool, robot repeatability noise
    tracker_noise_scale: float  # sigma = scale * MPE
    stiffness: np.ndarray | None  # (dof,) N m / rad, None: rigid
    bends: tuple[BendSpec, ...]
    added_bodies: tuple[AddedBodySpec, ...]
    # The URDF's link masses are off by this fraction from the true arm's (each link x (1 +/- it)).
    mass_error: float = 0.0
    torques: TorqueSensingSpec | None = None  # joint torque sensing, when the arm records efforts
    # The marker sits on an adapter the rig file does not describe: per session (one mount per
    # payload run) a rigid offset whose length is drawn in this range (m), in a random direction
    # and orientation; None: the reflectors or probe sit where the file says (up to target_offset).
    adapter_offset: tuple[float, float] | None = None
    unmodelled: float = 0.0  # m, RMS of a per-pose tip displacement no kinematic model explains
    # The tracker is set up anew for every session: its pose moves by these (m, rad; per-axis sigma).
    tracker_nudge: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class SweepSpec:
    """Which joints a recording moves: ``swept`` joint names move over their limits; every other
    chain joint stays at ``held`` (rad) within ``jitter`` (rad), as a run that sweeps only a few
    axes records it."""

    swept: tuple[str, ...]
    held: dict[str, float]
    jitter: float


@dataclass(frozen=True)
class Rig:
    name: str
    description: str
    source: Path
    robot: RobotSpec
    tracker: TrackerSpec | None
    targets: tuple[TargetSpec, ...]
    cameras: tuple[CameraSpec, ...]
    board: BoardSpec | None
    truth: TruthSpec | None
    scene: SceneSpec | None = None
    sweep: SweepSpec | None = None


def _pose(table: _Table, default_xyz=None) -> np.ndarray:
    """A pose from ``xyz`` plus either ``rpy`` (radians) or ``look_at`` (optical frame)."""
    xyz = table.get("xyz", "vector", default_xyz if default_xyz is not None else ..., length=3)
    rpy = table.get("rpy", "vector", None, length=3)
    target = table.get("look_at", "vector", None, length=3)
    if rpy is not None and target is not None:
        raise InputError(f"{table.where('rpy')}: give either rpy or look_at, not both.")
    if target is not None:
        return look_at(xyz, target)
    return make_transform(xyz, rpy if rpy is not None else np.zeros(3))


def _resolve_urdf(text: str, rig_path: Path) -> tuple[Path, tuple[Path, ...]]:
    if text.startswith("pybullet_data:"):
        import pybullet_data

        root = Path(pybullet_data.getDataPath())
        path = root / text.split(":", 1)[1]
        return path, (path.parent,)
    path = Path(text)
    if not path.is_absolute():
        path = rig_path.parent / path
    return path, (path.parent,)


def _held_joints(robot: _Table, urdf: Path) -> dict[str, float]:
    """``[robot] held_joints = { name = position }``: movable joints of the URDF off the base-to-tip
    chain, within their limits (rad or m)."""
    table = robot.get("held_joints", "table", None)
    if table is None:
        return {}
    tree = urdf_io.parse_urdf(urdf)
    joints = urdf_io.joints(tree, urdf)
    chain = {joint.name for joint in urdf_io.chain(tree, robot.data.get("base_link", ""), robot.data.get("tip_link", ""), urdf)}
    held = {}
    for name in list(table.data):
        value = table.get(name, "number")
        joint = joints.get(name)
        if joint is None or joint.type not in ("revolute", "continuous", "prismatic") or name in chain:
            raise InputError(f"{table.where(name)}: {name!r} is not a movable joint of {urdf} off the chain from "
                             f"base_link to tip_link.")
        if joint.type != "continuous" and not joint.lower - 1e-9 <= value <= joint.upper + 1e-9:
            raise InputError(f"{table.where(name)} = {value} is outside the joint's limits [{joint.lower}, {joint.upper}].")
        held[name] = value
    return held


def load_rig(name_or_path: str | Path) -> Rig:
    """Load a rig by built-in name (``iiwa-tracker``) or from a TOML file path."""
    path = Path(name_or_path)
    if not path.suffix and (BUILTIN_DIR / f"{name_or_path}.toml").is_file():
        path = BUILTIN_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise InputError(f"rig {str(name_or_path)!r} is neither a built-in rig ({', '.join(builtin_rigs())}) nor a file.")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: not valid TOML ({error}).") from None
    top = _Table(data, path, "")
    name = top.get("name", "str", path.stem)
    description = top.get("description", "str", "")

    robot_table = top.get("robot", "table")
    urdf, package_dirs = _resolve_urdf(robot_table.get("urdf", "str"), path)
    if not urdf.is_file():
        raise InputError(f"{robot_table.where('urdf')}: URDF {urdf} not found.")
    robot = RobotSpec(urdf, robot_table.get("base_link", "str"), robot_table.get("tip_link", "str"), package_dirs,
                      robot_table.get("payload_com", "vector", np.zeros(3), length=3),
                      robot_table.get("floor_z", "number", None), _held_joints(robot_table, urdf))
    robot_table.done()

    tracker = None
    if "tracker" in data:
        table = top.get("tracker", "table")
        distance = table.get("distance_mpe_um", "vector", np.array([10.0, 0.3]), length=2) * 1e-6
        transverse = table.get("transverse_mpe_um", "vector", np.array([15.0, 6.0]), length=2) * 1e-6
        kind = table.get("kind", "str", "points")
        if kind not in ("points", "6dof"):
            raise InputError(f"{table.where('kind')} should be 'points' or '6dof', got {kind!r}.")
        six = {}
        if kind == "6dof":
            noise = (table.get("pose_noise_mm", "number", 0.05) * 1e-3, np.radians(table.get("pose_noise_deg", "number", 0.01)))
            for key, value in zip(("pose_noise_mm", "pose_noise_deg"), noise):
                if value < 0:
                    raise InputError(f"{table.where(key)} should not be negative, got {value}.")
            six = {"pose_noise": noise, "tip_T_probe": make_transform(
                table.get("probe_xyz", "vector", np.zeros(3), length=3),
                np.radians(table.get("probe_rpy_deg", "vector", np.zeros(3), length=3)))}
        else:
            for key in ("pose_noise_mm", "pose_noise_deg", "probe_xyz", "probe_rpy_deg"):
                if key in table.data:
                    raise InputError(f"{table.where(key)} is only for a 6-DoF tracker (kind = \"6dof\").")
        tracker = TrackerSpec(_pose(table), (distance[0], distance[1]), (transverse[0], transverse[1]), kind, **six)
        table.done()

    targets = []
    for table in top.get("targets", "tables", []):
        targets.append(TargetSpec(table.get("name", "str"), table.get("xyz", "vector", length=3)))
        table.done()
    if len({t.name for t in targets}) != len(targets):
        raise InputError(f"{path}: two [[targets]] share a name.")
    if tracker is not None and tracker.kind == "points" and not targets:
        raise InputError(f"{path}: a [tracker] needs at least one [[targets]] reflector on the tip link.")

    cameras = []
    for table in top.get("cameras", "tables", []):
        width, height = table.get("width", "int"), table.get("height", "int")
        fov = np.radians(table.positive("fov_deg", 58.0))
        focal = (height / 2) / np.tan(fov / 2)
        K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1.0]])
        noise = table.get("depth_noise", "number", 0.005)
        model = parse_depth_model(table.get("depth", "table", None), noise)
        cameras.append(CameraSpec(table.get("name", "str"), width, height, K, _pose(table), noise,
                                  table.positive("near", 0.1), table.positive("far", 4.0), model))
        table.done()
    if len({c.name for c in cameras}) != len(cameras):
        raise InputError(f"{path}: two [[cameras]] share a name.")

    board = None
    if "board" in data:
        table = top.get("board", "table")
        squares = table.get("squares", "vector", length=2)
        board = BoardSpec((int(squares[0]), int(squares[1])), table.positive("square_m"), table.positive("marker_m"),
                          table.get("dictionary", "str", "DICT_4X4_50"), _pose(table, np.zeros(3)))
        table.done()

    scene = None
    if "scene" in data:
        table = top.get("scene", "table")
        boxes = []
        for box in table.get("boxes", "tables", []):
            rgba = box.get("rgba", "vector", np.array([0.6, 0.6, 0.6, 1.0]), length=4)
            if np.any(rgba < 0) or np.any(rgba > 1):
                raise InputError(f"{box.where('rgba')} should hold four numbers in [0, 1], got {rgba.tolist()}.")
            size = box.get("size", "vector", length=3)
            if np.any(size <= 0):
                raise InputError(f"{box.where('size')} should be three positive side lengths in m, got {size.tolist()}.")
            boxes.append(SceneBoxSpec(box.get("name", "str"), size, _pose(box), tuple(float(v) for v in rgba)))
            box.done()
        scene = SceneSpec(tuple(boxes), table.get("mount_plane_z", "number", None))
        table.done()

    truth = None
    if "truth" in data:
        table = top.get("truth", "table")
        stiffness = table.get("stiffness_nm_per_rad", "vector", None)
        bends = []
        for bend in table.get("bend", "tables", []):
            bends.append(BendSpec(bend.get("link", "str"), np.radians(bend.get("angle_deg", "number")),
                                  bend.get("axis", "vector", length=3)))
            bend.done()
        bodies = []
        for body in table.get("added_body", "tables", []):
            bodies.append(AddedBodySpec(body.get("link", "str"), body.get("box", "vector", length=3),
                                        _pose(body, np.zeros(3)), body.get("mass", "number", 0.0)))
            body.done()
        truth = TruthSpec(
            seed=table.get("seed", "int"),
            placement_translation=table.get("placement_translation_mm", "number", 0.0) * 1e-3,
            placement_rotation=np.radians(table.get("placement_rotation_deg", "number", 0.0)),
            zero_offset=np.radians(table.get("zero_offset_deg", "number", 0.0)),
            target_offset=table.get("target_offset_mm", "number", 0.0) * 1e-3,
            repeatability=table.get("repeatability_mm", "number", 0.0) * 1e-3,
            tracker_noise_scale=table.get("tracker_noise_scale", "number", 0.5),
            stiffness=stiffness, bends=tuple(bends), added_bodies=tuple(bodies),
            mass_error=_fraction(table, "mass_error"), torques=_torque_sensing(table),
            adapter_offset=_adapter_offset(table), unmodelled=_non_negative(table, "unmodelled_mm") * 1e-3,
            tracker_nudge=(_non_negative(table, "tracker_nudge_mm") * 1e-3,
                           np.radians(_non_negative(table, "tracker_nudge_deg"))))
        table.done()
    sweep = _sweep(top.get("sweep", "table", None), urdf, robot) if "sweep" in data else None
    top.done()
    return Rig(name, description, path, robot, tracker, tuple(targets), tuple(cameras), board, truth, scene, sweep)


def _non_negative(table: _Table, key: str) -> float:
    value = table.get(key, "number", 0.0)
    if value < 0:
        raise InputError(f"{table.where(key)} should not be negative, got {value}.")
    return value


def _adapter_offset(table: _Table) -> tuple[float, float] | None:
    """``adapter_offset_mm = [shortest, longest]``: the marker adapter's length range."""
    value = table.get("adapter_offset_mm", "vector", None, length=2)
    if value is None:
        return None
    if not 0 <= value[0] <= value[1]:
        raise InputError(f"{table.where('adapter_offset_mm')} should be [shortest, longest] with "
                         f"0 <= shortest <= longest, got {value.tolist()}.")
    return float(value[0]) * 1e-3, float(value[1]) * 1e-3


def _sweep(table: _Table, urdf: Path, robot: RobotSpec) -> SweepSpec:
    """``[sweep] joints = [...]`` moved, ``held_deg = { joint = angle }`` for the rest, ``jitter_deg``."""
    tree = urdf_io.parse_urdf(urdf)
    chain = [j.name for j in urdf_io.movable(urdf_io.chain(tree, robot.base_link, robot.tip_link, urdf))]
    swept = tuple(table.get("joints", "names"))
    for name in swept:
        if name not in chain:
            raise InputError(f"{table.where('joints')}: {name!r} is not a movable joint of the chain ({', '.join(chain)}).")
    held_table = table.get("held_deg", "table", None)
    held_table = held_table.data if held_table is not None else {}
    held = {}
    for name in chain:
        if name in swept:
            continue
        value = held_table.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{table.where('held_deg')}: {name} should be a number of degrees, got {value!r}.")
        held[name] = float(np.radians(value))
    unknown = [name for name in held_table if name not in held]
    if unknown:
        raise InputError(f"{table.where('held_deg')}: {unknown[0]!r} is not a held joint of the chain.")
    jitter = np.radians(table.get("jitter_deg", "number", 0.0))
    table.done()
    return SweepSpec(swept, held, float(jitter))


def _fraction(table: _Table, key: str) -> float:
    value = table.get(key, "number", 0.0)
    if not 0.0 <= value < 1.0:
        raise InputError(f"{table.where(key)} should be a fraction in [0, 1), got {value}.")
    return value


def _torque_sensing(truth: _Table) -> TorqueSensingSpec | None:
    """``[truth.torques]``: noise_nm, sign (+1/-1), offset_sigma_nm, viscous_nms_per_rad, coulomb_nm."""
    table = truth.get("torques", "table", None)
    if table is None:
        return None
    noise = table.get("noise_nm", "number", 0.0)
    offset = table.get("offset_sigma_nm", "number", 0.0)
    for key, value in (("noise_nm", noise), ("offset_sigma_nm", offset)):
        if value < 0:
            raise InputError(f"{table.where(key)} should not be negative, got {value}.")
    sign = table.get("sign", "int", 1)
    if sign not in (1, -1):
        raise InputError(f"{table.where('sign')} should be 1 or -1, got {sign}.")
    friction = {}
    for key in ("viscous_nms_per_rad", "coulomb_nm"):
        values = table.get(key, "vector", None)
        if values is not None and np.any(values < 0):
            raise InputError(f"{table.where(key)} should not be negative, got {values.tolist()}.")
        friction[key] = values
    table.done()
    return TorqueSensingSpec(noise, sign, offset, friction["viscous_nms_per_rad"], friction["coulomb_nm"])


def builtin_rigs() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def rig_from_urdf(urdf: Path, base_link: str, tip_link: str, package_dirs: tuple[Path, ...] = ()) -> Rig:
    """A bare rig (robot only, no sensors, no truth) for commands given ``--urdf`` instead of ``--rig``."""
    urdf = Path(urdf)
    if not urdf.is_file():
        raise InputError(f"{urdf}: URDF not found.")
    robot = RobotSpec(urdf, base_link, tip_link, (urdf.parent, *package_dirs))
    return Rig(urdf.stem, f"robot from {urdf}", urdf, robot, None, (), (), None, None)
