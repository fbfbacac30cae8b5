"""The parameter groups a calibration is made of.

Arm (``arm = True``; they act through the chain, so every sensor reads them):

- :class:`JointPlacements` ``delta``: per movable joint a 6-DoF right perturbation of its URDF origin,
  ``parent_T_joint = parent_T_joint_nominal @ exp6(delta_j)`` (m, rad; Pinocchio's twist order);
- :class:`JointZeros` ``zero``: an offset added to each joint reading (rad, m for prismatic);
- :class:`JointCompliance` ``compliance``: joint j really sits at ``q_j + zero_j - c_j tau_j`` with
  ``tau`` the torque it holds (rad/(N m), ``1/stiffness``).

Frames and offsets (each read only by the sensors that see them):

- :class:`TrackerFrames` ``sensor``: ``tracker_T_base`` per tracker session;
- :class:`Reflectors` ``target``: each reflector's offset in the tip frame, absolute (m);
- :class:`ProbeFrames` ``probe``: ``tip_T_probe`` of a 6-DoF probe;
- :class:`CameraPoses` ``camera``: ``camera_T_base`` per camera (optical frame);
- :class:`BoardPose` ``board``: ``tip_T_board`` of the board on the tool.

Frames are fitted as twists ``xi`` about a reference (their initial estimate), so ``theta = 0``
there. Fixed parameters stay in the vector (at their value), so every model shares one layout.
"""

from __future__ import annotations

import numpy as np

from calib.model.parameters import AXIS_WORDS, TWIST_AXES, FrameGroup, ParameterGroup, ParameterInfo

COMPLIANCE_UNIT = "rad/(N m)"


class JointPlacements(ParameterGroup):
    key, arm, width = "delta", True, 6

    def __init__(self, joint_names: list[str], initial: np.ndarray | None = None, fixed: np.ndarray | None = None):
        """``fixed`` (dof,) bool: joints whose placement stays at ``initial`` (they did not move)."""
        super().__init__(joint_names, initial, None if fixed is None else np.repeat(np.asarray(fixed, bool), 6))

    def label(self, owner: str, component: int) -> str:
        return f"{owner}.delta.{TWIST_AXES[component]}"

    def unit(self, component: int) -> str:
        return "m" if component < 3 else "rad"

    def describe(self, info: ParameterInfo) -> str:
        kind, preposition = ("translation", "along") if info.component < 3 else ("rotation", "about")
        return f"{kind} of {info.owner} {preposition} {AXIS_WORDS[info.component]}"


class JointZeros(ParameterGroup):
    key, arm, width = "zero", True, 1

    def __init__(self, joint_names: list[str], prismatic: np.ndarray, initial: np.ndarray | None = None,
                 fixed: np.ndarray | None = None):
        super().__init__(joint_names, initial, fixed)
        self.prismatic = np.asarray(prismatic, bool)

    def label(self, owner: str, component: int) -> str:
        return f"{owner}.zero"

    def infos(self) -> list[ParameterInfo]:
        return [ParameterInfo(f"{owner}.zero", self.key, owner, 0, "m" if prismatic else "rad")
                for owner, prismatic in zip(self.owners, self.prismatic)]

    def describe(self, info: ParameterInfo) -> str:
        return f"the zero offset of {info.owner}"


class JointCompliance(ParameterGroup):
    """One compliance per joint; ``fixed`` joints (they hold no torque to speak of) stay at 0."""

    key, arm, width = "compliance", True, 1

    def __init__(self, joint_names: list[str], initial: np.ndarray | None = None, fixed: np.ndarray | None = None):
        super().__init__(joint_names, initial, fixed)

    def label(self, owner: str, component: int) -> str:
        return f"{owner}.compliance"

    def unit(self, component: int) -> str:
        return COMPLIANCE_UNIT

    def describe(self, info: ParameterInfo) -> str:
        return f"the compliance of {info.owner}"


class TrackerFrames(FrameGroup):
    key, prefix = "sensor", "tracker_T_base"

    def describe(self, info: ParameterInfo) -> str:
        motion = "translation along" if info.component < 3 else "rotation about"
        return f"the tracker pose ({motion} {AXIS_WORDS[info.component]}, {info.owner})"


class ProbeFrames(FrameGroup):
    key, prefix = "probe", "tip_T_probe"

    def describe(self, info: ParameterInfo) -> str:
        motion = "translation along" if info.component < 3 else "rotation about"
        return f"the probe mount ({motion} {AXIS_WORDS[info.component]})"


class CameraPoses(FrameGroup):
    key, prefix = "camera", "camera_T_base"


class BoardPose(FrameGroup):
    key, prefix = "board", "tip_T_board"

    def __init__(self, reference: np.ndarray):
        super().__init__({"board": reference})

    def label(self, owner: str, component: int) -> str:
        return f"tip_T_board.{TWIST_AXES[component]}"


class Reflectors(ParameterGroup):
    key, width = "target", 3

    def __init__(self, offsets: dict[str, np.ndarray]):
        names = list(offsets)
        super().__init__(names, np.concatenate([np.asarray(offsets[n], float) for n in names]) if names else None)

    def label(self, owner: str, component: int) -> str:
        return f"target.{owner}.{'xyz'[component]}"

    def describe(self, info: ParameterInfo) -> str:
        return f"reflector {info.owner}'s offset along {'xyz'[info.component]}"

    def offset(self, theta: np.ndarray, name: str) -> np.ndarray:
        return np.asarray(theta[self.owner_slice(name)], float)
