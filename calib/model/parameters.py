"""Parameter groups: one flat vector ``theta`` made of named, separately initialised pieces.

A group owns a contiguous slice of ``theta`` (placed by :class:`calib.model.error_model.ErrorModel`),
names every entry (:class:`ParameterInfo`), says what it starts at, whether it belongs to the arm
itself (the ``--model offsets`` choice frees only the zero offsets of the arm) and how to describe
an entry in words for the identifiability report. Adding a kind of parameter (a payload, a torque
offset) means adding a group here and a block that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

TWIST_AXES = ("x", "y", "z", "rx", "ry", "rz")
AXIS_WORDS = ("x", "y", "z", "x", "y", "z")


@dataclass
class ParameterInfo:
    """One entry of the parameter vector."""

    name: str  # e.g. "lbr_iiwa_joint_3.delta.z", "lbr_iiwa_joint_3.zero", "tracker_T_base.s0.rx", "target.smr1.y"
    group: str  # the group's key: "delta", "zero", "sensor", "target", "probe", "camera", "intrinsics", "board", "compliance"
    owner: str  # joint, sensor, reflector, probe or camera name
    component: int  # index inside the owner's block
    unit: str  # "m", "rad", "rad/(N m)", "px"


class ParameterGroup:
    """A named piece of ``theta``: ``owners`` each hold ``width`` components.

    Subclasses set ``key`` (the :attr:`ParameterInfo.group`), ``arm`` (part of the arm's own
    geometry or joints), ``width`` and the component labels and units.
    """

    key = ""
    arm = False
    width = 1

    def __init__(self, owners: list[str], initial: np.ndarray | None = None, fixed: np.ndarray | None = None):
        self.owners = list(owners)
        self.start = 0  # set by the model's layout
        values = np.zeros(self.size) if initial is None else np.asarray(initial, float).reshape(self.size)
        self._initial = values.copy()
        # Entries held at their initial value whatever the model's kind (a quantity the data cannot carry).
        self.fixed = np.zeros(self.size, bool) if fixed is None else np.asarray(fixed, bool).reshape(self.size)

    @property
    def size(self) -> int:
        return self.width * len(self.owners)

    def label(self, owner: str, component: int) -> str:
        return f"{owner}.{component}"

    def unit(self, component: int) -> str:
        return "m"

    def infos(self) -> list[ParameterInfo]:
        return [ParameterInfo(self.label(owner, c), self.key, owner, c, self.unit(c))
                for owner in self.owners for c in range(self.width)]

    def initial(self) -> np.ndarray:
        return self._initial.copy()

    @property
    def slice(self) -> slice:
        return slice(self.start, self.start + self.size)

    def owner_slice(self, owner: str) -> slice:
        first = self.start + self.width * self.owners.index(owner)
        return slice(first, first + self.width)

    def values(self, theta: np.ndarray) -> np.ndarray:
        """(owners, width) this group's part of ``theta``."""
        return np.asarray(theta[self.slice], float).reshape(len(self.owners), self.width)

    def describe(self, info: ParameterInfo) -> str:
        return info.name


class FrameGroup(ParameterGroup):
    """Rigid frames ``reference_o @ exp6(xi_o)`` per owner (6 components: Pinocchio's twist order)."""

    width = 6
    prefix = ""

    def __init__(self, references: dict[str, np.ndarray]):
        super().__init__(list(references))
        self.references = {name: np.asarray(pose, float).copy() for name, pose in references.items()}

    def label(self, owner: str, component: int) -> str:
        return f"{self.prefix}.{owner}.{TWIST_AXES[component]}"

    def unit(self, component: int) -> str:
        return "m" if component < 3 else "rad"

    def transform(self, theta: np.ndarray, owner: str) -> np.ndarray:
        """(4, 4) the owner's frame at ``theta``."""
        twist = np.asarray(theta[self.owner_slice(owner)], float)
        return self.references[owner] @ pin.exp6(pin.Motion(twist)).homogeneous

    def right_jacobian(self, theta: np.ndarray, owner: str) -> np.ndarray:
        """(6, 6) d(frame twist)/d(xi): ``reference exp6(xi + d) = frame exp6(J d)``."""
        return np.asarray(pin.Jexp6(pin.Motion(np.asarray(theta[self.owner_slice(owner)], float))))
