"""Planning with a real planner on an exported collision model, and replaying what it planned.

OMPL's RRT-Connect (the ``ompl`` wheels, pinned in pyproject.toml) searches the chain's joint
space; a configuration is valid when a :class:`~selfmodel.export.world.CollisionWorld` (the
URDF and SRDF as Pinocchio and coal load them, plus box obstacles) finds no collision. Motions are
checked by OMPL every ``step`` of joint-space distance (0.5 degrees: OMPL's default, 1 % of the
space's diagonal, is about 0.3 rad on a 6-axis arm, enough to step through a link); a planned path
is judged by :func:`replay` on another world (the true arm) at half that step on every joint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass
class PlanResult:
    solved: bool
    path: np.ndarray | None  # (K, dof) waypoints from start to goal
    seconds: float
    reason: str = ""  # why it failed: "start in collision", "goal in collision", "no path in time"


def _ompl():
    import ompl.util as ou  # OMPL loads only when a planner is asked
    from ompl import base as ob, geometric as og  # OMPL loads only when a planner is asked

    ou.setLogLevel(ou.LOG_NONE)
    return ou, ob, og


def plan(world, start: np.ndarray, goal: np.ndarray, lower: np.ndarray, upper: np.ndarray, seconds: float = 2.0,
         step: float = np.radians(0.5), seed: int = 0, simplify: bool = True, checks: int | None = None) -> PlanResult:
    """A collision-free path for ``world`` from ``start`` to ``goal`` (dof,) within the joint limits.

    ``checks``: also stop the search after this many collision checks, so worlds whose checks cost
    different times get the same budget (``seconds`` then only caps a runaway query)."""
    ou, ob, og = _ompl()
    ou.RNG.setSeed(int(seed) + 1)
    start_time = time.perf_counter()
    if world.collides(start):
        return PlanResult(False, None, 0.0, "start in collision")
    if world.collides(goal):
        return PlanResult(False, None, 0.0, "goal in collision")
    dof = len(start)
    space = ob.RealVectorStateSpace(dof)
    bounds = ob.RealVectorBounds(dof)
    for i in range(dof):
        bounds.setLow(i, float(lower[i]))
        bounds.setHigh(i, float(upper[i]))
    space.setBounds(bounds)
    setup = og.SimpleSetup(space)
    used = [0]

    def valid(state) -> bool:
        used[0] += 1
        return not world.collides(np.array([state[i] for i in range(dof)]))

    setup.setStateValidityChecker(valid)
    information = setup.getSpaceInformation()
    information.setStateValidityCheckingResolution(min(1.0, step / space.getMaximumExtent()))
    begin, end = space.allocState(), space.allocState()
    for i in range(dof):
        begin[i], end[i] = float(start[i]), float(goal[i])
    setup.setStartAndGoalStates(begin, end)
    setup.setPlanner(og.RRTConnect(information))
    if checks is None:
        status = setup.solve(seconds)
    else:
        status = setup.solve(ob.plannerOrTerminationCondition(
            ob.timedPlannerTerminationCondition(seconds), ob.PlannerTerminationCondition(lambda: used[0] >= checks)))
    if not (status and setup.haveExactSolutionPath()):
        return PlanResult(False, None, time.perf_counter() - start_time,
                          "no path in time" if checks is None or used[0] < checks else "no path in the check budget")
    if simplify:
        setup.simplifySolution(min(1.0, seconds))
    path = setup.getSolutionPath()
    waypoints = np.array([[path.getState(k)[i] for i in range(dof)] for k in range(path.getStateCount())])
    return PlanResult(True, waypoints, time.perf_counter() - start_time)


def densify(path: np.ndarray, step: float) -> np.ndarray:
    """Waypoints (K, dof) -> configurations along the straight segments, no joint moving more than
    ``step`` (rad or m) between neighbours."""
    rows = [path[:1]]
    for a, b in zip(path[:-1], path[1:]):
        count = max(1, int(np.ceil(np.abs(b - a).max() / step)))
        rows.append(a + (b - a) * (np.arange(1, count + 1)[:, None] / count))
    return np.vstack(rows)


def replay(world, path: np.ndarray, step: float = np.radians(0.25)) -> int | None:
    """Index into ``densify(path, step)`` of the first configuration where ``world`` collides, or None."""
    for index, q in enumerate(densify(path, step)):
        if world.collides(q):
            return index
    return None
