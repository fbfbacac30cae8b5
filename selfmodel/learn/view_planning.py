"""Poses that show the cameras what they have not yet seen of the arm: the views a self-model still needs.

A self-model keeps as matter what no camera saw (:mod:`selfmodel.labels.unseen`: for a planner,
unknown is matter), so a capture that never looked past a link's end face leaves a slab there for
good. This module plans the next capture around that. The body measured is the model's learned
body (its outer layer on a ``unseen.PITCH`` grid, link frames); the training sessions' depth images
say how often each cell was seen already, as the export's carving counts them. A cell still seen
at fewer than ``unseen.POSES`` poses is wanted.

A candidate configuration is expected to show a wanted cell when some camera has it in its image
and range, and nothing of the arm as described (its URDF meshes and declared board, posed with the
model's joint placements) lies in front of it by more than the carving's tolerance
(:func:`selfmodel.learn.pose_planning.seen` with one open3d ray per cell and camera): the ray
would go through the cell, or end on it. Candidates are random valid configurations (the same
validity every ``selfcal plan`` checks), and, aimed at the hidden space, the best of those with the
joints around the link most unseen turned a quarter or half turn (the wrist turned so a board
stands edge-on to a camera, a link's back turned toward one). The plan is chosen greedily: each
pose taken is the one that brings the most wanted cells closer to ``POSES`` sightings, and the
counts then include it.

Before any capture (no model), the body is the rig's description voxelised (its URDF meshes and
declared board, filled on the same grid) and nothing of it is seen yet.

What the plan reports after it is an expectation (the arm as described, the cameras where the
sessions or the rig put them); a capture of the plan and :func:`selfmodel.labels.unseen.recorded_seen`
on it give the measured figure. Nothing here reads truth/.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from capture.poses import random_poses
from rigs.errors import InputError, setting
from rigs.verdicts import PASS, Tolerance, Verdict, judge
from rigs.spec import CameraSpec, rig_from_urdf
from selfmodel.labels.depth import far_range
from selfmodel.labels.description import described_meshes
from selfmodel.labels.seen_through import training_sessions
from selfmodel.labels.unseen import PITCH, POSES, SIGMAS, described_cells, learned_cells, recorded_seen, unseen_cm3
from selfmodel.learn.pose_planning import posed_scene, seen
from selfmodel.model.chain import ArmLinks, link_poses_numpy

NEAR = 0.05  # m: the nearest a session's camera is taken to read (its own near is not recorded)
TURNS = (-np.pi / 2, np.pi / 2, np.pi)  # rad: how far each aimed candidate turns one joint
AIMED_FROM = 20  # the best random candidates the aimed ones are turned from
AIMED_JOINTS = 3  # the movable joints nearest the most unseen link that the aimed ones turn
KEEP = 0.1  # the plan passes when it is expected to leave at most this share of the unseen volume


@dataclass
class ViewPlan:
    """What :func:`plan_views` chose. ``q``: (N, dof) rad, the plan in the order chosen."""

    q: np.ndarray
    joint_names: list[str]
    candidates: int  # configurations scored (random and aimed)
    aimed: int  # of those, turned from the best random ones toward the hidden space
    recorded_poses: int  # poses the counts before the plan come from (the training sessions')
    recorded_from: str  # where the counts before came from, in words
    cameras: list[str]
    before_cm3: dict[str, float]  # link -> unseen cm3 before the plan
    after_cm3: dict[str, float]  # link -> unseen cm3 expected after it
    # link -> unseen cm3 that all the candidates together would not show at POSES poses: the faces
    # where links meet, the base's underside on the floor; more poses of this kind cannot help.
    beyond_cm3: dict[str, float] = field(default_factory=dict)
    gain: list[float] = field(default_factory=list)  # per chosen pose: cm3 of wanted cells it brings a sighting
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)  # body and counts, sampling, scoring, choosing

    def report(self) -> dict:
        return {"poses": len(self.q), "candidates": self.candidates, "aimed_candidates": self.aimed,
                "recorded_poses": self.recorded_poses, "recorded_from": self.recorded_from, "cameras": self.cameras,
                "min_poses": POSES, "pitch_m": PITCH, "unseen_before_cm3": self.before_cm3,
                "unseen_after_expected_cm3": self.after_cm3,
                "unseen_no_candidate_shows_cm3": self.beyond_cm3,
                "gain_cm3": [round(value, 2) for value in self.gain], "seconds": round(self.seconds, 2),
                "stage_seconds": {stage: round(value, 2) for stage, value in self.stage_seconds.items()}}


def session_cameras(sessions: list) -> list[CameraSpec]:
    """The depth cameras of ``sessions`` (with a pose of their own), once per name, as the rig
    would give them: intrinsics, pose, noise, and range (NEAR to the session's far range)."""
    cameras, cache = {}, {}
    for session in sessions:
        for name, camera in session.cameras.items():
            if name in cameras or camera.base_T_camera is None:
                continue
            info = camera.info
            cameras[name] = CameraSpec(name, int(info.width), int(info.height), np.asarray(info.K, float),
                                       np.asarray(camera.base_T_camera, float), float(camera.depth_sigma(1.0)), NEAR,
                                       far_range(session, name, cache))
    return list(cameras.values())


def expected_seen(cells: dict[str, np.ndarray], link_names: list[str], base_T_links: np.ndarray, meshes: dict, spec,
                  cameras: list[CameraSpec], slack, progress: Callable[[int, int], None] | None = None
                  ) -> dict[str, np.ndarray]:
    """Link -> (M, n) bool: at each of M configurations, whether some camera is expected to see each
    cell of ``cells[link]`` (n, 3 link frame, m), the arm posed by ``base_T_links`` (M, L, 4, 4)
    (``link_names`` order) and its description ``meshes`` (``spec``'s links) occluding with
    ``slack`` m (a number, or per camera and distance: :func:`selfmodel.learn.pose_planning.seen`)."""
    out = {link: np.zeros((len(base_T_links), len(points)), dtype=bool) for link, points in cells.items()}
    for m, poses in enumerate(base_T_links):
        scene = posed_scene(meshes, spec, poses)
        for link, points in cells.items():
            if not len(points):
                continue
            pose = poses[link_names.index(link)]
            out[link][m] = seen(points @ pose[:3, :3].T + pose[:3, 3], None, cameras, scene, slack) > 0
        if progress is not None:
            progress(m + 1, len(base_T_links))
    return out


def greedy(counts: dict[str, np.ndarray], expected: dict[str, np.ndarray], poses: int, voxel: float,
           min_poses: int = POSES) -> tuple[list[int], list[float], dict[str, np.ndarray]]:
    """Choose ``poses`` of the M candidates one at a time, each the one that brings the most cells
    a sighting they still lack (``counts[link]`` (n,) sightings so far, ``expected[link]`` (M, n)).
    Returns the indices, each one's gain in cm3 (a cell's volume per sighting, over ``min_poses``),
    and the counts with the chosen poses added."""
    counts = {link: np.asarray(value).copy() for link, value in counts.items()}
    chosen, gains = [], []
    total = next(iter(expected.values())).shape[0] if expected else 0
    taken = np.zeros(total, dtype=bool)
    for _ in range(min(poses, total)):
        score = np.zeros(total)
        for link, shows in expected.items():
            wanted = counts[link] < min_poses
            score += shows[:, wanted].sum(axis=1)
        score[taken] = -1
        best = int(np.argmax(score))
        chosen.append(best)
        gains.append(float(score[best]) * voxel ** 3 * 1e6 / min_poses)
        taken[best] = True
        for link, shows in expected.items():
            counts[link] = counts[link] + shows[best]
    return chosen, gains, counts


def aimed_candidates(q: np.ndarray, scores: np.ndarray, unseen_by_link: dict[str, float], spec, lower: np.ndarray,
                     upper: np.ndarray, is_valid: Callable[[np.ndarray], bool]) -> np.ndarray:
    """(K, dof) configurations aimed at the hidden space: the AIMED_FROM best of ``q`` (M, dof) by
    ``scores`` (M,), each with one of the AIMED_JOINTS movable joints nearest the link with the most
    unseen volume turned by each of TURNS (within ``lower``..``upper``, rad), the valid ones."""
    if not unseen_by_link or max(unseen_by_link.values()) <= 0:
        return np.zeros((0, q.shape[1]))
    link = max(unseen_by_link, key=unseen_by_link.get)
    # joints[k] places link k + 1; the chain from base to tip comes first.
    movable = [k for k, joint in enumerate(spec.joints) if joint.type != "fixed"]
    carrier = spec.link_names.index(link)
    # The joints nearest the link along the chain: the one that turns it, those before, the one after.
    parent = max([i for i, k in enumerate(movable) if k + 1 <= carrier], default=0)
    nearest = sorted(range(len(movable)), key=lambda i: (abs(i - parent), -i))[:AIMED_JOINTS]
    out = []
    for index in np.argsort(-scores)[:AIMED_FROM]:
        for joint in nearest:
            for turn in TURNS:
                candidate = q[index].copy()
                candidate[joint] += turn
                if lower[joint] <= candidate[joint] <= upper[joint] and is_valid(candidate):
                    out.append(candidate)
    return np.array(out).reshape(-1, q.shape[1])


@dataclass
class _Arm:
    """What the plan measures and poses: each link's cells (link frame, m), the description's meshes
    that occlude, the links' order, and how configurations (M, dof) pose them ((M, L, 4, 4))."""

    spec: ArmLinks
    link_names: list[str]
    joint_names: list[str]
    cells: dict[str, np.ndarray]
    meshes: dict
    base_T_links: Callable[[np.ndarray], np.ndarray]
    name: str  # how refusals name it


def _model_arm(model) -> _Arm:
    if model.kind != "structured":
        raise InputError(f"{model.folder}: a {model.kind} model has no links to measure the unseen space of; "
                         f"plan from a structured model.")
    return _Arm(model.spec, list(model.link_names), list(model.joint_names), learned_cells(model, PITCH),
                described_meshes(model.spec, model.urdf_path, model.tip_link, model.board), model.base_T_links,
                str(model.folder))


def _described_arm(rig) -> _Arm:
    robot = rig.robot
    spec = ArmLinks.from_urdf(robot.urdf, robot.base_link, robot.tip_link)
    # The board as a session declares it (sensors.board), which is what the description meshes read.
    board = None if rig.board is None else {"squares": list(rig.board.squares), "square_m": rig.board.square,
                                            "tip_T_board_nominal": rig.board.tip_T_board.tolist()}
    meshes = described_meshes(spec, robot.urdf, robot.tip_link, board)
    return _Arm(spec, list(spec.link_names), list(spec.joint_names), described_cells(meshes, PITCH), meshes,
                lambda q: link_poses_numpy(spec, q), f"rig {rig.name!r}")


def plan_views(model, poses: int, rig=None, candidates: int = 1500, seed: int = 0,
               progress: Callable[[str, int, int], None] | None = None) -> ViewPlan:
    """Plan ``poses`` configurations that show the cameras what the structured self-``model`` (loaded
    from its folder, whose config.json names its training sessions) has not seen (module docstring).
    ``rig``: a Rig whose cameras and description check validity; None: the cameras of the model's
    training sessions and the model's own description. ``model`` None: plan before any capture, for
    the ``rig``'s description voxelised (nothing is seen yet). ``progress(stage, done, total)`` is
    told how far each stage is."""
    from capture.simulate import pose_is_valid  # pybullet and Pinocchio: a second to start, needed here only
    from rigs.simulator import nominal_world  # the same

    start = clock = time.perf_counter()

    def lap() -> float:
        """Seconds since the last lap (the first: since the start)."""
        nonlocal clock
        now, before_now = time.perf_counter(), clock
        clock = now
        return now - before_now

    if poses < 1:
        raise InputError(f"{setting('poses')} must be at least 1, got {poses}.")
    if candidates < poses:
        raise InputError(f"{setting('candidates')} {candidates}: the plan chooses {poses} poses among at least as "
                         f"many candidates.")
    if model is None and rig is None:
        raise InputError(f"a view plan needs a self-model ({setting('model')}) or a rig whose description to plan "
                         f"for ({setting('rig')}).")
    sessions, why = (None, "planned before any capture, from the description") if model is None \
        else training_sessions(model.folder)
    if rig is None:
        if sessions is None:
            raise InputError(f"{model.folder}: {why}, so its cameras are unknown; give the rig whose cameras will "
                             f"record (`selfcal plan --views --rig`).")
        rig = rig_from_urdf(model.urdf_path, model.base_link, model.tip_link)
        cameras = session_cameras(sessions)
    else:
        cameras = list(rig.cameras)
    if not cameras:
        raise InputError(f"rig {rig.name!r} has no depth cameras to plan views for.")
    arm = _described_arm(rig) if model is None else _model_arm(model)

    def told(stage: str):
        return None if progress is None else (lambda done, total: progress(stage, done, total))

    cells = arm.cells
    if sessions is not None:
        recorded_q = np.vstack([session.q for session in sessions])
        counts = recorded_seen(cells, arm.link_names, arm.base_T_links(recorded_q), sessions, PITCH,
                               progress=told("reading the training sessions' depth images"))
        recorded_from = f"the training sessions' depth images ({len(recorded_q)} poses)"
    else:
        recorded_q = np.zeros((0, len(arm.joint_names)))
        counts = {link: np.zeros(len(points), dtype=int) for link, points in cells.items()}
        recorded_from = f"none: {why}"
    before = unseen_cm3(counts, PITCH)
    stages = {"body and counts": lap()}
    wanted = {link: points[counts[link] < POSES] for link, points in cells.items()}
    wanted_counts = {link: counts[link][counts[link] < POSES] for link in cells}

    def slack(camera: CameraSpec, distance: np.ndarray) -> np.ndarray:
        """The carving's tolerance (unseen.cell_tolerance) with the camera's relative noise."""
        return SIGMAS * camera.depth_noise * distance + 0.5 * np.sqrt(3.0) * PITCH

    with nominal_world(rig) as world:
        if arm.joint_names != world.chain.joint_names:
            raise InputError(f"{arm.name}: is a self-model of another robot (joints {arm.joint_names}).")

        def valid(q: np.ndarray) -> bool:
            return pose_is_valid(world, rig, q)

        stream = random_poses(world.chain.lower, world.chain.upper, seed, valid)
        sampled, tell = [], told("sampling valid poses")
        for _ in range(candidates):
            sampled.append(next(stream))
            if tell is not None:
                tell(len(sampled), candidates)
        q = np.array(sampled)
        stages["sampling"] = lap()
        shows = expected_seen(wanted, arm.link_names, arm.base_T_links(q), arm.meshes, arm.spec, cameras, slack,
                              told("scoring candidates"))
        first = np.zeros(len(q))
        for link, matrix in shows.items():
            first += matrix.sum(axis=1)
        aimed = aimed_candidates(q, first, before, arm.spec, world.chain.lower, world.chain.upper, valid)
        stages["scoring"] = lap()  # with the aimed ones' sampling
    if len(aimed):
        more = expected_seen(wanted, arm.link_names, arm.base_T_links(aimed), arm.meshes, arm.spec, cameras, slack,
                             told("scoring aimed candidates"))
        shows = {link: np.vstack([shows[link], more[link]]) for link in shows}
        q = np.vstack([q, aimed])
        stages["scoring"] += lap()
    chosen, gains, after_counts = greedy(wanted_counts, shows, poses, PITCH)
    after = unseen_cm3(after_counts, PITCH)  # the cells not wanted were seen enough already
    beyond = unseen_cm3({link: wanted_counts[link] + shows[link].sum(axis=0) for link in shows}, PITCH)
    stages["choosing"] = lap()
    return ViewPlan(q[chosen], arm.joint_names, len(q), len(aimed), len(recorded_q), recorded_from,
                    [camera.name for camera in cameras], before, after, beyond, gains, time.perf_counter() - start,
                    stages)


def views_verdict(plan: ViewPlan) -> Verdict:
    """PASS when the plan is expected to leave at most KEEP of the unseen volume the candidates can
    show (what none shows is said, not judged: more poses of this kind cannot show it)."""
    beyond = sum(plan.beyond_cm3.values())
    showable = sum(plan.before_cm3.values()) - beyond
    left = sum(plan.after_cm3.values()) - beyond
    note = f"; {beyond:.0f} cm3 no candidate shows" if beyond >= 0.5 else ""
    if showable < 0.5:
        return Verdict(PASS, f"no candidate shows any of the body's unseen surface{note}")
    tolerance = Tolerance(round(KEEP * showable, 1), "cm3", f"{KEEP:.0%} of the {showable:.0f} cm3 unseen before "
                          f"the plan that some candidate shows")
    verdict = judge(f"unseen volume the candidates show, expected left after {len(plan.q)} planned poses", left,
                    tolerance)
    return Verdict(verdict.result, verdict.reason + note, verdict.tolerance, verdict.measured)
