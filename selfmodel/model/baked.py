"""A structured self-model baked into per-link logit grids: the network's answers, at planner speed.

Each link's network is evaluated once on a regular grid over its domain box, in the link's own
frame; a query poses the links with the model's learned kinematics (the same chain, the same joint
corrections), moves the points into every link's grid coordinates with one matrix product, keeps
the (point, link) pairs that fall inside a grid and reads their logits by trilinear interpolation
from one raveled array of all grids (one gather of a cell's 8 corners); occupancy is the same soft
union over links as the network's (sigmoid of the log-sum-exp, computed as S / (1 + S) with S the
sum of exp(logit)). Large batches are cut into cache-sized blocks shared by two threads. The network stays the reference: ``agreement`` says how often the two disagree on
occupied/free, and ``selfmodel eval`` reports both.

On disk (``baked.npz`` in the model folder, ``allow_pickle=False``): ``pitch`` (m), and per link
``lo_<i>`` (3,) the first node (link frame, m) and ``logits_<i>`` (nx, ny, nz) float16.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rigs.errors import InputError
from rigs.files import atomic_write_bytes, load_npz
from selfmodel.model.chain import link_poses_numpy
from selfmodel.model.networks import OUTSIDE_LOGIT, as_queries
from selfmodel.model.runtime import usable_cores

PITCH = 0.004  # m between grid nodes
BAKED = "baked.npz"
CLAMP = -OUTSIDE_LOGIT  # logits are kept in [-30, 30]: beyond, sigmoid is 0 or 1 in float32


class BakedSelfModel:
    """``occupancy(points (N, 3), q (N, dof) or (dof,)) -> (N,)`` like the network it was baked from
    (a :class:`~selfmodel.model.models.StructuredSelfModel`; named as an ``nn.Module`` here because
    the model saves its baked grids, so this module cannot import it).

    ``threads``: Python threads sharing a large batch (torch releases the interpreter in its
    kernels); by default two where the process may use two cores, one otherwise.
    """

    kind = "baked"

    def __init__(self, network: nn.Module, pitch: float, origins: list[np.ndarray], grids: list[np.ndarray],
                 threads: int | None = None):
        self.network = network
        self.pitch = float(pitch)
        self.joint_names = list(network.joint_names)
        self.link_names = list(network.link_names)
        self.workspace_lo, self.workspace_hi = network.workspace_lo, network.workspace_hi
        self.origins = [np.asarray(o, dtype=np.float32) for o in origins]
        self.grids = [np.asarray(g, dtype=np.float16) for g in grids]
        self.threads = threads or min(2, usable_cores())
        self._deltas = network.chain.deltas.detach().double().cpu().numpy()
        # Every link's grid raveled into one array, so one gather reads any link's cell corners.
        shapes = np.array([g.shape for g in self.grids], dtype=np.int64)  # (L, 3) nodes along x, y, z
        self._flat = torch.from_numpy(np.concatenate([g.astype(np.float32).ravel() for g in self.grids]))
        self._offset = torch.from_numpy(np.concatenate([[0], np.cumsum(shapes.prod(axis=1))[:-1]]))
        strides = np.stack([shapes[:, 1] * shapes[:, 2], shapes[:, 2], np.ones(len(shapes), np.int64)], axis=1)
        self._strides = torch.from_numpy(strides)
        corners = np.array([[dx, dy, dz] for dx in (0, 1) for dy in (0, 1) for dz in (0, 1)])
        self._corners = torch.from_numpy(strides @ corners.T)  # (L, 8) flat offsets of a cell's corners
        self._half = (shapes - 1).astype(np.float64) / 2  # (L, 3) half the grid's extent, in nodes
        self._top = torch.from_numpy((shapes - 2).astype(np.float32))  # (L, 3) last cell's first node
        self._half_t = torch.from_numpy(self._half.astype(np.float32))

    @property
    def dof(self) -> int:
        return len(self.joint_names)

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return self.workspace_lo.copy(), self.workspace_hi.copy()

    def _affine(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """q (C, dof) -> (C, 3L, 3), (C, 3L): A @ base-frame point + b = every link's grid coordinates,
        row ``axis * L + link``, normalised so that each grid spans [-1, 1] on each axis."""
        poses = link_poses_numpy(self.network.spec, q, self._deltas)  # (C, L, 4, 4)
        rotation, translation = poses[:, :, :3, :3], poses[:, :, :3, 3]
        lo = np.stack(self.origins).astype(np.float64)
        # node coordinate = (R^T (p - t) - lo) / pitch; normalised = node / half - 1
        scale = 1.0 / (self.pitch * self._half)  # (L, 3)
        matrix = rotation.transpose(0, 1, 3, 2) * scale[None, :, :, None]  # (C, L, axis, 3)
        offset = -(np.einsum("cli,clik->clk", translation, rotation) + lo) * scale - 1.0  # (C, L, axis)
        count = len(q)
        return (matrix.transpose(0, 2, 1, 3).reshape(count, -1, 3).astype(np.float32),
                offset.transpose(0, 2, 1).reshape(count, -1).astype(np.float32))

    def _sums(self, planes: torch.Tensor) -> torch.Tensor:
        """(3L, n) normalised grid coordinates of n points (row ``axis * L + link``) -> (n,) sum over
        links of exp(logit)."""
        links_count, count = len(self.grids), planes.shape[1]
        x, y, z = planes.view(3, -1)  # each (L * n,): link-major
        # Most points lie outside most links' grids: only the (point, link) pairs inside are read.
        size = planes.abs().view(3, -1)
        pairs = (torch.maximum(torch.maximum(size[0], size[1]), size[2]) <= 1.0).nonzero().squeeze(1)
        links = pairs // count
        rows = pairs - links * count
        nodes = torch.stack([x[pairs], y[pairs], z[pairs]], dim=1).add_(1.0).mul_(self._half_t[links])
        first = torch.minimum(nodes.floor(), self._top[links])
        fraction = nodes.sub_(first)
        base = self._offset[links] + (first.long() * self._strides[links]).sum(dim=1)
        values = self._flat.take(base[:, None] + self._corners[links]).view(-1, 2, 4)  # corners by (x, (y, z))
        values = torch.lerp(values[:, 0], values[:, 1], fraction[:, 0:1]).view(-1, 2, 2)
        values = torch.lerp(values[:, 0], values[:, 1], fraction[:, 1:2])
        logits = torch.lerp(values[:, 0], values[:, 1], fraction[:, 2])
        # Links whose grid a point misses answer OUTSIDE_LOGIT, as the network's do.
        sums = torch.full((count,), links_count * OUTSIDE_EXP)
        return sums.index_add_(0, rows, logits.exp_() - OUTSIDE_EXP)

    def occupancy(self, points, q) -> np.ndarray:
        """points (N, 3) base frame m, q (N, dof) or (dof,) -> (N,) occupancy probabilities."""
        single = np.ndim(q) == 1
        points, q = as_queries(points, q, self.dof)
        out = np.zeros(len(points), dtype=np.float32)
        within = np.all((points >= self.workspace_lo) & (points <= self.workspace_hi), axis=1)
        rows = slice(None) if within.all() else np.flatnonzero(within)
        inside = torch.from_numpy(points[rows]).T  # (3, n)
        if not inside.shape[1]:
            return out
        q = q[:1] if single else q[rows]
        # Configurations are posed once per run of equal rows (a planner's batch is points x configurations).
        starts = np.array([0]) if single else np.flatnonzero(np.r_[True, np.any(q[1:] != q[:-1], axis=1)])
        matrices, offsets = (torch.from_numpy(a) for a in self._affine(q[starts]))
        count = inside.shape[1]
        if len(starts) == 1:
            def chunk(start: int, stop: int) -> torch.Tensor:
                return self._sums(torch.addmm(offsets[0][:, None], matrices[0], inside[:, start:stop]))
        elif count >= RUN * len(starts):
            ends = np.r_[starts[1:], count]

            def chunk(start: int, stop: int) -> torch.Tensor:
                planes = torch.empty((matrices.shape[1], stop - start))
                first, last = np.searchsorted(ends, start, side="right"), np.searchsorted(starts, stop, side="left")
                for run in range(first, last):
                    a, b = max(starts[run], start), min(ends[run], stop)
                    torch.addmm(offsets[run][:, None], matrices[run], inside[:, a:b], out=planes[:, a - start:b - start])
                return self._sums(planes)
        else:
            which_all = torch.from_numpy(np.cumsum(np.r_[True, np.any(q[1:] != q[:-1], axis=1)]) - 1)

            def chunk(start: int, stop: int) -> torch.Tensor:
                which = which_all[start:stop]
                planes = torch.einsum("nij,jn->in", matrices[which], inside[:, start:stop]) + offsets[which].T
                return self._sums(planes.contiguous())

        bounds = list(range(0, count, CHUNK)) + [count]
        spans = list(zip(bounds[:-1], bounds[1:]))
        with torch.no_grad():
            if self.threads > 1 and len(spans) > 1:
                parts = _pool(self.threads).map(lambda span: chunk(*span), spans)
            else:
                parts = (chunk(*span) for span in spans)
            sums = torch.cat(list(parts))
        out[rows] = (sums / (1.0 + sums)).numpy()  # sigmoid(log(sum exp(logits)))
        return out


RUN = 32  # points per configuration from which each run of equal configurations is posed on its own
CHUNK = 16_384  # points per block: the (block, 3 L) coordinates stay in cache
OUTSIDE_EXP = float(np.exp(OUTSIDE_LOGIT))
_pools: dict[int, ThreadPoolExecutor] = {}


def _pool(threads: int) -> ThreadPoolExecutor:
    if threads not in _pools:
        _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="baked")
    return _pools[threads]


def bake(network: nn.Module, pitch: float = PITCH, batch: int = 200_000) -> BakedSelfModel:
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
    arrays = {"pitch": np.array(baked.pitch)}
    for index, (origin, grid) in enumerate(zip(baked.origins, baked.grids)):
        arrays[f"lo_{index}"], arrays[f"logits_{index}"] = origin, grid
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic_write_bytes(Path(folder) / BAKED, buffer.getvalue())


def load_baked(network: nn.Module, folder: Path) -> BakedSelfModel:
    """The baked grids saved beside ``network`` in ``folder``; InputError when they do not fit it."""
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
