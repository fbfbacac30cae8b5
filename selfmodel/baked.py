"""A structured self-model baked into per-link logit grids: the network's answers, at planner speed.

Each link's network is evaluated once on a regular grid over its domain box, in the link's own
frame; a query poses the links with the model's learned kinematics (the same chain, the same joint
corrections), moves the points into each link frame and reads the logits back by trilinear
interpolation (torch's ``grid_sample``); occupancy is the same soft union over links as the
network's. The network stays the reference: ``agreement`` says how often the two disagree on
occupied/free, and ``selfmodel eval`` reports both.

On disk (``baked.npz`` in the model folder, ``allow_pickle=False``): ``pitch`` (m), and per link
``lo_<i>`` (3,) the first node (link frame, m) and ``logits_<i>`` (nx, ny, nz) float16.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from selfmodel.models import OUTSIDE_LOGIT, StructuredSelfModel, _as_queries

PITCH = 0.004  # m between grid nodes
BAKED = "baked.npz"
CLAMP = -OUTSIDE_LOGIT  # logits are kept in [-30, 30]: beyond, sigmoid is 0 or 1 in float32


class BakedSelfModel:
    """``occupancy(points (N, 3), q (N, dof) or (dof,)) -> (N,)`` like the network it was baked from."""

    kind = "baked"

    def __init__(self, network: StructuredSelfModel, pitch: float, origins: list[np.ndarray], grids: list[np.ndarray]):
        self.network = network
        self.pitch = float(pitch)
        self.joint_names = list(network.joint_names)
        self.link_names = list(network.link_names)
        self.workspace_lo, self.workspace_hi = network.workspace_lo, network.workspace_hi
        self.origins = [np.asarray(o, dtype=np.float32) for o in origins]
        self.grids = [np.asarray(g, dtype=np.float16) for g in grids]
        # grid_sample reads (1, 1, z, y, x) volumes; zero padding outside means OUTSIDE_LOGIT after the shift.
        self._volumes = [torch.from_numpy(np.ascontiguousarray(g.astype(np.float32).transpose(2, 1, 0) - OUTSIDE_LOGIT))[None, None]
                         for g in self.grids]
        self._scale = [torch.from_numpy((2.0 / (self.pitch * (np.array(g.shape) - 1))).astype(np.float32)) for g in self.grids]
        self._lo = [torch.from_numpy(o) for o in self.origins]

    @property
    def dof(self) -> int:
        return len(self.joint_names)

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return self.workspace_lo.copy(), self.workspace_hi.copy()

    def link_logits_at(self, points: torch.Tensor, poses: torch.Tensor) -> torch.Tensor:
        """points (N, 3) base frame, poses (L, 4, 4) one configuration's link poses -> (N, L) logits."""
        out = torch.full((len(points), len(self._volumes)), OUTSIDE_LOGIT)
        for index, volume in enumerate(self._volumes):
            rotation, translation = poses[index, :3, :3], poses[index, :3, 3]
            local = (points - translation) @ rotation  # R^T (p - t), row vectors
            grid = (local - self._lo[index]) * self._scale[index] - 1.0
            # Most points lie outside most links' boxes: only the others are read (1.5x faster on the xArm6).
            rows = torch.nonzero((grid.abs() <= 1.0).all(dim=1)).squeeze(1)
            if len(rows):
                sampled = torch.nn.functional.grid_sample(volume, grid[rows].view(1, 1, 1, -1, 3), mode="bilinear",
                                                          padding_mode="zeros", align_corners=True)
                out[rows, index] = sampled.view(-1) + OUTSIDE_LOGIT
        return out

    def occupancy(self, points, q) -> np.ndarray:
        """points (N, 3) base frame m, q (N, dof) or (dof,) -> (N,) occupancy probabilities."""
        single = np.ndim(q) == 1
        points, q = _as_queries(points, q, self.dof)
        out = np.zeros(len(points), dtype=np.float32)
        inside = np.all((points >= self.workspace_lo) & (points <= self.workspace_hi), axis=1)
        with torch.no_grad():
            if single:
                groups = [(np.flatnonzero(inside), q[0])]
            else:
                unique, inverse = np.unique(q[inside], axis=0, return_inverse=True)
                rows = np.flatnonzero(inside)
                order = np.argsort(inverse.ravel(), kind="stable")
                bounds = np.searchsorted(inverse.ravel()[order], np.arange(len(unique) + 1))
                groups = [(rows[order[bounds[u]:bounds[u + 1]]], unique[u]) for u in range(len(unique))]
            configurations = np.stack([config for _, config in groups]) if groups else np.zeros((0, self.dof))
            poses = self.network.chain.base_T_links(torch.from_numpy(configurations.astype(np.float32))).cpu()
            for (rows, _), pose in zip(groups, poses):
                if len(rows):
                    logits = self.link_logits_at(torch.from_numpy(points[rows]), pose)
                    out[rows] = torch.sigmoid(torch.logsumexp(logits, dim=1)).numpy()
        return out


def bake(network: StructuredSelfModel, pitch: float = PITCH, batch: int = 200_000) -> BakedSelfModel:
    """Evaluate each link network on its domain's grid (nodes ``pitch`` m apart, link frame)."""
    origins, grids = [], []
    for index, link in enumerate(network.link_names):
        lo, hi = network.link_bounds(link)
        counts = np.maximum(2, np.ceil((hi - lo) / pitch).astype(int) + 1)
        axes = [lo[k] + pitch * np.arange(counts[k]) for k in range(3)]
        nodes = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3).astype(np.float32)
        values = np.empty(len(nodes), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, len(nodes), batch):
                chunk = torch.from_numpy(nodes[start:start + batch]).to(network.device)
                values[start:start + batch] = network._link_logits(index, chunk).cpu().numpy()
        origins.append(lo.astype(np.float32))
        grids.append(np.clip(values, -CLAMP, CLAMP).reshape(counts).astype(np.float16))
    return BakedSelfModel(network, pitch, origins, grids)


def save_baked(baked: BakedSelfModel, folder: Path) -> None:
    from rigs.files import atomic_write_bytes

    arrays = {"pitch": np.array(baked.pitch)}
    for index, (origin, grid) in enumerate(zip(baked.origins, baked.grids)):
        arrays[f"lo_{index}"], arrays[f"logits_{index}"] = origin, grid
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic_write_bytes(Path(folder) / BAKED, buffer.getvalue())


def load_baked(network: StructuredSelfModel, folder: Path) -> BakedSelfModel:
    """The baked grids saved beside ``network`` in ``folder``; InputError when they do not fit it."""
    from rigs.errors import InputError
    from rigs.files import load_npz

    path = Path(folder) / BAKED
    links = len(network.link_names)
    arrays = load_npz(path, ["pitch"] + [f"{kind}_{i}" for i in range(links) for kind in ("lo", "logits")])
    pitch = float(arrays["pitch"])
    origins = [arrays[f"lo_{i}"] for i in range(links)]
    grids = [arrays[f"logits_{i}"] for i in range(links)]
    if not (np.isfinite(pitch) and 1e-4 <= pitch <= 0.1) or any(o.shape != (3,) for o in origins) \
            or any(g.ndim != 3 or min(g.shape) < 2 or g.size > 50_000_000 for g in grids):
        raise InputError(f"{path}: not baked grids of this model (pitch in m, per link lo (3,) and a 3-D logit grid).")
    return BakedSelfModel(network, pitch, origins, grids)


def agreement(network, baked: BakedSelfModel, q: np.ndarray, rng: np.random.Generator, per_pose: int = 50_000) -> dict:
    """How often the baked grids and the network disagree on occupied (p > 0.5) vs free, at the
    configurations ``q`` (K, dof): on points uniform in the workspace box, and on points uniform in
    the box around the arm at each configuration (where the surface is)."""
    lo, hi = network.bounds
    uniform_wrong = near_wrong = total = 0
    for config in np.atleast_2d(q):
        points = rng.uniform(lo, hi, (per_pose, 3)).astype(np.float32)
        reference = network.occupancy(points, config) > 0.5
        uniform_wrong += int(np.sum(reference != (baked.occupancy(points, config) > 0.5)))
        occupied = points[reference]
        if len(occupied):
            box_lo, box_hi = occupied.min(axis=0) - 0.02, occupied.max(axis=0) + 0.02
            near = rng.uniform(box_lo, box_hi, (per_pose, 3)).astype(np.float32)
            near_wrong += int(np.sum((network.occupancy(near, config) > 0.5) != (baked.occupancy(near, config) > 0.5)))
        total += per_pose
    return {"baked_disagreement_workspace": uniform_wrong / max(total, 1),
            "baked_disagreement_arm_box": near_wrong / max(total, 1)}
