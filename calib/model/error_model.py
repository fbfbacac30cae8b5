"""The error model: a chain, a list of parameter groups laid out in one vector, and the tip they give.

    model = ErrorModel(chain, [JointPlacements(...), JointZeros(...), TrackerFrames(...), ...])
    state = model.arm_state(theta)
    tip = model.tip(state, poses, rows, jacobian=True)     # base_T_tip (n, 4, 4), columns (n, 6, A)

Joint terms act on the readings (``q_eff = q + zero - c * tau``), the placements on the chain
(``parent_T_joint = nominal @ exp6(delta)``), a pose set's fixed ``tip_shift`` on the tip's
position. The tip's columns are its LOCAL twist per unit of each arm parameter (placement columns
through exp6's right Jacobian; a joint term's column is the joint's reading column times the
term's derivative), so every observation block chains its own derivative onto the same columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from calib.model.chain import BatchKinematics
from calib.model.groups import (BoardPose, CameraPoses, JointCompliance, JointPlacements, JointZeros, ProbeFrames,
                                Reflectors, TrackerFrames)
from calib.model.parameters import FrameGroup, ParameterGroup, ParameterInfo
from calib.model.poses import PoseSet
from rigs.errors import InputError, setting
from rigs.kinematics import ArmModel

MODEL_KINDS = ("full", "offsets")
# The order groups take in theta; groups a model lacks are skipped.
GROUP_ORDER = ("delta", "zero", "sensor", "target", "probe", "camera", "intrinsics", "board", "compliance")


@dataclass
class ArmState:
    """The arm at one ``theta``: placements (dof, 4, 4), their exp6 right Jacobians (dof, 6, 6),
    zero offsets (dof,) and compliances (dof,) or None."""

    placements: np.ndarray
    right_jacobians: np.ndarray
    zero_offsets: np.ndarray
    compliance: np.ndarray | None


@dataclass
class TipEvaluation:
    """Tip poses of pose rows ``rows`` (n,): ``base_T_tip`` (n, 4, 4) and, for a Jacobian, ``columns``
    (n, 6, A): the tip's LOCAL twist per unit of the arm parameters ``arm_index`` (A,) of theta."""

    rows: np.ndarray
    base_T_tip: np.ndarray
    columns: np.ndarray | None
    arm_index: np.ndarray

    def where(self, pose_row: np.ndarray) -> np.ndarray:
        """Index into this evaluation of each of ``pose_row`` (M,)."""
        return np.searchsorted(self.rows, pose_row)

    def chain_into(self, jacobian: np.ndarray, tip_twist: np.ndarray, where: np.ndarray) -> None:
        """``jacobian[:, :, arm] = tip_twist @ columns[where]``: ``tip_twist`` (M, k, 6) is a
        measurement's derivative per LOCAL tip twist, ``jacobian`` (M, k, P)."""
        product = tip_twist @ self.columns[where]
        for target, source in _runs(self.arm_index):
            jacobian[:, :, target] = product[:, :, source]


def _runs(index: np.ndarray) -> list[tuple[slice, slice]]:
    """Contiguous runs of an index array as (target slice, source slice) pairs."""
    runs, start = [], 0
    for k in range(1, len(index) + 1):
        if k == len(index) or index[k] != index[k - 1] + 1:
            runs.append((slice(int(index[start]), int(index[k - 1]) + 1), slice(start, k)))
            start = k
    return runs


class ErrorModel:
    """Parameter layout and tip evaluation for a chain and a set of groups.

    ``kind``: "full" frees every group; "offsets" keeps the joint placements at their values.
    ``frames_only`` frees only the groups outside the arm (sensor frames, reflectors, probes,
    cameras, board): the arm stays as it starts.
    """

    def __init__(self, chain: ArmModel, groups: list[ParameterGroup], kind: str = "full", frames_only: bool = False):
        if kind not in MODEL_KINDS:
            raise InputError(f"{setting('kind')} must be 'full' or 'offsets', got {kind!r}.")
        self.chain = chain
        self.serial = BatchKinematics(chain)
        self.kind = kind
        self.frames_only = frames_only
        by_key = {}
        for group in groups:
            if group.key in by_key:
                raise ValueError(f"two parameter groups with key {group.key!r}")
            by_key[group.key] = group
        order = [k for k in GROUP_ORDER if k in by_key] + [k for k in by_key if k not in GROUP_ORDER]
        self.groups: dict[str, ParameterGroup] = {}
        start = 0
        for key in order:
            group = by_key[key]
            group.start = start
            start += group.size
            self.groups[key] = group
        self.names: list[ParameterInfo] = [info for group in self.groups.values() for info in group.infos()]
        for key in ("delta", "zero"):
            if key not in self.groups:
                raise ValueError(f"an error model needs the {key!r} group")
        self._nominal_placements = self.serial.placements.copy()
        arm = [np.arange(self.groups[k].slice.start, self.groups[k].slice.stop)
               for k in ("delta", "zero", "compliance") if k in self.groups]
        self.arm_index = np.concatenate(arm)

    @classmethod
    def for_sensors(cls, chain: ArmModel, sensors: list[str] | tuple = (), target_names: list[str] | tuple = (),
                    reference_tracker_T_base: dict[str, np.ndarray] | None = None, kind: str = "full",
                    reference_tip_T_probe: dict[str, np.ndarray] | None = None,
                    reference_camera_T_base: dict[str, np.ndarray] | None = None,
                    reference_tip_T_board: np.ndarray | None = None, compliance: bool = False,
                    targets: dict[str, np.ndarray] | None = None, deltas: np.ndarray | None = None,
                    zero_offsets: np.ndarray | None = None, compliances: np.ndarray | None = None,
                    frames_only: bool = False) -> "ErrorModel":
        """A model of the arm plus the named frames and reflectors (``targets``: initial offsets)."""
        serial_prismatic = BatchKinematics(chain).prismatic
        groups: list[ParameterGroup] = [JointPlacements(chain.joint_names, deltas),
                                        JointZeros(chain.joint_names, serial_prismatic, zero_offsets)]
        references = reference_tracker_T_base or {}
        if sensors:
            groups.append(TrackerFrames({s: references.get(s, np.eye(4)) for s in sensors}))
        names = list(target_names) or list(targets or {})
        if names:
            groups.append(Reflectors({n: (targets or {}).get(n, np.zeros(3)) for n in names}))
        if reference_tip_T_probe:
            groups.append(ProbeFrames(reference_tip_T_probe))
        if reference_camera_T_base:
            groups.append(CameraPoses(reference_camera_T_base))
        if reference_tip_T_board is not None:
            groups.append(BoardPose(reference_tip_T_board))
        if compliance:
            groups.append(JointCompliance(chain.joint_names, compliances))
        return cls(chain, groups, kind, frames_only)

    # -- layout -----------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def free(self) -> np.ndarray:
        """(P,) bool: the parameters this model fits."""
        free = np.ones(self.size, bool)
        for group in self.groups.values():
            if (self.frames_only and group.arm) or (self.kind == "offsets" and group.key == "delta"):
                free[group.slice] = False
            free[group.slice] &= ~group.fixed
        return free

    def group(self, key: str) -> ParameterGroup | None:
        return self.groups.get(key)

    def has(self, key: str) -> bool:
        return key in self.groups

    def initial_vector(self, targets: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """theta at every group's initial value (``targets`` replaces reflector offsets)."""
        theta = np.concatenate([group.initial() for group in self.groups.values()])
        if targets and "target" in self.groups:
            reflectors = self.groups["target"]
            for name, xyz in targets.items():
                if name in reflectors.owners:
                    theta[reflectors.owner_slice(name)] = xyz
        return theta

    def describe(self, info: ParameterInfo) -> str:
        """A parameter in words (for the identifiability report)."""
        group = self.groups.get(info.group)
        return group.describe(info) if group is not None else info.name

    # -- slices and values, by group (what blocks read) --------------------------------------------
    @property
    def delta_slice(self) -> slice:
        return self.groups["delta"].slice

    @property
    def zero_slice(self) -> slice:
        return self.groups["zero"].slice

    @property
    def compliance_slice(self) -> slice | None:
        return self.groups["compliance"].slice if "compliance" in self.groups else None

    def _owner_slices(self, key: str) -> dict[str, slice]:
        group = self.groups.get(key)
        return {} if group is None else {owner: group.owner_slice(owner) for owner in group.owners}

    @property
    def sensor_slices(self) -> dict[str, slice]:
        return self._owner_slices("sensor")

    @property
    def target_slices(self) -> dict[str, slice]:
        return self._owner_slices("target")

    @property
    def probe_slices(self) -> dict[str, slice]:
        return self._owner_slices("probe")

    @property
    def camera_slices(self) -> dict[str, slice]:
        return self._owner_slices("camera")

    @property
    def intrinsics_slices(self) -> dict[str, slice]:
        return self._owner_slices("intrinsics")

    @property
    def board_slice(self) -> slice | None:
        return self.groups["board"].slice if "board" in self.groups else None

    @property
    def target_names(self) -> list[str]:
        return list(self.groups["target"].owners) if "target" in self.groups else []

    @property
    def sensors(self) -> list[str]:
        return list(self.groups["sensor"].owners) if "sensor" in self.groups else []

    @property
    def cameras(self) -> list[str]:
        return list(self.groups["camera"].owners) if "camera" in self.groups else []

    def frame(self, key: str, theta: np.ndarray, owner: str) -> np.ndarray:
        group = self.groups.get(key)
        if not isinstance(group, FrameGroup) or owner not in group.owners:
            raise InputError(f"the calibration has no {key} frame {owner!r}.")
        return group.transform(theta, owner)

    def tracker_T_base(self, theta: np.ndarray, sensor: str) -> np.ndarray:
        return self.frame("sensor", theta, sensor)

    def tip_T_probe(self, theta: np.ndarray, probe: str) -> np.ndarray:
        return self.frame("probe", theta, probe)

    def camera_T_base(self, theta: np.ndarray, camera: str) -> np.ndarray:
        return self.frame("camera", theta, camera)

    def tip_T_board(self, theta: np.ndarray) -> np.ndarray:
        return self.frame("board", theta, "board")

    def reference(self, key: str) -> dict[str, np.ndarray]:
        group = self.groups.get(key)
        return dict(group.references) if isinstance(group, FrameGroup) else {}

    # -- evaluation -------------------------------------------------------------------------------
    def arm_state(self, theta: np.ndarray) -> ArmState:
        deltas = np.asarray(theta[self.delta_slice], float).reshape(-1, 6)
        exps = np.array([pin.exp6(pin.Motion(d)).homogeneous for d in deltas])
        jacobians = np.array([np.asarray(pin.Jexp6(pin.Motion(d))) for d in deltas])
        compliance = None if "compliance" not in self.groups else np.asarray(theta[self.compliance_slice], float)
        return ArmState(self._nominal_placements @ exps, jacobians, np.asarray(theta[self.zero_slice], float), compliance)

    def effective_joints(self, state: ArmState, poses: PoseSet, rows: np.ndarray) -> np.ndarray:
        """(n, dof) the joint angles the arm really reaches at pose rows ``rows``."""
        q = poses.q[rows] + state.zero_offsets
        if state.compliance is not None:
            q = q - state.compliance * self._torques(poses)[rows]
        return q

    def _torques(self, poses: PoseSet) -> np.ndarray:
        if poses.torques is None:
            raise InputError("a compliance model needs the torques each pose's joints hold; none were given.")
        return poses.torques

    def tip(self, state: ArmState, poses: PoseSet, rows: np.ndarray, jacobian: bool = True) -> TipEvaluation:
        """Tip poses (and columns) at pose rows ``rows`` (sorted, unique) of ``poses``."""
        rows = np.asarray(rows, int)
        result = self.serial.evaluate(self.effective_joints(state, poses, rows), state.placements, columns=jacobian)
        base_T_tip = result.base_T_tip
        if poses.tip_shift is not None:
            base_T_tip = base_T_tip.copy()
            base_T_tip[:, :3, 3] += poses.tip_shift[rows]
        if not jacobian:
            return TipEvaluation(rows, base_T_tip, None, self.arm_index)
        count, dof = len(rows), self.serial.dof
        delta_columns = np.swapaxes(result.placement_adjoints @ state.right_jacobians, 1, 2).reshape(count, 6, 6 * dof)
        parts = [delta_columns, result.joint_columns]
        if state.compliance is not None:
            parts.append(-result.joint_columns * self._torques(poses)[rows][:, None, :])
        return TipEvaluation(rows, base_T_tip, np.concatenate(parts, axis=2), self.arm_index)

    def base_T_tip(self, theta: np.ndarray, poses: PoseSet) -> np.ndarray:
        """(N, 4, 4) tip poses of every pose of ``poses`` at ``theta``."""
        return self.tip(self.arm_state(theta), poses, np.arange(len(poses)), jacobian=False).base_T_tip
