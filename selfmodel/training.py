"""Training a self-model from depth sessions, in the scikit-learn manner.

``SelfModelTrainer(kind=..., minutes=..., seed=...)`` does nothing until ``fit(sessions, ...)``,
which returns a :class:`TrainResult` holding the model and what the run did. Deterministic for a
seed when the length is given in ``steps``; with ``minutes`` the learning-rate schedule follows the
clock, so how many steps fit depends on the machine's speed (the data, initialisation and batch
order are still fixed by the seed).

The structured model gets one more kind of label: space that no camera ever saw free, in a link's
own frame, counts as that link's matter. Shell labels alone make a hollow body (a prototype called
15 % of the inside free), which is the wrong mistake for collision checking.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from capture.session import Session
from rigs.errors import InputError
from selfmodel.chain import ChainSpec, check_joint_names, link_poses_numpy
from selfmodel.depth_labels import ArmRegion, LabelSettings, TrainingData, depth_training_data
from selfmodel.models import FreeSelfModel, StructuredSelfModel

KINDS = ("structured", "free")
CHECKPOINT = "checkpoint.pt"


def _domain_region(spec: ChainSpec, sessions: list[Session], lo: np.ndarray, hi: np.ndarray) -> ArmRegion:
    """Where the labels take a reading for the arm: inside some link's domain box at that pose
    (description kinematics); what lies outside every one is background (a table, a wall)."""
    q = np.concatenate([session.q for session in sessions])
    return ArmRegion(link_poses_numpy(spec, q), lo, hi)


def default_threads() -> int:
    """Every core this process may use (torch's own default can count cores it may not use)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


@dataclass
class TrainResult:
    model: StructuredSelfModel | FreeSelfModel
    steps: int
    seconds: float
    final_loss: float
    labelled_points: int
    configurations: int
    surface_points_link: np.ndarray | None = None  # (S, 3) measured surface samples in their owner link's frame
    surface_link_index: np.ndarray | None = None  # (S,) owner link index
    surface_config: np.ndarray | None = None  # (S,) configuration index into q
    q: np.ndarray | None = None  # (C, dof) training configurations
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, loss)


@dataclass
class SelfModelTrainer:
    kind: str = "structured"
    minutes: float | None = 10.0
    steps: int | None = None  # exact number of steps; overrides minutes
    seed: int = 0
    batch: int = 8192
    prior_batch: int = 2048
    learning_rate: float | None = None  # 2e-3 structured, 1e-4 free (SIREN layers diverge at higher rates)
    final_learning_rate: float | None = None
    kinematics_learning_rate: float = 5e-4
    kinematics_start: float = 0.15  # fraction of the run before joint corrections start to move
    kinematics_weight: float = 1.0  # L2 pull of the corrections towards the description
    hidden: int | None = None  # network width (kind's default when None)
    layers: int | None = None
    domain_margin: float = 0.05  # m around each link's joint origins and description geometry
    tip_margin: float = 0.10  # m: tools and boards sit on the tip
    prior_voxel: float = 0.015  # m: resolution of the "never seen free" grids
    threads: int | None = None
    labels: LabelSettings = field(default_factory=LabelSettings)

    def __post_init__(self):
        if self.learning_rate is None:
            self.learning_rate = 2e-3 if self.kind == "structured" else 1e-4
        if self.final_learning_rate is None:
            self.final_learning_rate = self.learning_rate / 40
        if self.kind not in KINDS:
            raise InputError(f"--kind must be one of {', '.join(KINDS)}, got {self.kind!r}.")
        if self.steps is None and (self.minutes is None or self.minutes <= 0):
            raise InputError(f"--minutes must be positive, got {self.minutes}.")
        if self.steps is not None and self.steps < 1:
            raise InputError(f"--steps must be at least 1, got {self.steps}.")

    # -- the run ------------------------------------------------------------------------------
    def fit(self, sessions: list[Session], urdf_path: Path | None = None, checkpoint_dir: Path | None = None,
            resume: bool = False, progress=None) -> TrainResult:
        torch.set_num_threads(self.threads or default_threads())
        rng = np.random.default_rng(self.seed)
        torch.manual_seed(self.seed)
        first = sessions[0] if sessions else None
        if self.kind == "structured":
            if first is None:
                raise InputError("no session given.")
            urdf_path = Path(urdf_path) if urdf_path is not None else first.urdf_path
            spec = ChainSpec.from_urdf(urdf_path, first.base_link, first.tip_link)
            check_joint_names(spec, first.joint_names, str(urdf_path))
            domains = self._domains(spec, urdf_path)
            data = depth_training_data(sessions, self.labels, rng, arm_region=_domain_region(spec, sessions, *domains))
            model = StructuredSelfModel(spec, domains[0], domains[1], data.workspace_lo, data.workspace_hi,
                                        self.hidden or 64, self.layers or 3, urdf_path=urdf_path,
                                        base_link=first.base_link, tip_link=first.tip_link)
            prior = self._prior_pool(model, spec, data, sessions, rng)
        else:
            data = depth_training_data(sessions, self.labels, rng)
            model = FreeSelfModel(first.joint_names, data.workspace_lo, data.workspace_hi, data.q.min(axis=0),
                                  data.q.max(axis=0), self.hidden or 256, self.layers or 5)
            prior = None
        return self._train(model, data, prior, checkpoint_dir, resume, progress)

    def _domains(self, spec: ChainSpec, urdf_path: Path) -> tuple[np.ndarray, np.ndarray]:
        """Per link, the box (lo (L, 3), hi (L, 3)) in its frame where its matter can be."""
        from selfmodel.link_meshes import link_meshes

        meshes = link_meshes(urdf_path, spec.link_names)
        lo, hi = [], []
        for index, link in enumerate(spec.link_names):
            # The link's own origin and the joints it carries bound where its matter can be ...
            corners = [np.zeros(3)] + [j.origin[:3, 3] for j in spec.joints if j.parent_index == index]
            # ... and so does the description's geometry, as a prior on the region only.
            if link in meshes:
                corners += list(meshes[link].bounds)
            corners = np.array(corners)
            margin = self.tip_margin if index == len(spec.link_names) - 1 else self.domain_margin
            lo.append(corners.min(axis=0) - margin)
            hi.append(corners.max(axis=0) + margin)
        return np.array(lo), np.array(hi)

    def _prior_pool(self, model: StructuredSelfModel, spec: ChainSpec, data: TrainingData, sessions: list[Session],
                    rng: np.random.Generator, per_link: int = 30_000) -> list[np.ndarray]:
        """Per link: points (n, 3) in the link frame that no camera ever saw free at any configuration."""
        from selfmodel.depth_labels import never_seen_free

        poses = link_poses_numpy(spec, data.q)  # (C, L, 4, 4) description kinematics
        candidates = [rng.uniform(model.domains_lo[i], model.domains_hi[i], (per_link, 3)) for i in range(len(spec.link_names))]
        never, clear = never_seen_free(sessions, poses, candidates, self.labels)
        # The base frame is the workspace's frame: the model answers nothing outside the workspace.
        never[0] &= np.all((candidates[0] >= data.workspace_lo) & (candidates[0] <= data.workspace_hi), axis=1)
        # A link's own matter is occupied at every configuration: what some camera saw clearly free
        # in the link's frame is not the link's, whatever other links do there.
        pools = []
        for points, occupied, free in zip(candidates, never, clear):
            keep = occupied | free
            pools.append((points[keep].astype(np.float32), occupied[keep].astype(np.float32)))
        return pools

    def _train(self, model, data: TrainingData, prior, checkpoint_dir: Path | None, resume: bool, progress) -> TrainResult:
        points = torch.from_numpy(data.points)
        labels = torch.from_numpy(data.occupied)
        if prior is not None:
            prior = [(torch.from_numpy(p), torch.from_numpy(l)) for p, l in prior]
        configs = torch.from_numpy(data.config.astype(np.int64))
        q_all = torch.from_numpy(data.q.astype(np.float32))
        network_parameters = [p for name, p in model.named_parameters() if not name.startswith("chain.")]
        groups = [{"params": network_parameters, "lr": self.learning_rate}]
        structured = isinstance(model, StructuredSelfModel)
        if structured:
            groups.append({"params": [model.chain.deltas], "lr": self.kinematics_learning_rate})
        optimizer = torch.optim.Adam(groups)
        generator = torch.Generator().manual_seed(self.seed)
        step, total, elapsed = 0, self.steps, 0.0
        history: list[tuple[int, float]] = []
        checkpoint = Path(checkpoint_dir) / CHECKPOINT if checkpoint_dir is not None else None
        if resume:
            if checkpoint is None or not checkpoint.is_file():
                raise InputError(f"{checkpoint_dir}: nothing to resume (no {CHECKPOINT} from an interrupted run).")
            from rigs.files import load_torch

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
                                 f"remove {checkpoint_dir} to start over.") from None
        budget = None if self.steps is not None else self.minutes * 60.0
        started = time.perf_counter() - elapsed
        # The batch generator's state where the last finished step left it: an interruption mid-step has
        # drawn the next batch already, and a resumed run must draw it again.
        run = {"step": step, "loss": float("nan"), "history": history, "generator": generator.get_state()}
        try:
            self._loop(model, optimizer, generator, points, labels, configs, q_all, prior, structured, run, total,
                       budget, started, checkpoint, progress)
        except BaseException:
            # Interrupted (Ctrl-C, a crash): keep what was learned so --resume can continue from here.
            if checkpoint is not None:
                self._save_checkpoint(checkpoint, model, optimizer, run["generator"], run["step"], total,
                                      time.perf_counter() - started, run["history"])
            raise
        step, loss_value, history = run["step"], run["loss"], run["history"]
        seconds = time.perf_counter() - started
        if checkpoint is not None:
            self._save_checkpoint(checkpoint, model, optimizer, generator.get_state(), step, total, seconds, history)
        result = TrainResult(model, step, seconds, loss_value, len(points), len(data.q), q=data.q, history=history)
        if structured:
            self._surface_owners(result, data)
        return result

    def _loop(self, model, optimizer, generator, points, labels, configs, q_all, prior, structured, run: dict, total,
              budget, started, checkpoint, progress) -> None:
        """Steps until done; ``run`` (step, loss, history) is kept current after every step."""
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        last_save = time.perf_counter()
        step, history = run["step"], run["history"]
        while True:
            # The schedule runs on the fraction done: of the steps, or of the time budget (so a
            # machine that slows down mid-run still ends on time, with the rate annealed).
            fraction = step / total if total is not None else (time.perf_counter() - started) / budget
            if fraction >= 1.0:
                break
            rate = self.final_learning_rate + 0.5 * (self.learning_rate - self.final_learning_rate) * (1 + math.cos(math.pi * fraction))
            optimizer.param_groups[0]["lr"] = rate
            if structured:
                optimizer.param_groups[1]["lr"] = self.kinematics_learning_rate * rate / self.learning_rate
            rows = torch.randint(0, len(points), (self.batch,), generator=generator)
            batch_points, batch_labels = points[rows], labels[rows]
            if structured:
                poses = model.chain.base_T_links(q_all)
                logits = torch.logsumexp(model.link_logits(batch_points, poses[configs[rows]]), dim=1)
                loss = bce(logits, batch_labels)
                prior_terms = []
                for index, (pool, pool_labels) in enumerate(prior):
                    if len(pool) == 0:
                        continue
                    take = torch.randint(0, len(pool), (max(1, self.prior_batch // len(prior)),), generator=generator)
                    prior_logits = model.networks[index](pool[take])
                    prior_terms.append(bce(prior_logits, pool_labels[take]))
                if prior_terms:
                    loss = loss + 0.25 * torch.stack(prior_terms).mean()
                loss = loss + self.kinematics_weight * (model.chain.deltas ** 2).sum()
            else:
                logits = model.logits(batch_points, q_all[configs[rows]])
                loss = bce(logits, batch_labels)
            optimizer.zero_grad()
            loss.backward()
            if structured and fraction < self.kinematics_start:
                model.chain.deltas.grad = None
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

    @staticmethod
    def _save_checkpoint(path: Path, model, optimizer, generator_state, step, total, elapsed, history) -> None:
        from rigs.files import atomic_write_bytes
        import io

        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "generator": generator_state,
                    "step": step, "total": -1 if total is None else total, "elapsed": elapsed,
                    "history": torch.tensor(history if history else np.zeros((0, 2)), dtype=torch.float64)}, buffer)
        atomic_write_bytes(path, buffer.getvalue())

    @staticmethod
    def _surface_owners(result: TrainResult, data: TrainingData, keep: int = 200_000) -> None:
        """The measured surface samples in the frame of the link that claims each (for collision margins)."""
        model = result.model
        rng = np.random.default_rng(0)
        rows = rng.choice(len(data.surface), min(keep, len(data.surface)), replace=False)
        points = torch.from_numpy(data.surface[rows])
        with torch.no_grad():
            poses = model.chain.base_T_links(torch.from_numpy(data.q.astype(np.float32)))[data.surface_config[rows]]
            owner = torch.argmax(model.link_logits(points, poses), dim=1)
            chosen = poses[torch.arange(len(rows)), owner]
            local = torch.einsum("nji,nj->ni", chosen[:, :3, :3], points - chosen[:, :3, 3])
        result.surface_points_link = local.numpy()
        result.surface_link_index = owner.numpy().astype(np.int32)
        result.surface_config = data.surface_config[rows]
