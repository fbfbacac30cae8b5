"""The model folder: what a trained self-model is on disk.

```
model/
  config.json              format, format_version, kind, joints, links and their domains, workspace,
                           network sizes, how it was trained
  weights.pt               the state_dict (torch.load(..., weights_only=True); no pickle)
  robot.urdf, meshes/      the description the model was trained with (structured models)
  robot_corrected.urdf     the same with the learned joint placements written in (structured)
  surface_samples.npz      measured surface samples in the frame of the link that claims each,
                           with the training configurations (structured; for collision margins)
  baked.npz                per-link logit grids in link frames (structured; selfmodel.model.baked)
```

``SelfModel.save`` writes it and ``SelfModel.load`` gives the model back
(:mod:`selfmodel.model.models`); this module holds what is on disk and how each file is read and
written. A folder of another format version is refused with one sentence.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rigs import urdf as urdf_io
from rigs.documents import check_format
from rigs.errors import InputError
from rigs.files import atomic_write_bytes, atomic_write_json, load_npz, load_torch, read_json
from selfmodel.model.baked import BAKED, bake, save_baked

FORMAT = "selfcal-selfmodel"
FORMAT_VERSION = 1
CONFIG = "config.json"
WEIGHTS = "weights.pt"
SURFACE = "surface_samples.npz"
CORRECTED_URDF = "robot_corrected.urdf"


@dataclass
class SurfaceSamples:
    """The measured surface samples of a structured model's training data (``surface_samples.npz``),
    each in the frame of the link that claims it.

    ``points_link`` (S, 3) float32, m, in the owner link's frame; ``link_index`` (S,) int, the owner's
    index into the model's links; ``config`` (S,) int, the configuration's index into the model's
    ``training_q`` (C, dof).
    """

    points_link: np.ndarray
    link_index: np.ndarray
    config: np.ndarray


def write_folder(model, folder: Path, sessions: list, training: dict) -> dict:
    """Write ``model`` (a trained :class:`~selfmodel.model.models.SelfModel`) into ``folder``, which
    exists and is empty; the config written. ``training``: the options the run was given, kept beside
    what the run did (``model.training_run``) and the sessions, relative to the folder."""
    if model.training_run is None:
        raise ValueError("only a trained self-model can be saved: it knows no training run")
    folder = Path(folder)
    run = model.training_run
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": model.kind,
        "joint_names": model.joint_names,
        "workspace_lo": model.workspace_lo.tolist(),
        "workspace_hi": model.workspace_hi.tolist(),
        "network": model.config(),
        "training": {**training, "steps": run["steps"], "seconds": round(run["seconds"], 1),
                     "final_loss": run["final_loss"], "labelled_points": run["labelled_points"],
                     "configurations": run["configurations"],
                     # Relative to the model folder, so the export finds them wherever the two move together.
                     "sessions": [os.path.relpath(Path(s.path).resolve(), folder.resolve()) for s in sessions]},
        "units": {"length": "m", "angle": "rad"},
    }
    if model.kind == "structured":
        source = Path(model.urdf_path)
        tree = urdf_io.parse_urdf(source)
        urdf_io.copy_self_contained(tree, source.parent, folder, [source.parent], name="robot.urdf")
        corrected = urdf_io.parse_urdf(folder / "robot.urdf")
        for joint, origin in model.corrected_joint_origins().items():
            urdf_io.set_joint_origin(corrected, joint, origin)
        urdf_io.write_urdf(corrected, folder / CORRECTED_URDF)
        config.update({"urdf": "robot.urdf", "corrected_urdf": CORRECTED_URDF, "base_link": model.base_link,
                       "tip_link": model.tip_link, "link_names": model.link_names, "board": model.board,
                       "held_joints": dict(model.spec.held),
                       "joint_corrections": model.chain.deltas.detach().numpy().tolist()})
        if model.corrections is not None:
            config["joint_placement"] = model.corrections.to_json()
        surface = model.surface
        buffer = io.BytesIO()
        np.savez_compressed(buffer, points_link=surface.points_link.astype(np.float32),
                            link_index=surface.link_index, config=surface.config,
                            q=model.training_q.astype(np.float64))
        atomic_write_bytes(folder / SURFACE, buffer.getvalue())

        # The planner-speed form: every link network read once on a grid in its own frame.
        baked = bake(model)
        save_baked(baked, folder)
        config.update({"baked": BAKED, "baked_pitch_m": baked.pitch})
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    atomic_write_bytes(folder / WEIGHTS, buffer.getvalue())
    atomic_write_json(folder / CONFIG, config)
    return config


def read_config(folder: Path) -> dict:
    """The checked config.json of a model folder: format, and the type of every key selfcal reads."""
    folder = Path(folder)
    path = folder / CONFIG
    if not path.is_file():
        raise InputError(f"{folder}: not a self-model folder ({CONFIG} is missing).")
    config = read_json(path, "model config")
    top = check_format(config, path, FORMAT, FORMAT_VERSION, "selfcal self-model config")
    kind = top.get("kind", "str")
    if kind not in ("structured", "free"):
        raise InputError(f"{top.where('kind')}: unknown model kind {kind!r} (expected structured or free).")
    names = top.get("joint_names", "names")
    for key in ("workspace_lo", "workspace_hi"):
        top.get(key, "vector", length=3)
    network = top.get("network", "table")
    # Bounds keep a hostile file from asking for a network of billions of weights.
    for key, largest in (("hidden", 4096), ("layers", 64)):
        value = network.get(key, "int")
        if not 1 <= value <= largest:
            raise InputError(f"{network.where(key)} should be between 1 and {largest}, got {value}.")
    if kind == "structured":
        for key in ("urdf", "corrected_urdf", "base_link", "tip_link"):
            top.get(key, "str")
        links = top.get("link_names", "names")
        frequencies = network.get("frequencies", "int")
        if not 0 <= frequencies <= 32:
            raise InputError(f"{network.where('frequencies')} should be between 0 and 32, got {frequencies}.")
        for key in ("domains_lo", "domains_hi"):
            network.get(key, "matrix", shape=(len(links), 3))
        board = top.get("board", "table", None, nullable=True)
        if board is not None:
            for key in ("tip_T_board_nominal", "tip_T_board_fitted"):
                board.get(key, "matrix", None, shape=(4, 4), nullable=True)
    else:
        network.get("omega", "number")
        for key in ("q_lo", "q_hi"):
            network.get(key, "vector", length=len(names))
    return config


def read_weights(model, folder: Path) -> None:
    """Load ``folder``'s weights.pt into ``model`` (built from the folder's config); InputError when
    it is missing or holds weights of another model."""
    weights = Path(folder) / WEIGHTS
    if not weights.is_file():
        raise InputError(f"{weights}: file not found.")
    state = load_torch(weights)  # weights_only=True: a file carrying pickled code is refused, never run
    try:
        model.load_state_dict(state)
    except (RuntimeError, ValueError, TypeError, AttributeError, KeyError) as error:
        raise InputError(f"{weights}: not weights of this model ({' '.join(str(error).split())[:200]}).") from None


def read_surface(folder: Path, links: list[str]) -> tuple[SurfaceSamples, np.ndarray]:
    """The surface samples kept in ``folder`` for a structured model of ``links``, and its training
    configurations q (C, dof) rad; InputError when the arrays do not fit together."""
    folder = Path(folder)
    arrays = load_npz(folder / SURFACE, ["points_link", "link_index", "config", "q"])
    points, owner, configs, q = arrays["points_link"], arrays["link_index"], arrays["config"], arrays["q"]
    if points.ndim != 2 or points.shape[1:] != (3,) or owner.shape != (len(points),) or configs.shape != (len(points),) \
            or q.ndim != 2 or not np.issubdtype(owner.dtype, np.integer) or not np.issubdtype(configs.dtype, np.integer) \
            or (len(owner) and (owner.min() < 0 or owner.max() >= len(links) or configs.min() < 0 or configs.max() >= len(q))):
        raise InputError(f"{folder / SURFACE}: its arrays do not fit together (points (S, 3), link_index and config "
                         f"(S,) indices into the links and q).")
    return SurfaceSamples(points, owner, configs), q


def training_session_paths(folder: Path) -> list[Path]:
    """The sessions the model in ``folder`` was trained on, as its config.json records them."""
    paths = (read_config(Path(folder)).get("training") or {}).get("sessions") or []
    return [Path(path) if Path(path).is_absolute() else (Path(folder) / path).resolve() for path in paths]
