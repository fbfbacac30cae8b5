"""Is the arm intact? Per link, how far the measured body differs from a description (URDF), and how
well the data know it.

Nothing here reads the learned networks' surfaces: a network's own learning error (on the xArm6 it
makes intact links look 15-20 mm off, and a thin board look centimetres thick) would be charged to
the arm. The check uses what the training measured and what the placement fit made of it:

- ``joint``: the placement correction the fit (:mod:`selfmodel.learn.placement`) found for a joint the
  link carries. A bent link shows up here, because everything after the bend turns with the joint
  it carries. Its figure is how far that correction alone moves everything after it (the child and
  its descendants, 95th percentile over description vertices at training configurations, mm); the
  correction's rotation is the link's estimated bend (degrees). Both carry a standard deviation,
  propagated from the fit's (a Monte Carlo over the components' standard deviations), so a
  component the depth data leave free (a round link's spin) widens the figure instead of deciding it.
- ``added matter`` and ``missing matter``: the measured surface points (what the cameras saw of the
  arm at training poses, kept in the model folder) against the description posed with the fitted
  placements, signed distance to the nearest link's solid (positive outside). Points are pooled on
  a PITCH grid in the frame of the link they lie nearest to; a cell's figure is the median over it
  and its 26 neighbours (a 3 cm cube; robust to flying pixels, and not fooled by a cell just off a
  surface, which holds only the tail of the noise), with the standard error ``1.25 sigma / sqrt(n)`` of a median of ``n`` points whose spread
  ``sigma`` is the depth noise about the description over the whole arm (a robust spread). A bin
  counts only when poses agree on it (seen in at least ``MIN_POSES`` poses): a tool bolted on moves
  with its link, noise does not. Outside: matter the description lacks (a bolted-on tool, a cable
  bundle), charged to the link it hangs from (a piece of points far outside belongs to the link
  most of it lies nearest to); inside: the cameras measured a surface behind the
  described one (a cover taken off, a bent part).
- ``missing matter`` seen through: where the description has matter at a silhouette, the cameras
  see the background through it and measure no point of the arm there at all. The training
  sessions' depth images (when they are still where config.json names them) are read at
  POSES_THROUGH poses: a described surface sample whose pixel (and its neighbours) reads farther
  than the sample by more than three times the noise was seen through. A bin of samples seen
  through in most of the rays that reach it counts, with the distance from it to the nearest
  surface measured on the link as its figure.

A calibration board declared in the training session (``sensors.board``) counts as part of the
description on the tip link: it is equipment the user put there, not damage. :mod:`selfmodel.inspect.verdicts`
judges the figures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy import ndimage
from scipy.spatial import cKDTree

from rigs.errors import InputError
from rigs.transforms import exp6, log6
from selfmodel.labels.description import described_meshes, described_solids
from selfmodel.labels.seen_through import View, through_counts, training_sessions, unsupported_matter
from selfmodel.labels.unseen import PITCH as UNSEEN_PITCH, POSES, learned_cells, recorded_seen, unseen_cm3
from selfmodel.model.chain import ArmLinks, check_joint_names, link_poses_numpy

PITCH = 0.01  # m: side of the bins measured points are pooled in (link frames)
MIN_POINTS = 5  # a bin needs this many points ...
MIN_POSES = 3  # ... from this many poses to count
CONFIGURATIONS = 12  # training configurations the joint figures are read at
DRAWS = 64  # Monte Carlo draws of a correction within its standard deviation
MEDIAN_SE = 1.2533  # standard error of a median of n normal samples: this x sigma / sqrt(n)
POSES_THROUGH = 24  # training poses whose depth images the seen-through test reads
SAMPLES_THROUGH = 4000  # described surface samples per link for it
THROUGH_SHARE = 0.5  # a bin is seen through when at least this share of the rays that reach it go through


@dataclass
class LinkDeviation:
    """One link's figures, mm (and degrees). ``deviation_mm`` and ``kind`` are the largest of them;
    each figure has its standard deviation (``*_sd_mm``; None where the data do not give one)."""

    link: str
    deviation_mm: float
    kind: str  # "joint <name>", "added matter" or "missing matter"
    where_link: list[float]  # (3,) m, link frame: where the deciding figure is
    deviation_sd_mm: float | None = None
    joint: str = ""  # the movable joint this link carries whose correction is largest ("" if none)
    joint_mm: float = 0.0  # how far that correction moves everything after it
    joint_sd_mm: float | None = 0.0
    bend_deg: float = 0.0  # the correction's rotation
    bend_sd_deg: float | None = 0.0
    shift_mm: float = 0.0  # how far it moves the joint's origin
    shift_sd_mm: float | None = 0.0
    joint_where_link: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # the joint's origin
    added_mm: float = 0.0  # matter the description lacks: the bin median farthest outside
    added_sd_mm: float = 0.0
    added_where_link: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    missing_mm: float = 0.0  # matter the body lacks: the bin median deepest inside
    missing_sd_mm: float = 0.0
    missing_where_link: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    missing_seen_through: bool = False  # the missing figure is described surface the cameras saw through
    bins: int = 0  # bins of measured points that count on this link

    @property
    def shape_mm(self) -> float:
        return max(self.added_mm, self.missing_mm)


@dataclass
class DamageCheck:
    """What :func:`check_against` found: the links (largest figure first) and the depth noise."""

    rows: list[LinkDeviation]
    noise_mm: float  # robust spread of the measured points about the posed description
    bin_se_mm: float  # the standard error of a typical bin (its median count of points)
    points: int  # measured points used
    placement_fitted: bool  # the model carries a placement fit with standard deviations
    seen_through_checked: bool = False  # the training sessions' depth images were read for missing matter
    # Link -> cm3 of learned matter no depth reading ever supported (seen_through.unsupported_matter);
    # None where the training sessions could not be read.
    unsupported_cm3: dict | None = None
    # Link -> cm3 of the learned body's outer layer no camera saw at >= unseen.POSES training poses
    # (selfmodel.labels.unseen); None where the training sessions could not be read.
    unseen_cm3: dict | None = None

    def as_dict(self) -> dict:
        return {"noise_mm": self.noise_mm, "bin_se_mm": self.bin_se_mm, "points": self.points,
                "placement_fitted": self.placement_fitted, "seen_through_checked": self.seen_through_checked,
                "unsupported_matter_cm3": self.unsupported_cm3, "unseen_cm3": self.unseen_cm3,
                "unseen_min_poses": POSES,
                "links": [asdict(row) for row in self.rows]}


def _user_corrections(model, spec: ArmLinks) -> tuple[np.ndarray, np.ndarray | None]:
    """The model's fitted joint placements as corrections of ``spec``'s origins ((J, 6), and their
    standard deviations or None): where the description checked is not the one the model was trained
    with, the same posed joints are expressed against its origins."""
    fit = model.corrections
    deltas = fit.deltas if fit is not None else model.chain.deltas.detach().cpu().numpy().astype(float)
    std = fit.std if fit is not None else None
    trained = [joint for joint in model.spec.joints if joint.type != "fixed"]
    checked = [joint for joint in spec.joints if joint.type != "fixed"]
    out = np.zeros((len(checked), 6))
    for j, (mine, theirs) in enumerate(zip(trained, checked)):
        out[j] = log6(np.linalg.inv(theirs.origin) @ mine.origin @ exp6(deltas[j]))
    return out, std


def _measured_points(model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(S, 3) measured surface points, base frame, m; (S,) their configuration; q (C, dof)."""
    points, configs, q = model.surface_by_link()
    poses = model.base_T_links(q)
    base, config = [], []
    for i, link in enumerate(model.link_names):
        pose = poses[configs[link], i]
        base.append(np.einsum("nij,nj->ni", pose[:, :3, :3], points[link].astype(float)) + pose[:, :3, 3])
        config.append(configs[link])
    return np.concatenate(base), np.concatenate(config), q


def _signed_distances(spec: ArmLinks, solids: dict, poses: np.ndarray, points: np.ndarray,
                      configs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per point: (signed distance to the nearest described link, m, negative inside; that link's
    index; the point in that link's frame)."""
    grid = np.full((len(points), len(spec.link_names)), np.inf)
    local = np.zeros((len(points), len(spec.link_names), 3))
    for i, link in enumerate(spec.link_names):
        if link not in solids:
            continue
        pose = poses[configs, i]
        local[:, i] = np.einsum("nji,nj->ni", pose[:, :3, :3], points - pose[:, :3, 3])
        grid[:, i] = solids[link].signed_distance(local[:, i])
    nearest = np.argmin(grid, axis=1)
    here = local[np.arange(len(points)), nearest]
    signed = np.zeros(len(points))
    for i, link in enumerate(spec.link_names):
        mine = np.flatnonzero(nearest == i)
        if len(mine) and link in solids:
            # The grid picks the link; the mesh gives the exact distance, and the solid its side.
            distance = solids[link].distance_to_surface(here[mine])
            signed[mine] = np.where(solids[link].contains(here[mine]), -distance, distance)
    return signed, nearest, here


def _bins(local: np.ndarray, signed: np.ndarray, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points pooled around PITCH cells: for every cell holding at least MIN_POINTS points, the
    median signed distance of the points in it and its 26 neighbours (a 3-cell cube), their count,
    and the cell's centre; only cubes seen in at least MIN_POSES poses. Pooling over the cube, not
    the cell alone: a cell just off a surface holds only the noise's tail (on the xArm6 a 1 cm cell
    there reads 10-14 mm), while its neighbours hold the surface; a tool's far end is all tool."""
    if not len(local):
        return np.zeros((0, 3)), np.zeros(0), np.zeros(0, dtype=int)
    cell = np.floor(local / PITCH).astype(np.int64)
    origin = cell.min(axis=0) - 1
    span = cell.max(axis=0) - origin + 2

    def code(cells: np.ndarray) -> np.ndarray:
        shifted = cells - origin
        return (shifted[:, 0] * span[1] + shifted[:, 1]) * span[2] + shifted[:, 2]

    own, own_counts = np.unique(code(cell), return_counts=True)
    centres_of = own[own_counts >= MIN_POINTS]
    offsets = np.array([(i, j, k) for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)])
    keys = np.concatenate([code(cell + offset) for offset in offsets])
    values = np.tile(signed, len(offsets))
    poses = np.tile(configs, len(offsets))
    wanted = np.isin(keys, centres_of)
    keys, values, poses = keys[wanted], values[wanted], poses[wanted]
    cubes, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    order = np.lexsort((values, inverse))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    medians = 0.5 * (values[order[starts + (counts - 1) // 2]] + values[order[starts + counts // 2]])
    seen = np.bincount(np.unique(np.stack([inverse, poses], axis=1), axis=0)[:, 0], minlength=len(cubes))
    keep = seen >= MIN_POSES
    index = np.stack([cubes // (span[1] * span[2]), (cubes // span[2]) % span[1], cubes % span[2]], axis=1) + origin
    return (index[keep] + 0.5) * PITCH, medians[keep], counts[keep]


def _joint_figures(spec: ArmLinks, meshes: dict, q: np.ndarray, deltas: np.ndarray, std: np.ndarray | None,
                   rng: np.random.Generator) -> list[dict]:
    """Per movable joint: how far its correction alone moves everything after it (95th percentile,
    mm), its rotation (deg) and the shift of the joint's origin (mm), each with a standard deviation
    (None without one)."""
    poses = link_poses_numpy(spec, q)
    movable = [k for k, joint in enumerate(spec.joints) if joint.type != "fixed"]
    below = {k: {k + 1} for k in range(len(spec.joints))}
    for k in reversed(range(len(spec.joints))):
        parent = spec.joints[k].parent_index
        for m in range(len(spec.joints)):
            if m + 1 == parent:
                below[m] |= below[k]
    out = []
    for j, k in enumerate(movable):
        joint = spec.joints[k]
        frames = poses[:, joint.parent_index] @ joint.origin  # (C, 4, 4): the joint frame before the correction
        downstream = []
        for c in range(len(q)):
            to_joint = np.linalg.inv(frames[c])
            for index in sorted(below[k]):
                link = spec.link_names[index]
                if link in meshes:
                    vertices = meshes[link].vertices[:: max(1, len(meshes[link].vertices) // 400)]
                    pose = to_joint @ poses[c, index]
                    downstream.append(vertices @ pose[:3, :3].T + pose[:3, 3])
        if not downstream:
            out.append({"mm": 0.0, "sd_mm": 0.0, "deg": 0.0, "sd_deg": 0.0, "shift_mm": 0.0, "shift_sd_mm": 0.0})
            continue
        cloud = np.concatenate(downstream)

        def figures(delta: np.ndarray) -> tuple[float, float, float]:
            moved = exp6(delta)
            displacement = np.linalg.norm(cloud @ moved[:3, :3].T + moved[:3, 3] - cloud, axis=1)
            return (float(np.percentile(displacement, 95) * 1000), float(np.degrees(np.linalg.norm(delta[3:]))),
                    float(np.linalg.norm(moved[:3, 3]) * 1000))

        value = figures(deltas[j])
        if std is None:
            spread = (None, None, None)
        else:
            draws = np.array([figures(deltas[j] + rng.normal(0.0, 1.0, 6) * std[j]) for _ in range(DRAWS)])
            spread = tuple(float(v) for v in np.sqrt(np.mean((draws - np.array(value)) ** 2, axis=0)))
        out.append({"mm": value[0], "sd_mm": spread[0], "deg": value[1], "sd_deg": spread[1],
                    "shift_mm": value[2], "shift_sd_mm": spread[2]})
    return out


def _training_sessions(model) -> list | None:
    """The sessions the model was trained on, or None where one is gone or has no camera poses of
    its own (trained with --cameras): then nothing is seen through."""
    return training_sessions(model.folder)[0]


def _seen_through(spec: ArmLinks, meshes: dict, deltas: np.ndarray, sessions: list, margin: float,
                  rng: np.random.Generator) -> dict:
    """Link -> (described surface samples (n, 3) link frame, rays through them (n,), rays that met
    them (n,)): at up to POSES_THROUGH training poses, every camera's depth at the pixel of each
    sample posed with the fitted placements (:func:`selfmodel.labels.seen_through.through_counts`, a
    reading beyond the sample by more than ``margin`` m goes through)."""
    samples = {link: np.asarray(meshes[link].sample(SAMPLES_THROUGH, return_index=False), dtype=float)
               for link in spec.link_names if link in meshes}
    rows = [(session, row) for session in sessions for row in range(len(session.pose_ids))]
    views = []
    for index in np.sort(rng.choice(len(rows), min(POSES_THROUGH, len(rows)), replace=False)):
        session, row = rows[index]
        poses = link_poses_numpy(spec, session.q[row][None], deltas)[0]
        views.append(View(session, row, {link: poses[i] for i, link in enumerate(spec.link_names)}))
    through, met = through_counts(samples, views, lambda camera, z: margin)
    return {link: (samples[link], through[link], met[link]) for link in samples}


def _gap(samples: np.ndarray, through: np.ndarray, met: np.ndarray, measured: np.ndarray) -> tuple[float, list[float]]:
    """The described surface the cameras saw through, as (how far it lies from the nearest measured
    point of the link, m, over the bin most surely seen through; that bin's centre, link frame):
    PITCH bins of samples reached in at least MIN_POSES rays, THROUGH_SHARE of them through."""
    cell = np.floor(samples / PITCH).astype(np.int64)
    cells, inverse = np.unique(cell, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    went = np.bincount(inverse, through, len(cells))
    reached = went + np.bincount(inverse, met, len(cells))
    bins = np.flatnonzero((went >= MIN_POSES) & (went >= THROUGH_SHARE * reached))
    if not len(bins) or not len(measured):
        return 0.0, [0.0, 0.0, 0.0]
    distance = cKDTree(measured).query(samples)[0]
    best, where = 0.0, [0.0, 0.0, 0.0]
    for b in bins:
        value = float(np.median(distance[inverse == b]))
        if value > best:
            best, where = value, ((cells[b] + 0.5) * PITCH).tolist()
    return best, where


def _attached(points: np.ndarray, configs: np.ndarray, signed: np.ndarray, nearest: np.ndarray,
              far: np.ndarray) -> np.ndarray:
    """``nearest`` with the points ``far`` outside the description given to the link they hang
    from: at each configuration, far points that touch (PITCH cells, 26-connected) form one piece,
    and the whole piece belongs to the link most of its points lie nearest to. A tool bolted on the
    Panda's hand reaches past link7 and the fingers, which are nearer to its ends than the hand."""
    out = nearest.copy()
    for config in np.unique(configs[far]):
        rows = np.flatnonzero(far & (configs == config))
        cell = np.floor(points[rows] / (2 * PITCH)).astype(np.int64)  # sparse samples: 2 cm cells keep a piece whole
        cell -= cell.min(axis=0)
        grid = np.zeros(cell.max(axis=0) + 1, dtype=bool)
        grid[tuple(cell.T)] = True
        labels, count = ndimage.label(grid, structure=np.ones((3, 3, 3)))
        piece = labels[tuple(cell.T)] - 1
        votes = np.zeros((count, int(nearest.max()) + 1), dtype=int)
        np.add.at(votes, (piece, nearest[rows]), 1)
        out[rows] = np.argmax(votes, axis=1)[piece]
    return out


def check_against(model, urdf_path: Path, rng: np.random.Generator | None = None) -> DamageCheck:
    """Per-link figures (module docstring) of a structured ``model`` against the description
    ``urdf_path``, largest first."""
    if model.kind != "structured":
        raise InputError("check needs a structured model (`selfcal selfmodel train --kind structured`): a free model "
                         "has no links.")
    rng = rng or np.random.default_rng(0)
    urdf_path = Path(urdf_path)
    spec = ArmLinks.from_urdf(urdf_path, model.base_link, model.tip_link, model.spec.held)
    check_joint_names(spec, model.joint_names, str(urdf_path))
    if spec.link_names != model.link_names:
        raise InputError(f"{urdf_path}: its links from base to tip ({', '.join(spec.link_names)}) are not the model's "
                         f"({', '.join(model.link_names)}).")
    meshes = described_meshes(spec, urdf_path, model.tip_link, model.board)
    if not meshes:
        raise InputError(f"{urdf_path}: the description has no meshes on the model's chain: nothing to compare.")
    solids = described_solids(meshes)
    deltas, std = _user_corrections(model, spec)

    points, configs, q = _measured_points(model)
    poses = link_poses_numpy(spec, q, deltas)
    signed, nearest, local = _signed_distances(spec, solids, poses, points, configs)
    # The depth noise about the description, over the whole arm: a robust spread (damage is a few
    # links' share of the points, so it moves this little).
    noise = float(1.4826 * np.median(np.abs(signed - np.median(signed))))
    far = signed > max(3 * noise, 0.005)
    if far.any():
        attached = _attached(points, configs, signed, nearest, far)
        moved = np.flatnonzero(attached != nearest)
        pose = poses[configs[moved], attached[moved]]
        local[moved] = np.einsum("nji,nj->ni", pose[:, :3, :3], points[moved] - pose[:, :3, 3])
        nearest = attached

    chosen = np.sort(rng.choice(len(q), min(CONFIGURATIONS, len(q)), replace=False))
    joints = _joint_figures(spec, meshes, q[chosen], deltas, std, rng)
    movable = [k for k, joint in enumerate(spec.joints) if joint.type != "fixed"]

    sessions = _training_sessions(model)
    margin = max(3 * noise, 0.005)
    through = _seen_through(spec, meshes, deltas, sessions, margin, rng) if sessions else {}

    rows, typical = [], []
    for i, link in enumerate(spec.link_names):
        mine = nearest == i
        centres, medians, counts = _bins(local[mine], signed[mine], configs[mine])
        se = MEDIAN_SE * noise / np.sqrt(np.maximum(counts, 1))
        typical.extend(se.tolist())
        row = LinkDeviation(link, 0.0, "", [0.0, 0.0, 0.0], bins=int(len(medians)))
        if len(medians):
            # The bin most surely beyond: the largest median less two standard errors.
            out_bin = int(np.argmax(medians - 2 * se))
            in_bin = int(np.argmax(-medians - 2 * se))
            row.added_mm, row.added_sd_mm = max(0.0, float(medians[out_bin] * 1000)), float(se[out_bin] * 1000)
            row.added_where_link = centres[out_bin].tolist()
            row.missing_mm, row.missing_sd_mm = max(0.0, float(-medians[in_bin] * 1000)), float(se[in_bin] * 1000)
            row.missing_where_link = centres[in_bin].tolist()
        if link in through and mine.any():
            gap, gap_where = _gap(*through[link], local[mine])
            if gap > row.missing_mm / 1000:
                row.missing_mm, row.missing_sd_mm, row.missing_where_link = gap * 1000, noise * 1000, gap_where
                row.missing_seen_through = True
        carried = [(j, k) for j, k in enumerate(movable) if spec.joints[k].parent_index == i]
        if carried:
            j, k = max(carried, key=lambda pair: joints[pair[0]]["mm"])
            figure = joints[j]
            row.joint, row.joint_mm, row.joint_sd_mm = spec.joint_names[j], figure["mm"], figure["sd_mm"]
            row.bend_deg, row.bend_sd_deg = figure["deg"], figure["sd_deg"]
            row.shift_mm, row.shift_sd_mm = figure["shift_mm"], figure["shift_sd_mm"]
            row.joint_where_link = spec.joints[k].origin[:3, 3].tolist()
        candidates = [(row.joint_mm, row.joint_sd_mm, f"joint {row.joint}", row.joint_where_link)] if row.joint else []
        candidates += [(row.added_mm, row.added_sd_mm, "added matter", row.added_where_link),
                      (row.missing_mm, row.missing_sd_mm, "missing matter", row.missing_where_link)]
        value, sd, kind, where = max(candidates, key=lambda c: c[0] - 2 * (c[1] or 0.0))
        row.deviation_mm, row.deviation_sd_mm, row.kind, row.where_link = value, sd, kind, list(where)
        rows.append(row)
    rows.sort(key=lambda row: -(row.deviation_mm - 2 * (row.deviation_sd_mm or 0.0)))
    unsupported = unseen = None
    if sessions:
        unsupported = unsupported_matter(model, sessions)
        cells = learned_cells(model, UNSEEN_PITCH)
        recorded = model.base_T_links(np.vstack([session.q for session in sessions]))
        unseen = unseen_cm3(recorded_seen(cells, model.link_names, recorded, sessions, UNSEEN_PITCH), UNSEEN_PITCH)
    return DamageCheck(rows, noise * 1000, float(np.median(typical) * 1000) if typical else float("nan"),
                       int(len(points)), std is not None, bool(through), unsupported, unseen)
