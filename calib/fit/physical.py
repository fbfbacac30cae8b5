"""What a fitted value may physically be, and whether sessions agree on their frames.

Two guards that keep a calibration from being written when its numbers cannot be the arm's:

- ``physical_problems``: a reflector or probe that the fit put further from the flange than
  twice the arm's length, or a joint placement that moved by more than the arm is long, is no measurement
  of the arm; the poses let the value drift along what they cannot separate. Each is named.
- ``tool_disagreement``: sessions fitted with one tool must see one tool. Each session's tool is
  placed in closed form from its own data (with the starting arm); when two sessions place it
  further apart than their own scatter allows, the marker was remounted between them and one
  shared tool cannot fit both, so the fit stops with a sentence naming the option that gives each
  session its own tool.
"""

from __future__ import annotations

import numpy as np

from calib.model.error_model import ErrorModel
from calib.sensors.sensor import plain_name
from rigs.errors import setting
from rigs.kinematics import ArmModel

# Two sessions disagree on the tool when a point of it lies further apart between them than this
# many times the larger session's own closed-form scatter, and at least TOOL_AGREEMENT_FLOOR_M.
TOOL_AGREEMENT_SCATTERS = 3.0
TOOL_AGREEMENT_FLOOR_M = 0.005
PROBE_LEVER_M = 0.1  # a probe's orientation is compared as points this far along its axes
# A tool may be longer than the links' summed offsets (a small arm, or a discovered chain whose tip
# frame sits at its last joint, carries a long adapter), but no arm carries a tool twice its own
# length: a reflector or probe further than this many arm lengths from the flange is the fit's drift.
TOOL_REACH_ARMS = 2.0


def arm_reach(chain: ArmModel) -> float:
    """The arm's length (m): the joint placements' and the tip frame's translations, summed along the chain."""
    model = chain.model
    total = sum(float(np.linalg.norm(model.jointPlacements[j].translation)) for j in chain.joint_ids)
    return total + float(np.linalg.norm(model.frames[chain.tip_frame].placement.translation))


def physical_problems(model: ErrorModel, theta: np.ndarray, reach: float) -> list[str]:
    """One sentence per fitted value the arm cannot have: a reflector or probe further than
    ``TOOL_REACH_ARMS`` times ``reach`` (m, the arm's length) from the flange, a joint placement
    moved by more than ``reach``."""
    problems = []
    tool_limit = TOOL_REACH_ARMS * reach
    beyond = f"beyond {TOOL_REACH_ARMS:g} times the arm's own length of {reach:.2f} m"
    reflectors = model.group("target")
    if reflectors is not None:
        for name in reflectors.owners:
            offset = reflectors.offset(theta, name)
            if np.linalg.norm(offset) > tool_limit:
                problems.append(f"reflector {name}'s offset lies {np.linalg.norm(offset):.3g} m from the flange "
                                f"(tip frame {_xyz(offset)}), {beyond}")
    for name in model.probe_slices:
        offset = model.tip_T_probe(theta, name)[:3, 3]
        if np.linalg.norm(offset) > tool_limit:
            problems.append(f"probe {name}'s origin lies {np.linalg.norm(offset):.3g} m from the flange "
                            f"(tip frame {_xyz(offset)}), {beyond}")
    deltas = theta[model.delta_slice].reshape(-1, 6)
    for joint, delta in zip(model.chain.joint_names, deltas):
        if np.linalg.norm(delta[:3]) > reach:
            problems.append(f"the placement of {joint} moved {np.linalg.norm(delta[:3]):.3g} m, longer than the "
                            f"arm ({reach:.2f} m)")
    return problems


def _xyz(vector: np.ndarray) -> str:
    return "(" + ", ".join(f"{v:.3g}" for v in vector) + ") m"


def tool_points(targets: dict[str, np.ndarray], probes: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A session's tool as named points (m, tip frame): its reflectors, and per probe its origin and
    points ``PROBE_LEVER_M`` along its axes; names without the session's tool label."""
    points = {plain_name(name): np.asarray(xyz, float) for name, xyz in targets.items()}
    for name, frame in probes.items():
        points[f"{plain_name(name)} origin"] = frame[:3, 3]
        for axis, letter in enumerate("xyz"):
            points[f"{plain_name(name)} {letter} axis"] = frame[:3, 3] + PROBE_LEVER_M * frame[:3, axis]
    return points


def tool_disagreement(tools: list[tuple[str, dict[str, np.ndarray], float]]) -> str | None:
    """The sentence for the pair of sessions whose tools differ most beyond their scatter, or None.

    ``tools``: per session (its folder, its tool's named points (m, tip frame), its closed-form
    scatter (m, RMS of its own points' errors))."""
    worst = None
    for a in range(len(tools)):
        for b in range(a + 1, len(tools)):
            (path_a, points_a, scatter_a), (path_b, points_b, scatter_b) = tools[a], tools[b]
            limit = max(TOOL_AGREEMENT_FLOOR_M, TOOL_AGREEMENT_SCATTERS * max(scatter_a, scatter_b))
            for name in sorted(set(points_a) & set(points_b)):
                apart = float(np.linalg.norm(points_a[name] - points_b[name]))
                if apart > limit and (worst is None or apart / limit > worst[0]):
                    worst = (apart / limit, path_a, path_b, name, apart, limit)
    if worst is None:
        return None
    _, path_a, path_b, name, apart, limit = worst
    return (f"the tool differs between sessions {path_a} and {path_b}: {name} sits {apart * 1e3:.1f} mm apart on the "
            f"flange when each session places it alone (their own scatter allows {limit * 1e3:.1f} mm), so one tool "
            f"cannot fit both; if the marker was remounted between them, calibrate with {setting('per_session')} tool "
            f"(each session its own tool, the arm fitted once).")
