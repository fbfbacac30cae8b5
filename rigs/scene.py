"""A 3D scene of a result, shared by the live viewer (viser) and the static view inside report.html.

A scene is plain arrays: triangle meshes, line segments, points and coordinate frames, each with a
name (``"nominal/link_3"``), a colour and a *parent*: the name of a moving body whose pose (4, 4,
in the scene's world frame) the scene recomputes at every joint configuration, or ``""`` for the
world. Lengths in metres, colours as RGB in 0..1. Moving things (an arm) are described once in
their body's frame and posed by :meth:`Scene.poses_at`; what cannot be posed that way (self-contact
lines, a free model's body) comes from :meth:`Scene.live_at` at each configuration.

The scene knows nothing of viser or of HTML: ``selfcal.view`` shows it live, ``rigs.scene_html``
embeds it in a page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rigs.transforms import quat_xyzw

Colour = tuple[float, float, float]

NOMINAL: Colour = (0.62, 0.64, 0.68)
CALIBRATED: Colour = (0.25, 0.55, 0.95)
LEARNED: Colour = (0.95, 0.6, 0.2)
FLAGGED: Colour = (0.9, 0.15, 0.15)
GOOD: Colour = (0.2, 0.7, 0.3)


@dataclass
class Mesh:
    """Triangles: ``vertices`` (n, 3) m in the parent's frame, ``faces`` (m, 3) vertex indices."""

    name: str
    vertices: np.ndarray
    faces: np.ndarray
    colour: Colour = NOMINAL
    opacity: float = 1.0
    parent: str = ""


@dataclass
class Lines:
    """Line segments: ``segments`` (n, 2, 3) m in the parent's frame."""

    name: str
    segments: np.ndarray
    colour: Colour = (0.1, 0.1, 0.1)
    parent: str = ""


@dataclass
class Points:
    """A point cloud: ``points`` (n, 3) m; ``colours`` (n, 3) in 0..1 or one colour; ``size`` m."""

    name: str
    points: np.ndarray
    colours: np.ndarray | Colour = (0.1, 0.1, 0.1)
    size: float = 0.005
    parent: str = ""


@dataclass
class Frame:
    """Coordinate axes: ``transform`` (4, 4) of the frame in its parent's frame, ``length`` m."""

    name: str
    transform: np.ndarray
    length: float = 0.1
    parent: str = ""


Item = Mesh | Lines | Points | Frame


@dataclass
class Joint:
    """A slider: ``lower``/``upper``/``value`` in rad (m for a prismatic joint)."""

    name: str
    lower: float
    upper: float
    value: float


@dataclass
class Scene:
    """What a result looks like (see the module docstring).

    ``items``: the fixed geometry; ``joints``: the sliders, in the order :meth:`poses_at` takes q;
    ``poses``: q (dof,) -> {body name: (4, 4) world_T_body} for every body named as a parent;
    ``live``: q (dof,) -> items recomputed at q (drawn in the world frame, replaced at each q);
    ``notes``: sentences the viewer shows beside the scene (what a colour or an arrow's scale means);
    ``later``: slow work whose answer can follow the first frame: () -> ({item name: colour}, notes
    to add), run by the live viewer once it serves; ``kind``: "calibration", "self-model",
    "collision export" or "fleet"; ``title``: one line.
    """

    kind: str
    title: str
    items: list[Item] = field(default_factory=list)
    joints: list[Joint] = field(default_factory=list)
    poses: Callable[[np.ndarray], dict[str, np.ndarray]] | None = None
    live: Callable[[np.ndarray], list[Item]] | None = None
    notes: list[str] = field(default_factory=list)
    later: Callable[[], tuple[dict[str, Colour], list[str]]] | None = None

    @property
    def q_start(self) -> np.ndarray:
        """(dof,) the configuration the scene opens at."""
        return np.array([joint.value for joint in self.joints], dtype=float)

    def poses_at(self, q: np.ndarray) -> dict[str, np.ndarray]:
        return {} if self.poses is None else self.poses(np.asarray(q, dtype=float))

    def live_at(self, q: np.ndarray) -> list[Item]:
        return [] if self.live is None else self.live(np.asarray(q, dtype=float))

    def bodies(self) -> list[str]:
        """Every moving body an item hangs from, in first-seen order."""
        return list(dict.fromkeys(item.parent for item in self.items if item.parent))

    def posed(self, q: np.ndarray | None = None) -> list[Item]:
        """Every item at q (default: the opening configuration) in the world frame: what a static
        picture of the scene draws."""
        q = self.q_start if q is None else np.asarray(q, dtype=float)
        poses = self.poses_at(q)
        out = [_in_world(item, poses) for item in self.items]
        return out + self.live_at(q)

    def bounds(self, q: np.ndarray | None = None, meshes_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(lo (3,), hi (3,)) m of everything drawn at q (of the meshes only: what a camera frames)."""
        chunks = [_corners(item) for item in self.posed(q) if isinstance(item, Mesh) or not meshes_only]
        chunks = [c for c in chunks if len(c)]
        if not chunks:
            return np.full(3, -0.5), np.full(3, 0.5)
        every = np.concatenate(chunks)
        return every.min(axis=0), every.max(axis=0)


def _apply(transform: np.ndarray, points: np.ndarray) -> np.ndarray:
    return points @ transform[:3, :3].T + transform[:3, 3]


def _in_world(item: Item, poses: dict[str, np.ndarray]) -> Item:
    if not item.parent:
        return item
    pose = poses[item.parent]
    if isinstance(item, Mesh):
        return Mesh(item.name, _apply(pose, item.vertices), item.faces, item.colour, item.opacity)
    if isinstance(item, Lines):
        return Lines(item.name, _apply(pose, item.segments.reshape(-1, 3)).reshape(-1, 2, 3), item.colour)
    if isinstance(item, Points):
        return Points(item.name, _apply(pose, item.points), item.colours, item.size)
    return Frame(item.name, pose @ item.transform, item.length)


def _corners(item: Item) -> np.ndarray:
    if isinstance(item, Mesh):
        return np.asarray(item.vertices).reshape(-1, 3)
    if isinstance(item, Lines):
        return np.asarray(item.segments).reshape(-1, 3)
    if isinstance(item, Points):
        return np.asarray(item.points).reshape(-1, 3)
    return item.transform[:3, 3][None]


def quaternion_wxyz(rotation: np.ndarray) -> np.ndarray:
    """(3, 3) rotation -> (4,) unit quaternion w, x, y, z (what viser and WebGL clients take)."""
    x, y, z, w = quat_xyzw(rotation)
    return np.array([w, x, y, z])


def heat(values: np.ndarray, top: float | None = None) -> np.ndarray:
    """(n,) values >= 0 -> (n, 3) colours from grey (0) through orange to red (``top``, default the
    largest value, and beyond)."""
    values = np.asarray(values, dtype=float)
    if top is None or top <= 0:
        top = values.max() if len(values) and values.max() > 0 else 1.0
    share = np.clip(values / top, 0.0, 1.0)[:, None]
    grey, orange, red = np.array(NOMINAL), np.array([0.98, 0.62, 0.15]), np.array(FLAGGED)
    low = grey + (orange - grey) * np.clip(share * 2, 0, 1)
    return np.where(share < 0.5, low, orange + (red - orange) * np.clip(share * 2 - 1, 0, 1))
