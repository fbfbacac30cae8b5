"""Occupancy self-models behind one interface: ``occupancy(points (N, 3), q (N, dof) or (dof,)) -> (N,)``.

:class:`SelfModel` is the one type: every field a model can carry is declared there, and a model
fresh from training and the same model loaded from its folder answer the same questions
(``model.save(out, ...)``, ``SelfModel.load(folder)``). Its two kinds:

- :class:`StructuredSelfModel` (kind ``structured``): the arm's chain from a URDF with learnable
  joint placement corrections, one small :class:`~selfmodel.model.networks.FourierMLP` per link in that
  link's frame, occupancy = union over links (a soft maximum of their logits). Which link owns which
  point is learned from the data; each network only answers inside its link's domain box.
- :class:`FreeSelfModel` (kind ``free``): one SIREN on (point, q), no kinematics: the published
  visual self-model's shape, and the choice when the chain is unknown.

Points are in the base frame, metres; q in radians (metres for prismatic joints); probabilities in
[0, 1]. Outside the workspace box the models answer 0 (nothing was ever seen there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from capture.session import Session
from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.files import inside_folder, output_folder
from selfmodel.model.chain import ArmLinks, TorchArmLinks
from selfmodel.model.corrections import JointCorrections
from selfmodel.model.folder import (CONFIG, SurfaceSamples, read_config, read_surface, read_weights,
                                    write_folder)
from selfmodel.model.networks import OUTSIDE_LOGIT, FourierMLP, Siren, as_queries

QUERY_BATCH = 100_000


class SelfModel(nn.Module):
    """An occupancy self-model: what every kind answers and every field it can carry.

    Each kind defines ``logits(points, q)`` and ``config()``. Fields, None where not known:

    - ``kind``: ``"structured"`` or ``"free"`` (a class attribute).
    - ``joint_names``: the movable joints, base to tip: the order of q's columns.
    - ``workspace_lo``, ``workspace_hi``: (3,) float32, m, base frame: the box the data covered.
    - ``hyper``: the network's sizes (dict; ``config()`` adds what rebuilds it).
    - ``spec``: the :class:`ArmLinks` the model poses its links with (structured); None for a
      free model, which knows no chain.
    - ``link_names``: the links, base to tip (structured), else None.
    - ``folder``: Path where the model was saved or loaded from; None for a model fresh from
      training until ``save`` sets it.
    - ``urdf_path``: Path of the description: the one it trained on (structured; after save or load,
      the copy in its folder), or the one ``attach_description`` gave a free model to cut its body
      into links.
    - ``corrected_urdf_path``: Path of the description with the learned joint placements written
      in (``robot_corrected.urdf``, structured); None until the model is in a folder.
    - ``base_link``, ``tip_link``: str, the chain's ends (a free model's from ``attach_description``).
    - ``held_joints``: dict joint -> rad or m, where the joints off the chain stood.
    - ``corrections``: :class:`JointCorrections` the placement fit found (structured).
    - ``board``: dict, the calibration board declared on the tip as the session's ``sensors.board``
      states it (with ``tip_T_board_fitted`` where a calibration fitted its mount), or None.
    - ``training_run``: dict, what the run did: ``steps``, ``seconds``, ``final_loss``,
      ``labelled_points``, ``configurations``; once saved or loaded, also the run's options and the
      ``sessions`` (paths relative to ``folder``), as config.json's ``training`` holds them.
    - ``training_q``: (C, dof) float, rad: the training configurations (structured: kept in the
      folder; free: from the training sessions, read by ``attach_description`` after loading).
    - ``training_pose_ids``: list of C pose ids naming ``training_q``'s rows, where the sessions
      are known.
    - ``surface``: :class:`~selfmodel.model.folder.SurfaceSamples`, the measured surface samples of
      the training data per owner link (structured).

    What only one kind's networks have is declared by that kind: a structured model's ``chain``
    (:class:`TorchArmLinks`, the learnable placements), ``domains_lo``, ``domains_hi`` ((L, 3) m, each
    link's box in its frame) and ``networks``; a free model's ``q_lo``, ``q_hi`` ((dof,) rad) and
    ``network``.
    """

    kind = ""

    def __init__(self, joint_names: list[str], workspace_lo, workspace_hi, urdf_path: Path | None = None,
                 base_link: str | None = None, tip_link: str | None = None,
                 held_joints: dict[str, float] | None = None):
        super().__init__()
        self.joint_names = list(joint_names)
        self.workspace_lo = np.asarray(workspace_lo, dtype=np.float32)
        self.workspace_hi = np.asarray(workspace_hi, dtype=np.float32)
        self.hyper: dict = {}
        self.spec: ArmLinks | None = None
        self.link_names: list[str] | None = None
        self.folder: Path | None = None
        self.urdf_path: Path | None = Path(urdf_path) if urdf_path is not None else None
        self.corrected_urdf_path: Path | None = None
        self.base_link: str | None = base_link
        self.tip_link: str | None = tip_link
        self.held_joints: dict[str, float] | None = dict(held_joints) if held_joints is not None else None
        self.corrections: JointCorrections | None = None
        self.board: dict | None = None
        self.training_run: dict | None = None
        self.training_q: np.ndarray | None = None
        self.training_pose_ids: list[str] | None = None
        self.surface: SurfaceSamples | None = None

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Workspace box (lo (3,), hi (3,)) in the base frame, metres."""
        return self.workspace_lo.copy(), self.workspace_hi.copy()

    @property
    def dof(self) -> int:
        return len(self.joint_names)

    def _inside(self, points: np.ndarray) -> np.ndarray:
        return np.all((points >= self.workspace_lo) & (points <= self.workspace_hi), axis=1)

    @property
    def device(self) -> torch.device:
        """Where the weights are (a model is moved with ``.to(device)``; queries come back as numpy)."""
        return next(self.parameters()).device

    def occupancy(self, points, q) -> np.ndarray:
        """points (N, 3) base frame m, q (N, dof) or (dof,) -> (N,) occupancy probabilities."""
        points, q = as_queries(points, q, self.dof)
        out = np.zeros(len(points), dtype=np.float32)
        inside = np.flatnonzero(self._inside(points))
        device = self.device
        with torch.no_grad():
            for start in range(0, len(inside), QUERY_BATCH):
                rows = inside[start:start + QUERY_BATCH]
                logits = self.logits(torch.from_numpy(points[rows]).to(device),
                                     torch.from_numpy(np.ascontiguousarray(q[rows])).to(device))
                out[rows] = torch.sigmoid(logits).cpu().numpy()
        return out

    def surface_by_link(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
        """The measured surface samples of a structured model's training data, per owner link.

        Returns (link -> points (M, 3) in the link frame, m; link -> configuration index (M,);
        q (C, dof) training configurations, rad). Pose them with the model's learned kinematics
        (``model.base_T_links(q)``) or ``robot_corrected.urdf``.
        """
        if self.surface is None:
            where = self.folder if self.folder is not None else f"this {self.kind} model"
            raise InputError(f"{where}: surface samples are kept for structured models only.")
        surface = self.surface
        return ({link: surface.points_link[surface.link_index == i] for i, link in enumerate(self.link_names)},
                {link: surface.config[surface.link_index == i] for i, link in enumerate(self.link_names)},
                self.training_q)

    # -- the folder ---------------------------------------------------------------------------
    def save(self, out: Path, sessions: list[Session], training: dict,
             beside: Callable[[Path], None] | None = None) -> None:
        """Write the model folder ``out`` (which must not exist) whole: built under a temporary name
        and moved into place, so a failure leaves nothing. ``sessions``: those it was trained on
        (config.json names them relative to ``out``); ``training``: the run's options, kept with what
        the run did; ``beside``: writes more files into the folder before it appears (the train job's
        changes.json). Afterwards the model names its folder and the files in it, as a loaded one does."""
        out = Path(out)
        with output_folder(out) as folder:
            config = write_folder(self, folder, sessions, training)
            if beside is not None:
                beside(folder)
        self.folder = out
        self.training_run = config["training"]
        if self.kind == "structured":
            self.urdf_path, self.corrected_urdf_path = out / config["urdf"], out / config["corrected_urdf"]

    @classmethod
    def load(cls, folder: Path) -> SelfModel:
        """The model saved in ``folder``, of the kind it holds; InputError for a missing, foreign or
        other-version folder (or one of another kind than ``cls`` asks for). Every file it names
        (``urdf``, ``corrected_urdf``) must lie inside the folder."""
        folder = Path(folder)
        config = read_config(folder)
        kind = StructuredSelfModel if config["kind"] == "structured" else FreeSelfModel
        if not issubclass(kind, cls):
            raise InputError(f"{folder}: holds a {kind.kind} self-model, not a {cls.kind} one.")
        try:
            model = kind.from_config(folder, config)
        except KeyError as error:
            raise InputError(f"{folder / CONFIG}: key {error.args[0]!r} is missing.") from None
        read_weights(model, folder)
        model.folder = folder
        model.training_run = config.get("training")
        model.eval()
        return model


class StructuredSelfModel(SelfModel):
    """Per-link networks in link frames; union over links. See the module docstring."""

    kind = "structured"

    def __init__(self, spec: ArmLinks, domains_lo: np.ndarray, domains_hi: np.ndarray, workspace_lo: np.ndarray,
                 workspace_hi: np.ndarray, hidden: int = 96, layers: int = 3, frequencies: int = 6,
                 urdf_path: Path | None = None, base_link: str | None = None, tip_link: str | None = None):
        super().__init__(spec.joint_names, workspace_lo, workspace_hi, urdf_path, base_link, tip_link, spec.held)
        self.spec = spec
        self.chain = TorchArmLinks(spec)
        self.link_names = list(spec.link_names)
        self.domains_lo = np.asarray(domains_lo, dtype=np.float32)  # (L, 3) m, each link's domain box in its frame
        self.domains_hi = np.asarray(domains_hi, dtype=np.float32)
        self.hyper = {"hidden": hidden, "layers": layers, "frequencies": frequencies}
        self.networks = nn.ModuleList([
            FourierMLP((lo + hi) / 2, float(np.max(hi - lo) / 2), hidden, layers, frequencies)
            for lo, hi in zip(self.domains_lo, self.domains_hi)])
        # Not saved (the config holds the domains), but moved with the model.
        self.register_buffer("_lo", torch.from_numpy(self.domains_lo), persistent=False)
        self.register_buffer("_hi", torch.from_numpy(self.domains_hi), persistent=False)

    # -- the contract with collision export ---------------------------------------------------
    def link_bounds(self, link: str) -> tuple[np.ndarray, np.ndarray]:
        """Domain box (lo (3,), hi (3,)) of ``link``'s network in the link frame, metres."""
        index = self.link_names.index(link)
        return self.domains_lo[index].copy(), self.domains_hi[index].copy()

    def link_occupancy(self, link: str, points_link) -> np.ndarray:
        """points (N, 3) in ``link``'s frame, m -> (N,) probabilities that ``link`` occupies them."""
        index = self.link_names.index(link)
        points = torch.from_numpy(np.asarray(points_link, dtype=np.float32).reshape(-1, 3))
        out = np.zeros(len(points), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, len(points), QUERY_BATCH):
                chunk = points[start:start + QUERY_BATCH].to(self.device)
                out[start:start + QUERY_BATCH] = torch.sigmoid(self._link_logits(index, chunk)).cpu().numpy()
        return out

    def base_T_links(self, q) -> np.ndarray:
        """q (N, dof) or (dof,) -> (N, L, 4, 4) learned link poses in the base frame."""
        q = np.atleast_2d(np.asarray(q, dtype=np.float32))
        with torch.no_grad():
            return self.chain.base_T_links(torch.from_numpy(q)).double().cpu().numpy()

    def corrected_joint_origins(self) -> dict[str, np.ndarray]:
        """Movable joint name -> learned origin (4, 4) in its parent link's frame."""
        return self.chain.corrected_origins()

    # -- evaluation ---------------------------------------------------------------------------
    def _link_logits(self, index: int, points_link: torch.Tensor) -> torch.Tensor:
        inside = torch.all((points_link >= self._lo[index]) & (points_link <= self._hi[index]), dim=1)
        logits = torch.full((len(points_link),), OUTSIDE_LOGIT, device=points_link.device)
        rows = torch.nonzero(inside).squeeze(1)
        if len(rows):
            logits = logits.index_put((rows,), self.networks[index](points_link[rows]))
        return logits

    def link_logits(self, points: torch.Tensor, base_T_links: torch.Tensor) -> torch.Tensor:
        """points (N, 3) base frame, poses (N, L, 4, 4) -> (N, L) per-link logits."""
        columns = []
        for index in range(len(self.link_names)):
            pose = base_T_links[:, index]
            rotation, translation = pose[:, :3, :3], pose[:, :3, 3]
            local = torch.einsum("nji,nj->ni", rotation, points - translation)
            columns.append(self._link_logits(index, local))
        return torch.stack(columns, dim=1)

    def logits(self, points: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        unique, inverse = torch.unique(q, dim=0, return_inverse=True)
        poses = self.chain.base_T_links(unique)[inverse]
        return torch.logsumexp(self.link_logits(points, poses), dim=1)

    def config(self) -> dict:
        return {"domains_lo": self.domains_lo.tolist(), "domains_hi": self.domains_hi.tolist(), **self.hyper}

    @classmethod
    def from_config(cls, folder: Path, config: dict) -> StructuredSelfModel:
        """The model ``folder``'s checked config.json describes, without its weights: the chain from
        the description in the folder, its placement fit, board and training data."""
        network = config["network"]
        urdf = inside_folder(folder, config["urdf"], f"{folder / CONFIG}: key 'urdf'", "URDF path")
        corrected = inside_folder(folder, config["corrected_urdf"], f"{folder / CONFIG}: key 'corrected_urdf'",
                                  "URDF path")
        urdf_io.check_meshes(urdf)
        spec = ArmLinks.from_urdf(urdf, config["base_link"], config["tip_link"], config.get("held_joints") or {})
        if spec.link_names != config["link_names"] or spec.joint_names != config["joint_names"]:
            raise InputError(f"{folder / CONFIG}: its links and joints are not those of the chain of {urdf.name} "
                             f"({spec.link_names}; {spec.joint_names}).")
        model = cls(spec, np.array(network["domains_lo"]), np.array(network["domains_hi"]),
                    np.array(config["workspace_lo"]), np.array(config["workspace_hi"]),
                    network["hidden"], network["layers"], network["frequencies"], urdf_path=urdf,
                    base_link=config["base_link"], tip_link=config["tip_link"])
        model.corrected_urdf_path = corrected
        if config.get("joint_placement") is not None:
            try:
                model.corrections = JointCorrections.from_json(config["joint_placement"], spec.joint_names)
            except (KeyError, TypeError, ValueError, IndexError):
                raise InputError(f"{folder / CONFIG}: key 'joint_placement' is not a placement fit of joints "
                                 f"{', '.join(spec.joint_names)}.") from None
        model.board = config.get("board")
        model.surface, model.training_q = read_surface(folder, model.link_names)
        return model


class FreeSelfModel(SelfModel):
    """One SIREN on (point, q) without kinematics: the baseline."""

    kind = "free"

    def __init__(self, joint_names: list[str], workspace_lo, workspace_hi, q_lo, q_hi, hidden: int = 256, layers: int = 5,
                 omega: float = 30.0):
        super().__init__(joint_names, workspace_lo, workspace_hi)
        self.q_lo = np.asarray(q_lo, dtype=np.float32)  # (dof,) rad, the training configurations' range
        self.q_hi = np.asarray(q_hi, dtype=np.float32)
        self.hyper = {"hidden": hidden, "layers": layers, "omega": omega}
        self.network = Siren(3 + len(joint_names), hidden, layers, omega)
        self.register_buffer("_center", torch.from_numpy(np.concatenate([(self.workspace_lo + self.workspace_hi) / 2,
                                                                         (self.q_lo + self.q_hi) / 2])))
        half = np.concatenate([np.full(3, np.max(self.workspace_hi - self.workspace_lo) / 2),
                               np.maximum((self.q_hi - self.q_lo) / 2, 1e-3)])
        self.register_buffer("_half", torch.from_numpy(half.astype(np.float32)))

    def logits(self, points: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return self.network((torch.cat([points, q], dim=1) - self._center) / self._half)

    def config(self) -> dict:
        return {"q_lo": self.q_lo.tolist(), "q_hi": self.q_hi.tolist(), **self.hyper}

    @classmethod
    def from_config(cls, folder: Path, config: dict) -> FreeSelfModel:
        """The model ``folder``'s checked config.json describes, without its weights."""
        network = config["network"]
        return cls(config["joint_names"], config["workspace_lo"], config["workspace_hi"], network["q_lo"],
                   network["q_hi"], network["hidden"], network["layers"], network["omega"])

    def attach_description(self, urdf: Path, sessions: list[Session]) -> None:
        """Give this model, which knows no chain, the description that cuts its body into links and,
        from the ``sessions`` it was trained on, its base and tip links, held joints and training
        configurations with their pose ids."""
        if not sessions:
            raise InputError(f"{self.folder or 'the free model'}: no training session is given, so its base and tip "
                             f"links and its training configurations are unknown.")
        self.urdf_path = Path(urdf)
        self.base_link, self.tip_link = sessions[0].base_link, sessions[0].tip_link
        self.held_joints = sessions[0].held_joints
        self.training_q = np.vstack([session.q for session in sessions])
        self.training_pose_ids = [pose for session in sessions for pose in session.pose_ids]
