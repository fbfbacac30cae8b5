"""Occupancy self-models behind one interface: ``occupancy(points (N, 3), q (N, dof) or (dof,)) -> (N,)``.

- :class:`StructuredSelfModel` (kind ``structured``): the arm's chain from a URDF with learnable
  joint placement corrections, one small :class:`~selfmodel.model.networks.FourierMLP` per link in that
  link's frame, occupancy = union over links (a soft maximum of their logits). Which link owns which
  point is learned from the data; each network only answers inside its link's domain box.
- :class:`FreeSelfModel` (kind ``free``): one SIREN on (point, q), no kinematics: the published
  visual self-model's shape, and the choice when the chain is unknown.

Points are in the base frame, metres; q in radians (metres for prismatic joints); probabilities in
[0, 1]. Outside the workspace box the models answer 0 (nothing was ever seen there).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from selfmodel.model.chain import ChainSpec, TorchChain
from selfmodel.model.networks import FourierMLP, Siren

QUERY_BATCH = 100_000
OUTSIDE_LOGIT = -30.0  # a link's logit outside its domain: certainly free


def as_queries(points, q, dof: int) -> tuple[np.ndarray, np.ndarray]:
    points = np.asarray(points, dtype=np.float32).reshape(-1, 3)
    q = np.asarray(q, dtype=np.float32)
    if q.ndim == 1:
        if q.shape[0] != dof:
            raise ValueError(f"q has {q.shape[0]} joints, the model {dof}")
        q = np.broadcast_to(q, (len(points), dof))
    elif q.shape != (len(points), dof):
        raise ValueError(f"q has shape {q.shape}, expected ({len(points)}, {dof}) or ({dof},)")
    return points, q


class _Occupancy(nn.Module):
    """Shared by the structured and free models; each subclass defines ``logits(points, q)``."""

    kind = ""
    workspace_lo: np.ndarray
    workspace_hi: np.ndarray
    joint_names: list[str]

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Workspace box (lo (3,), hi (3,)) in the base frame, metres."""
        return self.workspace_lo.copy(), self.workspace_hi.copy()

    @property
    def dof(self) -> int:
        return len(self.joint_names)

    def _inside(self, points: np.ndarray) -> np.ndarray:
        return np.all((points >= self.workspace_lo) & (points <= self.workspace_hi), axis=1)

    @property
    def device(self) -> torch.device:
        """Where the weights are (a model is moved with ``.to(device)``; queries come back as numpy)."""
        return next(self.parameters()).device

    def occupancy(self, points, q) -> np.ndarray:
        """points (N, 3) base frame m, q (N, dof) or (dof,) -> (N,) occupancy probabilities."""
        points, q = as_queries(points, q, self.dof)
        out = np.zeros(len(points), dtype=np.float32)
        inside = np.flatnonzero(self._inside(points))
        device = self.device
        with torch.no_grad():
            for start in range(0, len(inside), QUERY_BATCH):
                rows = inside[start:start + QUERY_BATCH]
                logits = self.logits(torch.from_numpy(points[rows]).to(device),
                                     torch.from_numpy(np.ascontiguousarray(q[rows])).to(device))
                out[rows] = torch.sigmoid(logits).cpu().numpy()
        return out


class StructuredSelfModel(_Occupancy):
    """Per-link networks in link frames; union over links. See the module docstring."""

    kind = "structured"

    def __init__(self, spec: ChainSpec, domains_lo: np.ndarray, domains_hi: np.ndarray, workspace_lo: np.ndarray,
                 workspace_hi: np.ndarray, hidden: int = 96, layers: int = 3, frequencies: int = 6,
                 urdf_path: Path | None = None, base_link: str = "", tip_link: str = ""):
        super().__init__()
        self.spec = spec
        self.chain = TorchChain(spec)
        self.link_names = list(spec.link_names)
        self.joint_names = list(spec.joint_names)
        self.domains_lo = np.asarray(domains_lo, dtype=np.float32)
        self.domains_hi = np.asarray(domains_hi, dtype=np.float32)
        self.workspace_lo = np.asarray(workspace_lo, dtype=np.float32)
        self.workspace_hi = np.asarray(workspace_hi, dtype=np.float32)
        self.hyper = {"hidden": hidden, "layers": layers, "frequencies": frequencies}
        self.urdf_path = urdf_path
        self.base_link, self.tip_link = base_link, tip_link
        self.networks = nn.ModuleList([
            FourierMLP((lo + hi) / 2, float(np.max(hi - lo) / 2), hidden, layers, frequencies)
            for lo, hi in zip(self.domains_lo, self.domains_hi)])
        # Not saved (the config holds the domains), but moved with the model.
        self.register_buffer("_lo", torch.from_numpy(self.domains_lo), persistent=False)
        self.register_buffer("_hi", torch.from_numpy(self.domains_hi), persistent=False)

    # -- the contract with collision export ---------------------------------------------------
    def link_bounds(self, link: str) -> tuple[np.ndarray, np.ndarray]:
        """Domain box (lo (3,), hi (3,)) of ``link``'s network in the link frame, metres."""
        index = self.link_names.index(link)
        return self.domains_lo[index].copy(), self.domains_hi[index].copy()

    def link_occupancy(self, link: str, points_link) -> np.ndarray:
        """points (N, 3) in ``link``'s frame, m -> (N,) probabilities that ``link`` occupies them."""
        index = self.link_names.index(link)
        points = torch.from_numpy(np.asarray(points_link, dtype=np.float32).reshape(-1, 3))
        out = np.zeros(len(points), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, len(points), QUERY_BATCH):
                chunk = points[start:start + QUERY_BATCH].to(self.device)
                out[start:start + QUERY_BATCH] = torch.sigmoid(self._link_logits(index, chunk)).cpu().numpy()
        return out

    def base_T_links(self, q) -> np.ndarray:
        """q (N, dof) or (dof,) -> (N, L, 4, 4) learned link poses in the base frame."""
        q = np.atleast_2d(np.asarray(q, dtype=np.float32))
        with torch.no_grad():
            return self.chain.base_T_links(torch.from_numpy(q)).double().cpu().numpy()

    def corrected_joint_origins(self) -> dict[str, np.ndarray]:
        """Movable joint name -> learned origin (4, 4) in its parent link's frame."""
        return self.chain.corrected_origins()

    # -- evaluation ---------------------------------------------------------------------------
    def _link_logits(self, index: int, points_link: torch.Tensor) -> torch.Tensor:
        inside = torch.all((points_link >= self._lo[index]) & (points_link <= self._hi[index]), dim=1)
        logits = torch.full((len(points_link),), OUTSIDE_LOGIT, device=points_link.device)
        rows = torch.nonzero(inside).squeeze(1)
        if len(rows):
            logits = logits.index_put((rows,), self.networks[index](points_link[rows]))
        return logits

    def link_logits(self, points: torch.Tensor, base_T_links: torch.Tensor) -> torch.Tensor:
        """points (N, 3) base frame, poses (N, L, 4, 4) -> (N, L) per-link logits."""
        columns = []
        for index in range(len(self.link_names)):
            pose = base_T_links[:, index]
            rotation, translation = pose[:, :3, :3], pose[:, :3, 3]
            local = torch.einsum("nji,nj->ni", rotation, points - translation)
            columns.append(self._link_logits(index, local))
        return torch.stack(columns, dim=1)

    def logits(self, points: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        unique, inverse = torch.unique(q, dim=0, return_inverse=True)
        poses = self.chain.base_T_links(unique)[inverse]
        return torch.logsumexp(self.link_logits(points, poses), dim=1)

    def config(self) -> dict:
        return {"domains_lo": self.domains_lo.tolist(), "domains_hi": self.domains_hi.tolist(), **self.hyper}


class FreeSelfModel(_Occupancy):
    """One SIREN on (point, q) without kinematics: the baseline."""

    kind = "free"

    def __init__(self, joint_names: list[str], workspace_lo, workspace_hi, q_lo, q_hi, hidden: int = 256, layers: int = 5,
                 omega: float = 30.0):
        super().__init__()
        self.joint_names = list(joint_names)
        self.workspace_lo = np.asarray(workspace_lo, dtype=np.float32)
        self.workspace_hi = np.asarray(workspace_hi, dtype=np.float32)
        self.q_lo = np.asarray(q_lo, dtype=np.float32)
        self.q_hi = np.asarray(q_hi, dtype=np.float32)
        self.hyper = {"hidden": hidden, "layers": layers, "omega": omega}
        self.network = Siren(3 + len(joint_names), hidden, layers, omega)
        self.register_buffer("_center", torch.from_numpy(np.concatenate([(self.workspace_lo + self.workspace_hi) / 2,
                                                                         (self.q_lo + self.q_hi) / 2])))
        half = np.concatenate([np.full(3, np.max(self.workspace_hi - self.workspace_lo) / 2),
                               np.maximum((self.q_hi - self.q_lo) / 2, 1e-3)])
        self.register_buffer("_half", torch.from_numpy(half.astype(np.float32)))

    def logits(self, points: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return self.network((torch.cat([points, q], dim=1) - self._center) / self._half)

    def config(self) -> dict:
        return {"q_lo": self.q_lo.tolist(), "q_hi": self.q_hi.tolist(), **self.hyper}
