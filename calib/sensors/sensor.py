"""What every sensor tells the calibrator: how a session's files become observation blocks.

A :class:`Sensor` finds its data in a session (``present``), names the files it reads (for the
input hash), prepares what the blocks need once per session (detections, stated noise), builds
blocks for a set of pose rows, contributes start values of the groups it reads
(:class:`StartValues`, filled sensor after sensor, so a probe can reuse the tracker frame the
reflectors gave), offers blocks at well spread poses for the pose-set check, and turns blocks into
figures in its own units. A new kind of measurement is one module with a block and a Sensor, listed
in ``calib.sensors.registry``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from capture.session import Session


@dataclass
class StartValues:
    """Initial values of the frame and offset groups (SI units), filled in by the sensors."""

    tracker_T_base: dict[str, np.ndarray] = field(default_factory=dict)  # sensor -> (4, 4)
    targets: dict[str, np.ndarray] = field(default_factory=dict)  # reflector -> (3,) m, tip frame
    tip_T_probe: dict[str, np.ndarray] = field(default_factory=dict)
    camera_T_base: dict[str, np.ndarray] = field(default_factory=dict)
    intrinsics: dict[str, np.ndarray] = field(default_factory=dict)  # camera -> (3, 3) K, only when fitted
    tip_T_board: np.ndarray | None = None


@dataclass
class Prepared:
    """One session's data for one sensor: ``session``, its index, the pose set and sensor-specific
    ``data``. ``tool``: the session's own label when each session carries its own tool (a marker
    remounted between sessions), so its reflectors or probe are named ``<name>@<tool>``; None when
    every session shares one."""

    session: Session
    index: int
    poses: PoseSet
    data: object = None
    tool: str | None = None


def tool_name(name: str, tool: str | None) -> str:
    """The error model's name of reflector or probe ``name`` on the tool ``tool`` (None: the shared one)."""
    return name if tool is None else f"{name}@{tool}"


def plain_name(name: str) -> str:
    """A reflector or probe name without its session's tool label."""
    return name.split("@", 1)[0]


class Sensor:
    """Base of the sensors (see the module docstring); subclasses override what applies."""

    name = ""
    words = ""  # how the data is called in a sentence
    frames_first = False  # fit its frames to the nominal arm before the whole fit (a gauge choice)
    can_probe_structure = True  # offers blocks at well spread poses for the pose-set check

    def present(self, session: Session) -> bool:
        raise NotImplementedError

    def files(self, session: Session) -> list[Path]:
        return []

    def prepare(self, session: Session, index: int, poses: PoseSet, fit_rows: np.ndarray, start_chain, options) -> Prepared:
        return Prepared(session, index, poses)

    def blocks(self, prepared: Prepared, rows: np.ndarray | None) -> list:
        raise NotImplementedError

    def initialise(self, prepared: Prepared, blocks: list, base_T_tip: np.ndarray, start: StartValues,
                   start_targets: dict[str, np.ndarray]) -> None:
        """Fill ``start`` from this sensor's fit blocks; ``base_T_tip`` (N, 4, 4): the session's
        tip poses under the starting arm (nominal, or a previous calibration's)."""

    def structural_blocks(self, blocks: list, poses: PoseSet, reference: dict) -> list:
        """Blocks like ``blocks`` at the well spread poses ``poses`` (only the Jacobian's structure matters)."""
        return []

    def rows_per_pose(self, blocks: list) -> float:
        units = sum(len(b.unit_index) for b in blocks)
        poses = len({(id(b.poses), int(r)) for b in blocks for r in b.unit_pose})
        return units / max(poses, 1)

    unit = "mm"  # the unit its figures are quoted in

    def errors(self, blocks: list, model: ErrorModel, theta: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per-unit errors at ``theta``, the first array the one figures are ranked by (m or px)."""
        raise NotImplementedError

    def figures_from(self, errors: tuple[np.ndarray, ...]) -> dict:
        raise NotImplementedError

    def figures(self, blocks: list, model: ErrorModel, theta: np.ndarray) -> dict:
        return self.figures_from(self.errors(blocks, model, theta))

    def reweight(self, prepared: list[Prepared], fitted_blocks: list, model: ErrorModel, theta: np.ndarray,
                 rank: int) -> dict | None:
        """Re-estimate the noise the data does not state from a fit's residuals (blocks built from
        ``prepared`` afterwards carry it); returns what was estimated, None when nothing was."""
        return None


def join_errors(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Errors of several evaluations (folds) as one."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return ()
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0])))
