"""Where each link's body comes from, for the collision export.

A structured self-model answers per link (``link_bounds``, ``link_occupancy``). A free model
answers only ``occupancy(points, q)``: cut by a URDF's link frames, a link's body is what stays
occupied in that link's frame across many configurations, less what its parent's body explains.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from capture.session import Session, load_session
from rigs import urdf as urdf_io
from rigs.errors import InputError, setting
from rigs.link_meshes import link_meshes
from rigs.simulator import board_plate
from rigs.transforms import transform_points
from rigs.urdf import joints as urdf_joints
from selfmodel.export.bodies import LinkBody
from selfmodel.labels.description import board_mount
from selfmodel.model.chain import ArmLinks, link_poses_numpy
from selfmodel.model.folder import training_session_paths
from selfmodel.model.models import SelfModel


@dataclass
class LinkSource:
    """Where a link's body comes from: a box in the link frame (m) and occupancy functions on it.

    ``occupancy`` maps (N, 3) link-frame points to (N,) values whose ``level`` set is the body;
    ``level_sets`` are occupancy functions whose 0.5 level set is the model's own surface near
    this link, sampled for the automatic margin (empty: the body's own level set).
    """

    link: str
    lo: np.ndarray
    hi: np.ndarray
    occupancy: Callable[[np.ndarray], np.ndarray]
    level: float
    level_sets: list[Callable[[np.ndarray], np.ndarray]]
    # Free model only: the parent link and parent_T_link (K, 4, 4) at the configurations used;
    # what the parent's body holds in every one of them is the parent's, not this link's.
    parent: str | None = None
    parent_T_link: np.ndarray | None = None
    # Climb to corner tips for the margin; off for the free model, whose cut between a link and
    # its parent leaves ragged edges a climb would take for the link's surface.
    climb: bool = True
    # The level sets are this link's own surface (a structured model's per-link occupancy), so
    # what they need is this link's margin. Off for the free model: a link's body there is what
    # stays put across configurations, which can fall short of the link without its level set
    # showing it, so every link grows by the largest need.
    own_surface: bool = True


def less_parent(source: LinkSource, parent: LinkBody, consistency: float) -> Callable[[np.ndarray], np.ndarray]:
    """A free model's link occupancy without what its parent's body explains: a point that sits in
    the parent's body at (nearly) every configuration is the parent's. Without this, the part of
    a parent that turns about the joint axis would count twice (it looks still from both)."""

    def occupancy(points: np.ndarray) -> np.ndarray:
        explained = np.mean([parent.contains(transform_points(pose, points)) for pose in source.parent_T_link], axis=0)
        return np.where(explained >= consistency, 0.0, source.occupancy(points))

    return occupancy


BOARD_BLUR = 0.006  # m: how far beyond a 3.5 mm plate's edges and face depth blurs it (the tip's learned body
# reaches 2-4 mm past the xArm6 board's edges, under 1 % of it 6 mm); two cells of the export's grid


def with_board(occupancy: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray, board: dict,
               sharpness: float = 0.0005, blur: float = BOARD_BLUR
               ) -> tuple[Callable[[np.ndarray], np.ndarray], np.ndarray, np.ndarray]:
    """The tip's occupancy with the calibration board the session declares (``sensors.board``, at its
    mount) as matter, and its bounds grown to hold the plate. Depth blurs a 3.5 mm plate: the
    network learns it thick in the middle, past its edges, and rounds its corners off, so a corner
    of the real board would reach past the exported pieces. The plate is equipment the user stated,
    like the description in the damage check.

    At a nominal mount (``tip_T_board_nominal``), what the network learned stays beside the plate:
    where the stated mount is off, the blur holds the real board, and the carving by what the
    cameras saw through takes back what is not there. At a mount the board calibration fitted
    (``tip_T_board_fitted``, to a fraction of a millimetre) the plate is exact: within ``blur`` m
    in front of its printed face and beyond its edges, the network's matter is the blur and is
    dropped; behind the backing, inside the outline, where the plate is mounted, it stays.
    """
    tip_T_board, fitted = board_mount(board)
    board_T_tip = np.linalg.inv(tip_T_board)
    flat = board_plate(tuple(board["squares"]), float(board["square_m"]))  # board frame
    centre, half = flat.bounds.mean(axis=0), 0.5 * (flat.bounds[1] - flat.bounds[0])
    plate = flat.copy().apply_transform(tip_T_board)  # tip frame

    def combined(points: np.ndarray) -> np.ndarray:
        points = np.asarray(points, dtype=float)
        offset = points @ board_T_tip[:3, :3].T + board_T_tip[:3, 3] - centre
        local = np.abs(offset) - half
        distance = np.linalg.norm(np.maximum(local, 0), axis=1) + np.minimum(local.max(axis=1), 0)
        plate_value = 1.0 / (1.0 + np.exp(np.clip(distance / sharpness, -50, 50)))
        learned = np.asarray(occupancy(points), dtype=float)
        if fitted:
            mount = (offset[:, 2] < -half[2]) & (local[:, 0] <= 0) & (local[:, 1] <= 0)
            learned = np.where((distance < blur) & ~mount, 0.0, learned)
        return np.maximum(learned, plate_value)

    reach = 0.01
    return combined, np.minimum(lo, plate.bounds[0] - reach), np.maximum(hi, plate.bounds[1] + reach)


def board_report(board: dict | None) -> dict | None:
    """What the export did with a model's declared board, for export_report.json: the mount it took
    the plate at (``fitted`` by a calibration, named, or ``nominal``) and how far beside the plate
    the network's matter was dropped as blur (0 at a nominal mount)."""
    if not board:
        return None

    fitted = board_mount(board)[1]
    return {"mount": "fitted" if fitted else "nominal", "fitted_from": board.get("tip_T_board_fitted_from"),
            "blur_dropped_within_mm": 1000.0 * BOARD_BLUR if fitted else 0.0}


def link_sources(model: SelfModel, rng: np.random.Generator, where: str, free_configurations: int = 12,
                 free_consistency: float = 0.8) -> list[LinkSource]:
    """Per-link bodies from a structured model (``link_occupancy``) or a free one (``occupancy``)."""
    if model.kind == "structured":
        sources = []
        for link in model.link_names:
            lo, hi = (np.asarray(v, dtype=float) for v in model.link_bounds(link))
            occupancy = (lambda name: lambda points: model.link_occupancy(name, points))(link)
            if link == model.tip_link and model.board:
                occupancy, lo, hi = with_board(occupancy, lo, hi, model.board)
            sources.append(LinkSource(link, lo, hi, occupancy, 0.5, [occupancy]))
        return sources
    if model.kind == "free":
        return free_link_sources(model, rng, where, free_configurations, free_consistency)
    raise InputError(f"{where}: not a self-model of a known kind (structured or free), got {model.kind!r}.")


def free_link_sources(model: SelfModel, rng: np.random.Generator, where: str, free_configurations: int,
                      free_consistency: float) -> list[LinkSource]:
    """A free model knows no links: a link's body is what stays occupied in that link's frame
    (URDF kinematics) across many configurations; elsewhere the other links come and go."""
    urdf_path, base_link, tip_link = model.urdf_path, model.base_link, model.tip_link
    if urdf_path is None or not base_link or not tip_link:
        raise InputError(f"{where}: a free model needs a URDF with base and tip links to cut its body into links.")
    spec = ArmLinks.from_urdf(Path(urdf_path), base_link, tip_link, model.held_joints)
    if list(spec.joint_names) != list(model.joint_names):
        raise InputError(f"{urdf_path}: its joints ({', '.join(spec.joint_names)}) do not match the model's "
                         f"({', '.join(model.joint_names)}).")
    qs = training_configurations(model, spec, free_configurations, rng)
    poses = link_poses_numpy(spec, qs)  # (K, L, 4, 4) base frame
    meshes = link_meshes(Path(urdf_path), spec.link_names)
    sources = []
    for index, link in enumerate(spec.link_names):
        if link not in meshes:
            continue  # a link the description gives no body: nothing to cut out for it
        lo, hi = meshes[link].bounds
        pad = 0.25 * (hi - lo) + 0.02  # room for a learned body larger than the description
        lo, hi = lo - pad, hi + pad

        def at(k: int, link_index: int = index):
            return lambda points: model.occupancy(transform_points(poses[k, link_index], points), qs[k])

        def consistency(points: np.ndarray, link_index: int = index) -> np.ndarray:
            return np.mean([at(k, link_index)(points) for k in range(len(qs))], axis=0)

        parent = spec.link_names[spec.joints[index - 1].parent_index] if index > 0 else None
        parent_T_link = None
        if parent is not None:
            parent_T_link = np.linalg.inv(poses[:, spec.link_names.index(parent)]) @ poses[:, index]
        # The margin looks at the consistent body's own level set: a single configuration's level
        # set near this link also holds the neighbouring links, which are not this link's to cover.
        sources.append(LinkSource(link, lo, hi, consistency, free_consistency,
                                  [], parent, parent_T_link, climb=False, own_surface=False))
    return sources


def training_configurations(model: SelfModel, spec, count: int, rng: np.random.Generator) -> np.ndarray:
    """(count, dof) configurations: the model's training ones when it keeps them, else uniform in
    the URDF's joint limits."""
    known = model.training_q
    if known is not None and len(known):
        known = np.asarray(known, dtype=float)
        return known[rng.choice(len(known), size=min(count, len(known)), replace=False)]

    tree = urdf_io.parse_urdf(Path(model.urdf_path))
    infos = urdf_joints(tree)
    lower = np.array([infos[name].lower for name in spec.joint_names])
    upper = np.array([infos[name].upper for name in spec.joint_names])
    return rng.uniform(lower, upper, (count, len(lower)))


def free_model_description(folder: Path, urdf: Path | None) -> Path:
    """The description that cuts the body of the free model in ``folder`` into links: a free model
    has no links of its own, so the user names one."""
    if urdf is None:
        raise InputError(f"{folder}: a free model has no links of its own; name the description to cut its body "
                         f"into links with {setting('urdf')}.")
    return Path(urdf)


def free_model_sessions(folder: Path) -> list[Session]:
    """The sessions the free model in ``folder`` was trained on, still there: its base and tip links
    and training configurations (``FreeSelfModel.attach_description``) come from them."""
    sessions = [load_session(path) for path in training_session_paths(folder) if (Path(path) / "session.json").is_file()]
    if not sessions:
        raise InputError(f"{folder}: the sessions this free model was trained on are gone, so its base and tip links "
                         f"and its training configurations are unknown.")
    return sessions
