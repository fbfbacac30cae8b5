"""The two network shapes: a small Fourier-feature MLP per link, and a SIREN on (point, q); and
the shape of a query every self-model and its baked grids answer."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

OUTSIDE_LOGIT = -30.0  # a link's logit outside its domain: certainly free


def as_queries(points, q, dof: int) -> tuple[np.ndarray, np.ndarray]:
    """points (N, 3) m and q (N, dof) or (dof,) rad -> float32 (N, 3) and (N, dof); a q of another shape is refused."""
    points = np.asarray(points, dtype=np.float32).reshape(-1, 3)
    q = np.asarray(q, dtype=np.float32)
    if q.ndim == 1:
        if q.shape[0] != dof:
            raise ValueError(f"q has {q.shape[0]} joints, the model {dof}")
        q = np.broadcast_to(q, (len(points), dof))
    elif q.shape != (len(points), dof):
        raise ValueError(f"q has shape {q.shape}, expected ({len(points)}, {dof}) or ({dof},)")
    return points, q


class FourierMLP(nn.Module):
    """Occupancy logit of points in one link's frame.

    Points are normalised by the link's domain (``center`` (3,), ``scale`` m) to about [-1, 1];
    features are the normalised point and sin/cos at periods 4, 2, 1, ... (normalised units). The
    longest period (4) is twice the domain's width, so no feature repeats inside the domain and the
    link cannot grow periodic ghost copies of itself.
    """

    def __init__(self, center, scale: float, hidden: int = 96, layers: int = 3, frequencies: int = 6):
        super().__init__()
        self.register_buffer("center", torch.as_tensor(center, dtype=torch.float32))
        self.register_buffer("scale", torch.tensor(float(scale)))
        self.register_buffer("omegas", math.pi / 2 * 2.0 ** torch.arange(frequencies, dtype=torch.float32))
        width = 3 + 6 * frequencies
        stack = []
        for _ in range(layers):
            stack += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        stack.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*stack)

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        """points (N, 3) link frame, m -> logits (N,)."""
        x = (points - self.center) / self.scale
        angles = (x[:, :, None] * self.omegas).reshape(len(x), -1)
        return self.mlp(torch.cat([x, torch.sin(angles), torch.cos(angles)], dim=1)).squeeze(1)


class SineLayer(nn.Module):
    """A SIREN layer: sin(omega * (W x + b)) with SIREN's initialisation."""

    def __init__(self, inputs: int, outputs: int, omega: float, first: bool):
        super().__init__()
        self.omega = omega
        self.linear = nn.Linear(inputs, outputs)
        bound = 1.0 / inputs if first else math.sqrt(6.0 / inputs) / omega
        nn.init.uniform_(self.linear.weight, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.omega * self.linear(x))


class Siren(nn.Module):
    """Occupancy logit of (normalised point (3,), normalised q (dof,)), sinusoidal layers throughout."""

    def __init__(self, inputs: int, hidden: int = 256, layers: int = 5, omega: float = 30.0):
        super().__init__()
        stack = [SineLayer(inputs, hidden, omega, first=True)]
        stack += [SineLayer(hidden, hidden, omega, first=False) for _ in range(layers - 1)]
        self.body = nn.Sequential(*stack)
        self.head = nn.Linear(hidden, 1)
        bound = math.sqrt(6.0 / hidden) / omega
        nn.init.uniform_(self.head.weight, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)).squeeze(1)
