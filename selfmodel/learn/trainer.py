"""Training a self-model from depth sessions, in the scikit-learn manner.

``SelfModelTrainer(kind=..., minutes=..., seed=..., description=...)`` checks its settings and does
nothing else until ``fit(sessions, progress=None, previous=None, checkpoint=None)``, which returns a
:class:`TrainResult` holding the model and what the run did. Deterministic for a
seed when the length is given in ``steps``; with ``minutes`` the learning-rate schedule follows the
clock, so how many steps fit depends on the machine's speed (the data, initialisation and batch
order are still fixed by the seed).

The structured model gets one more kind of label: space that no camera ever saw free, in a link's
own frame, is matter at every configuration. Shell labels alone make a hollow body (a prototype called
15 % of the inside free), which is the wrong mistake for collision checking. That matter is the
union's, not necessarily the link's: the core of a joint looks still from both links it joins.

Two links cannot hold the same space at the same moment, and the arm really stood at every training
pose. So the structured model also pays for overlap: at training configurations, a point's
probabilities beyond the largest one (``sum - max`` over links) are penalised, on the labelled points
and on the never-seen-free points. Ownership then goes to the link whose frame the matter moves
with; without it, a base network happily keeps the part of the shoulder it always saw there, and
the exported bodies are in collision at every recorded pose.
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from capture.session import Session
from rigs.errors import InputError, setting
from rigs.files import atomic_write_bytes, load_torch
from rigs.link_meshes import link_meshes
from selfmodel.labels.depth import ArmRegion, LabelSettings, TrainingData, depth_training_data, never_seen_free
from selfmodel.labels.description import described_meshes, described_solids
from selfmodel.learn.placement import PlacementSettings, fit_placements
from selfmodel.model.chain import ArmLinks, check_joint_names, link_poses_numpy
from selfmodel.model.folder import SurfaceSamples
from selfmodel.model.models import FreeSelfModel, SelfModel, StructuredSelfModel
from selfmodel.model.runtime import resolve_device, set_threads

KINDS = ("structured", "free")
CLEAR, MATTER, OWN = 0.0, 1.0, 2.0  # labels of the never-seen-free prior (see SelfModelTrainer._prior_pool)
CHECKPOINT = "checkpoint.pt"


def domain_region(spec: ArmLinks, sessions: list[Session], lo: np.ndarray, hi: np.ndarray) -> ArmRegion:
    """Where the labels take a reading for the arm: inside some link's domain box at that pose
    (description kinematics); what lies outside every one is background (a table, a wall)."""
    q = np.concatenate([session.q for session in sessions])
    return ArmRegion(link_poses_numpy(spec, q), lo, hi)


def check_previous(previous, kind: str, spec: ArmLinks | None, joint_names: list[str] | None = None) -> None:
    """A previous model to start from must be of the same kind and the same chain."""
    where = str(previous.folder or "the previous model")
    if previous.kind != kind:
        raise InputError(f"{where}: a {previous.kind} model cannot start a {kind} training; use {setting('kind')} "
                         f"{previous.kind}.")
    names = spec.joint_names if spec is not None else joint_names
    if list(previous.joint_names) != list(names):
        raise InputError(f"{where}: its joints ({', '.join(previous.joint_names)}) are not the session's "
                         f"({', '.join(names)}).")
    if spec is not None and list(previous.link_names) != list(spec.link_names):
        raise InputError(f"{where}: its links ({', '.join(previous.link_names)}) are not those of the chain "
                         f"({', '.join(spec.link_names)}).")


def _size(previous, key: str, default: int) -> int:
    return int(previous.hyper[key]) if previous is not None else default


def start_from(model, previous) -> None:
    """Copy a previous model's weights into ``model`` (the joint corrections stay the new fit's)."""
    state = {name: value for name, value in previous.state_dict().items() if not name.startswith("chain.")}
    if isinstance(model, FreeSelfModel):
        model.workspace_lo, model.workspace_hi = previous.workspace_lo.copy(), previous.workspace_hi.copy()
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [name for name in missing if not name.startswith("chain.")]:
        raise InputError(f"{previous.folder or 'the previous model'}: its networks are not of this size "
                         f"({', '.join((unexpected or missing)[:3])}).")


def described_owners(spec: ArmLinks, data: TrainingData, described: dict, deltas: np.ndarray | None = None) -> np.ndarray:
    """(M,) for every labelled point: the link whose description alone holds it at its configuration
    (description kinematics with the placement corrections ``deltas`` (dof, 6)), else -1. Only points
    labelled occupied get an owner. Links that move as one body (``ArmLinks.rigid_groups``) share
    every motion, so the data never says which of them a reading outside their descriptions belongs
    to: such a point goes to the member whose description is nearest, when that is the nearest
    description of all (else the hand's readings are up for grabs, and a closed finger's network
    took the Panda's whole hand)."""
    poses = link_poses_numpy(spec, data.q, deltas)
    owners = np.full(len(data.points), -1, dtype=np.int8)
    counts = np.zeros(len(data.points), dtype=np.int8)
    group_of = {index: members for members in spec.rigid_groups() for index in members}
    occupied = np.flatnonzero(data.occupied > 0.5)
    order = occupied[np.argsort(data.config[occupied], kind="stable")]
    bounds = np.searchsorted(data.config[order], np.arange(len(data.q) + 1))
    for c in range(len(data.q)):
        rows = order[bounds[c]:bounds[c + 1]]
        if not len(rows):
            continue
        nearest = np.full(len(rows), -1, dtype=np.int8)
        nearest_distance = np.full(len(rows), np.inf)
        for index, link in enumerate(spec.link_names):
            if link not in described:
                continue
            link_T_base = np.linalg.inv(poses[c, index])
            local = data.points[rows] @ link_T_base[:3, :3].T + link_T_base[:3, 3]
            distance = described[link].signed_distance(local)
            inside = distance < 0
            owners[rows[inside]] = index
            counts[rows[inside]] += 1
            closer = distance < nearest_distance
            nearest[closer], nearest_distance[closer] = index, distance[closer]
        if group_of:
            outside = (counts[rows] == 0) & np.isin(nearest, list(group_of))
            owners[rows[outside]] = nearest[outside]
    owners[counts > 1] = -1
    return owners


def overlap(link_logits: torch.Tensor, owner: torch.Tensor | None = None) -> torch.Tensor:
    """(N, L) per-link logits at points and configurations -> mean over points of the probability
    mass beyond the owner's: the link ``owner`` (N,) names (its description holds the point), or,
    where it is -1 or not given, the most likely link. 0 where only the owner claims a point."""
    probabilities = torch.sigmoid(link_logits)
    kept = probabilities.max(dim=1).values
    if owner is not None:
        named = owner >= 0
        kept = torch.where(named, probabilities.gather(1, owner.clamp(min=0)[:, None]).squeeze(1), kept)
    return (probabilities.sum(dim=1) - kept).mean()


@dataclass(frozen=True)
class Checkpoint:
    """A run-time hook of :meth:`SelfModelTrainer.fit`: where the run keeps its checkpoint
    (``folder/checkpoint.pt``, written every minute, at the end and when interrupted) and whether it
    continues the one there (``resume``; refused when there is none)."""

    folder: Path
    resume: bool = False

    @property
    def path(self) -> Path:
        return Path(self.folder) / CHECKPOINT


@dataclass
class TrainResult:
    """What a run did, for its caller's report: the model (which keeps the same figures in
    ``model.training_run``, and its placement fit, surface samples and training configurations, to be
    saved) and the loss history."""

    model: SelfModel
    steps: int
    seconds: float
    final_loss: float
    labelled_points: int
    configurations: int
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, loss)


@dataclass
class SelfModelTrainer:
    """Configure, then ``fit(sessions, progress=None, previous=None, checkpoint=None)`` ->
    :class:`TrainResult`, whose ``model`` saves itself.

    ``description``: the URDF whose chain and meshes the structured model is posed by and fitted
    against, instead of the first session's own copy (a calibrated robot.urdf, or a chain discovered
    from the sweeps); the free model reads none. The other settings are commented where they stand.
    """

    kind: str = "structured"
    minutes: float | None = 10.0
    steps: int | None = None  # exact number of steps; overrides minutes
    seed: int = 0
    batch: int = 8192
    prior_batch: int = 2048
    learning_rate: float | None = None  # 2e-3 structured, 1e-4 free (SIREN layers diverge at higher rates)
    final_learning_rate: float | None = None
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    overlap_weight: float = 1.0  # exclusive ownership: weight of the mean (sum - max) of link probabilities
    occupied_weight: float = 1.3  # weight of an occupied label against a free one (BCE pos_weight): see _loop
    prior_weight: float = 0.25  # weight of the never-seen-free terms against the depth labels' BCE
    hidden: int | None = None  # network width (kind's default when None)
    layers: int | None = None
    domain_margin: float = 0.05  # m around each link's joint origins and description geometry
    tip_margin: float = 0.10  # m: tools and boards sit on the tip
    board_on_tip: bool = True  # the session's board, at its nominal pose in the tip frame, joins the tip's geometry
    prior_voxel: float = 0.015  # m: resolution of the "never seen free" grids
    threads: int | None = None  # torch intra-op threads; default_threads() when None
    device: str = "auto"  # auto (a GPU when torch sees one), cpu or cuda
    labels: LabelSettings = field(default_factory=LabelSettings)
    hold: dict[str, float] = field(default_factory=dict)  # off-chain joints' positions stated by the user (rad or m)
    description: Path | None = None  # the URDF to train on (None: the first session's); see the class docstring

    def __post_init__(self):
        # Settings are checked here and kept as given: the kind's defaults are read through
        # start_rate and end_rate, so a trainer's settings say what the caller asked for.
        if self.kind not in KINDS:
            raise InputError(f"{setting('kind')} must be one of {', '.join(KINDS)}, got {self.kind!r}.")
        if self.steps is None and (self.minutes is None or self.minutes <= 0):
            raise InputError(f"{setting('minutes')} must be positive, got {self.minutes}.")
        resolve_device(self.device)  # an unknown or unavailable device is refused before any work
        if self.steps is not None and self.steps < 1:
            raise InputError(f"{setting('steps')} must be at least 1, got {self.steps}.")
        if self.threads is not None and self.threads < 1:
            raise InputError(f"{setting('threads')} must be at least 1, got {self.threads}.")
        if self.description is not None:
            if self.kind == "free":
                raise InputError(f"{setting('description')} gives the structured model its chain; the free model "
                                 f"reads no URDF.")
            if not Path(self.description).is_file():
                raise InputError(f"{self.description}: URDF not found ({setting('description')}).")

    @property
    def start_rate(self) -> float:
        """The learning rate the schedule starts at: ``learning_rate``, or the kind's default."""
        if self.learning_rate is not None:
            return self.learning_rate
        return 2e-3 if self.kind == "structured" else 1e-4

    @property
    def end_rate(self) -> float:
        """The learning rate the cosine schedule ends at: ``final_learning_rate``, or a 40th of the start."""
        return self.final_learning_rate if self.final_learning_rate is not None else self.start_rate / 40

    # -- the run ------------------------------------------------------------------------------
    def fit(self, sessions: list[Session], progress=None, previous: SelfModel | None = None,
            checkpoint: Checkpoint | None = None) -> TrainResult:
        """Train on ``sessions``. ``progress(done, total)`` after every step (per mille of the time, of
        1000, when the length is in minutes); with ``previous`` (a loaded model of the same
        kind and chain) start from its weights, and from its joint corrections (the start and centre of
        the placement fit); ``checkpoint``: where the run keeps its state, and whether it resumes it."""
        set_threads(self.threads)
        rng = np.random.default_rng(self.seed)
        torch.manual_seed(self.seed)
        first = sessions[0] if sessions else None
        if self.kind == "structured":
            if first is None:
                raise InputError("no session given.")
            urdf_path = Path(self.description) if self.description is not None else first.urdf_path
            spec = ArmLinks.from_urdf(urdf_path, first.base_link, first.tip_link, self.held_joints(sessions))
            check_joint_names(spec, first.joint_names, str(urdf_path))
            domains = self._domains(spec, urdf_path, first.tip_link)
            if previous is not None:
                check_previous(previous, "structured", spec)
                domains = (previous.domains_lo, previous.domains_hi)
            region = domain_region(spec, sessions, *domains)
            data = depth_training_data(sessions, self.labels, rng, arm_region=region)
            model = StructuredSelfModel(spec, domains[0], domains[1], data.workspace_lo, data.workspace_hi,
                                        self.hidden or _size(previous, "hidden", 64), self.layers or _size(previous, "layers", 3),
                                        _size(previous, "frequencies", 6), urdf_path=urdf_path,
                                        base_link=first.base_link, tip_link=first.tip_link)
            board = (first.manifest.get("sensors") or {}).get("board") if self.board_on_tip else None
            model.board = board
            meshes = described_meshes(spec, urdf_path, first.tip_link, board)
            # The gauge: joint placements are fitted first, with the description's geometry as the
            # reference, and held while the networks learn the shapes in those frames.
            start = previous.chain.deltas.detach().numpy().astype(float) if previous is not None else None
            corrections = fit_placements(spec, meshes, data.surface, data.surface_config, data.q, start, self.placement)
            with torch.no_grad():
                model.chain.deltas.copy_(torch.from_numpy(corrections.deltas.astype(np.float32)))
            model.chain.deltas.requires_grad_(False)
            model.corrections = corrections
            described = described_solids(meshes)
            prior = self._prior_pool(model, spec, data, sessions, rng, described, corrections.deltas, region)
            owners = described_owners(spec, data, described, corrections.deltas)
        else:
            data = depth_training_data(sessions, self.labels, rng)
            q_lo, q_hi = data.q.min(axis=0), data.q.max(axis=0)
            if previous is not None:
                check_previous(previous, "free", None, first.joint_names)
                q_lo, q_hi = previous.q_lo, previous.q_hi
            model = FreeSelfModel(first.joint_names, data.workspace_lo, data.workspace_hi, q_lo, q_hi,
                                  self.hidden or _size(previous, "hidden", 256), self.layers or _size(previous, "layers", 5))
            prior, owners = None, None
        if previous is not None:
            start_from(model, previous)
        return self._train(model, data, prior, owners, checkpoint, progress)

    def held_joints(self, sessions: list[Session]) -> dict[str, float]:
        """Where the joints off the chain stood: as recorded (``robot.held_joints``), or as stated;
        sessions that disagree are refused (the links they carry would not be one body)."""
        held: dict[str, float] = {}
        for session in sessions:
            for name, value in session.held_joints.items():
                if name not in self.hold and name in held and abs(held[name] - value) > 1e-9:
                    raise InputError(f"{session.path}/session.json: robot.held_joints {name} = {value} differs from "
                                     f"{held[name]} in another session; state one with {setting('hold')} {name}=VALUE.")
                held[name] = value
        held.update(self.hold)
        return held

    def _domains(self, spec: ArmLinks, urdf_path: Path, tip_link: str) -> tuple[np.ndarray, np.ndarray]:
        """Per link, the box (lo (L, 3), hi (L, 3)) in its frame where its matter can be."""
        meshes = link_meshes(urdf_path, spec.link_names)
        lo, hi = [], []
        for index, link in enumerate(spec.link_names):
            # The link's own origin and the joints it carries bound where its matter can be ...
            corners = [np.zeros(3)] + [j.origin[:3, 3] for j in spec.joints if j.parent_index == index]
            # ... and so does the description's geometry, as a prior on the region only.
            if link in meshes:
                corners += list(meshes[link].bounds)
            corners = np.array(corners)
            # Tools and boards sit on the tip; so do links beyond it (fingers), which follow the chain.
            margin = self.tip_margin if index >= spec.link_names.index(tip_link) else self.domain_margin
            lo.append(corners.min(axis=0) - margin)
            hi.append(corners.max(axis=0) + margin)
        return np.array(lo), np.array(hi)

    def _prior_pool(self, model: StructuredSelfModel, spec: ArmLinks, data: TrainingData, sessions: list[Session],
                    rng: np.random.Generator, described: dict, deltas: np.ndarray | None = None,
                    region: ArmRegion | None = None, per_link: int = 30_000) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per link: candidate points (n, 3) in the link frame, (n,) labels and (n,) owners (link
        index, -1 for none): ``MATTER`` where no camera ever saw the point free at any configuration
        (some link's matter), ``OWN`` where it is also inside the link's description (its matter; in
        a rigid group, where this link's description is the group's nearest), ``CLEAR`` where some
        camera saw it clearly free (not this link's, whatever other links do there). A ``MATTER``
        point a rigidly joined neighbour owns is not this link's either."""
        poses = link_poses_numpy(spec, data.q, deltas)  # (C, L, 4, 4) description kinematics, corrected
        candidates = [rng.uniform(model.domains_lo[i], model.domains_hi[i], (per_link, 3)) for i in range(len(spec.link_names))]
        never, clear = never_seen_free(sessions, poses, candidates, self.labels, arm_region=region)
        # The base frame is the workspace's frame: the model answers nothing outside the workspace.
        never[0] &= np.all((candidates[0] >= data.workspace_lo) & (candidates[0] <= data.workspace_hi), axis=1)
        # Where the data cannot tell two links apart (the core of a joint looks still from both links
        # it joins), the description says whose matter it is: a prior on ownership only; whether
        # there is matter at all is still the cameras' word.
        # Links that move as one body: matter none of their descriptions holds goes to the member
        # whose description is nearest (the data cannot say; see described_owners).
        group_of = {index: members for members in spec.rigid_groups() for index in members}
        pools = []
        for index, (link, points, occupied, free) in enumerate(zip(spec.link_names, candidates, never, clear)):
            inside = described[link].signed_distance(points) < 0 if link in described else np.zeros(len(points), bool)
            owner = np.where(occupied & inside, index, -1)
            members = [member for member in group_of.get(index, []) if spec.link_names[member] in described]
            if index in members:
                distances = []
                for member in members:
                    member_T_link = np.linalg.inv(poses[0, member]) @ poses[0, index]  # fixed within the group
                    local = points @ member_T_link[:3, :3].T + member_T_link[:3, 3]
                    distances.append(described[spec.link_names[member]].signed_distance(local))
                owner = np.where(occupied, np.asarray(members)[np.argmin(np.stack(distances), axis=0)], -1)
            labels = np.where(occupied, np.where(owner == index, OWN, MATTER), CLEAR)
            keep = occupied | free
            pools.append((points[keep].astype(np.float32), labels[keep].astype(np.float32),
                          owner[keep].astype(np.int64)))
        return pools

    def _train(self, model, data: TrainingData, prior, owners: np.ndarray | None, hook: Checkpoint | None,
               progress) -> TrainResult:
        device = resolve_device(self.device)
        model.to(device)
        points = torch.from_numpy(data.points).to(device)
        labels = torch.from_numpy(data.occupied).to(device)
        owners = torch.from_numpy(owners.astype(np.int64)).to(device) if owners is not None else None
        if prior is not None:
            prior = [tuple(torch.from_numpy(array).to(device) for array in pool) for pool in prior]
        configs = torch.from_numpy(data.config.astype(np.int64)).to(device)
        q_all = torch.from_numpy(data.q.astype(np.float32)).to(device)
        network_parameters = [p for name, p in model.named_parameters() if not name.startswith("chain.")]
        groups = [{"params": network_parameters, "lr": self.start_rate}]
        structured = isinstance(model, StructuredSelfModel)
        optimizer = torch.optim.Adam(groups)
        generator = torch.Generator().manual_seed(self.seed)
        step, total, elapsed = 0, self.steps, 0.0
        history: list[tuple[int, float]] = []
        checkpoint = hook.path if hook is not None else None
        if hook is not None and hook.resume:
            if not checkpoint.is_file():
                raise InputError(f"{hook.folder}: nothing to resume (no {CHECKPOINT} from an interrupted run).")

            state = load_torch(checkpoint, "training checkpoint")
            try:
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
                generator.set_state(state["generator"])
                step, elapsed = int(state["step"]), float(state["elapsed"])
                total = None if int(state["total"]) < 0 else int(state["total"])
                history = [tuple(row) for row in state["history"].tolist()]
            except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as error:
                raise InputError(f"{checkpoint}: is not a checkpoint of this training ({type(error).__name__}); "
                                 f"remove {hook.folder} to start over.") from None
        budget = None if self.steps is not None else self.minutes * 60.0
        started = time.perf_counter() - elapsed
        # The batch generator's state where the last finished step left it: an interruption mid-step has
        # drawn the next batch already, and a resumed run must draw it again.
        run = {"step": step, "loss": float("nan"), "history": history, "generator": generator.get_state()}
        try:
            self._loop(model, optimizer, generator, points, labels, owners, configs, q_all, prior, structured, run,
                       total, budget, started, checkpoint, progress)
        except BaseException:
            # Interrupted (Ctrl-C, a crash): keep what was learned so --resume can continue from here.
            if checkpoint is not None:
                self._save_checkpoint(checkpoint, model, optimizer, run["generator"], run["step"], total,
                                      time.perf_counter() - started, run["history"])
            raise
        step, loss_value, history = run["step"], run["loss"], run["history"]
        seconds = time.perf_counter() - started
        model.to("cpu")  # what is saved, baked and queried afterwards lives on the CPU
        if checkpoint is not None:
            self._save_checkpoint(checkpoint, model, optimizer, generator.get_state(), step, total, seconds, history)
        result = TrainResult(model, step, seconds, loss_value, len(points), len(data.q), history=history)
        model.training_run = {"steps": step, "seconds": seconds, "final_loss": loss_value,
                              "labelled_points": len(points), "configurations": len(data.q)}
        if structured:
            # What the model folder keeps of the data: a free model's folder keeps neither.
            model.training_q = data.q
            model.surface = self._surface_owners(model, data)
        return result

    def _loop(self, model, optimizer, generator, points, labels, owners, configs, q_all, prior, structured, run: dict,
              total, budget, started, checkpoint, progress) -> None:
        """Steps until done; ``run`` (step, loss, history) is kept current after every step."""
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        last_save = time.perf_counter()
        step, history = run["step"], run["history"]
        poses_all = None
        # Free labels outnumber occupied ones near a surface (every ray carves free space up to its
        # reading, and neighbouring configurations' rays carve past a surface the fitted placements
        # put a millimetre off), so an even weighting leaves the learned boundary just inside the
        # body: the truly occupied points called free lie almost all within 2 mm of the surface
        # (80 % within 1 mm on the xArm6). Calling matter free is the dangerous mistake for a
        # collision model, so occupied labels weigh 1.3 free ones: on the xArm6 (120 poses, 2000
        # steps) that took false-free from 1.25 % to 0.43 % for 0.05 % of the workspace in Chamfer.
        occupied_weight = torch.tensor(float(self.occupied_weight), device=points.device)
        while True:
            # The schedule runs on the fraction done: of the steps, or of the time budget (so a
            # machine that slows down mid-run still ends on time, with the rate annealed).
            fraction = step / total if total is not None else (time.perf_counter() - started) / budget
            if fraction >= 1.0:
                break
            rate = self.end_rate + 0.5 * (self.start_rate - self.end_rate) * (1 + math.cos(math.pi * fraction))
            optimizer.param_groups[0]["lr"] = rate
            # The batch generator stays on the CPU: the same seed draws the same batches on any device.
            rows = torch.randint(0, len(points), (self.batch,), generator=generator).to(points.device)
            batch_points, batch_labels = points[rows], labels[rows]
            if structured:
                if poses_all is None:  # the placements are held: the poses never change
                    poses_all = model.chain.base_T_links(q_all)
                poses = poses_all
                link_logits = model.link_logits(batch_points, poses[configs[rows]])
                loss = bce(torch.logsumexp(link_logits, dim=1), batch_labels, pos_weight=occupied_weight)
                prior_terms, matter_logits, matter_owner = self._prior_terms(model, prior, poses.detach(), generator)
                if prior_terms:
                    loss = loss + self.prior_weight * torch.stack(prior_terms).mean()
                owner = owners[rows]
                if matter_logits is not None:
                    link_logits = torch.cat([link_logits, matter_logits])
                    owner = torch.cat([owner, matter_owner])
                loss = loss + self.overlap_weight * overlap(link_logits, owner)
            else:
                logits = model.logits(batch_points, q_all[configs[rows]])
                loss = bce(logits, batch_labels, pos_weight=occupied_weight)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            run["step"], run["loss"], run["generator"] = step, float(loss.detach()), generator.get_state()
            if step % 50 == 0:
                history.append((step, run["loss"]))
            if progress is not None:
                progress(step, total) if total is not None else progress(int(1000 * fraction), 1000)
            if checkpoint is not None and time.perf_counter() - last_save > 60:
                self._save_checkpoint(checkpoint, model, optimizer, generator.get_state(), step, total,
                                      time.perf_counter() - started, history)
                last_save = time.perf_counter()

    def _prior_terms(self, model: StructuredSelfModel, prior, poses: torch.Tensor, generator: torch.Generator):
        """Never-seen-free points are matter at every configuration: the union must be occupied there
        (at a random training configuration, posed by ``poses`` (C, L, 4, 4)), and the link's own where
        its description holds them; points some camera saw clearly free in a link's frame are not that
        link's. Returns the BCE terms, the (M, L) link logits at the matter points and their owners (M,)
        (the link whose description holds the point, else -1), for the overlap penalty."""
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        terms, matter_points, matter_configs, owners = [], [], [], []
        per_link = max(1, self.prior_batch // len(prior))
        for index, (pool, pool_labels, pool_owners) in enumerate(prior):
            if len(pool) == 0:
                continue
            take = torch.randint(0, len(pool), (per_link,), generator=generator).to(pool.device)
            points, labels, owner = pool[take], pool_labels[take], pool_owners[take]
            free, own = labels == CLEAR, labels == OWN
            # Matter a rigidly joined neighbour owns (see _prior_pool) is not this link's either.
            others = ~free & (owner >= 0) & (owner != index)
            if free.any() or own.any() or others.any():
                mine = free | own | others
                terms.append(bce(model.networks[index](points[mine]), own[mine].float()))
            matter = points[~free]
            if len(matter):
                configs = torch.randint(0, len(poses), (len(matter),), generator=generator).to(pool.device)
                pose = poses[configs, index]
                matter_points.append(torch.einsum("nij,nj->ni", pose[:, :3, :3], matter) + pose[:, :3, 3])
                matter_configs.append(configs)
                owners.append(owner[~free])
        if not matter_points:
            return terms, None, None
        configs = torch.cat(matter_configs)
        logits = model.link_logits(torch.cat(matter_points), poses[configs])
        terms.append(bce(torch.logsumexp(logits, dim=1), torch.ones(len(logits), device=logits.device)))
        return terms, logits, torch.cat(owners)

    @staticmethod
    def _save_checkpoint(path: Path, model, optimizer, generator_state, step, total, elapsed, history) -> None:
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "generator": generator_state,
                    "step": step, "total": -1 if total is None else total, "elapsed": elapsed,
                    "history": torch.tensor(history if history else np.zeros((0, 2)), dtype=torch.float64)}, buffer)
        atomic_write_bytes(path, buffer.getvalue())

    @staticmethod
    def _surface_owners(model: StructuredSelfModel, data: TrainingData, keep: int = 200_000) -> SurfaceSamples:
        """The measured surface samples in the frame of the link that claims each (for collision margins)."""
        rng = np.random.default_rng(0)
        rows = rng.choice(len(data.surface), min(keep, len(data.surface)), replace=False)
        points = torch.from_numpy(data.surface[rows])
        with torch.no_grad():
            poses = model.chain.base_T_links(torch.from_numpy(data.q.astype(np.float32)))[data.surface_config[rows]]
            owner = torch.argmax(model.link_logits(points, poses), dim=1)
            chosen = poses[torch.arange(len(rows)), owner]
            local = torch.einsum("nji,nj->ni", chosen[:, :3, :3], points - chosen[:, :3, 3])
        return SurfaceSamples(local.numpy(), owner.numpy().astype(np.int32), data.surface_config[rows])
