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

``load_model(folder)`` gives the model back; a folder of another format version is refused with
one sentence.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch

from rigs import urdf as urdf_io
from rigs.documents import check_format
from rigs.errors import InputError
from rigs.files import atomic_write_bytes, atomic_write_json, inside_folder, load_npz, load_torch, read_json
from selfmodel.model.baked import BAKED, bake, save_baked
from selfmodel.model.chain import ChainSpec
from selfmodel.model.corrections import JointCorrections
from selfmodel.model.models import FreeSelfModel, StructuredSelfModel

FORMAT = "selfcal-selfmodel"
FORMAT_VERSION = 1
CONFIG = "config.json"
WEIGHTS = "weights.pt"
SURFACE = "surface_samples.npz"
CORRECTED_URDF = "robot_corrected.urdf"


def save_model(result, folder: Path, sessions: list, training: dict, board: dict | None = None) -> None:
    """Write a :class:`~selfmodel.learn.trainer.TrainResult` into ``folder`` (which exists and is empty)."""
    folder = Path(folder)
    model = result.model
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": model.kind,
        "joint_names": model.joint_names,
        "workspace_lo": model.workspace_lo.tolist(),
        "workspace_hi": model.workspace_hi.tolist(),
        "network": model.config(),
        "training": {**training, "steps": result.steps, "seconds": round(result.seconds, 1),
                     "final_loss": result.final_loss, "labelled_points": result.labelled_points,
                     "configurations": result.configurations,
                     # Relative to the model folder, so the export finds them wherever the two move together.
                     "sessions": [os.path.relpath(Path(s.path).resolve(), folder.resolve()) for s in sessions]},
        "units": {"length": "m", "angle": "rad"},
    }
    if isinstance(model, StructuredSelfModel):
        source = Path(model.urdf_path)
        tree = urdf_io.parse_urdf(source)
        urdf_io.copy_self_contained(tree, source.parent, folder, [source.parent], name="robot.urdf")
        corrected = urdf_io.parse_urdf(folder / "robot.urdf")
        for joint, origin in model.corrected_joint_origins().items():
            urdf_io.set_joint_origin(corrected, joint, origin)
        urdf_io.write_urdf(corrected, folder / CORRECTED_URDF)
        config.update({"urdf": "robot.urdf", "corrected_urdf": CORRECTED_URDF, "base_link": model.base_link,
                       "tip_link": model.tip_link, "link_names": model.link_names, "board": board,
                       "held_joints": dict(model.spec.held),
                       "joint_corrections": model.chain.deltas.detach().numpy().tolist()})
        if result.corrections is not None:
            config["joint_placement"] = result.corrections.to_json()
        buffer = io.BytesIO()
        np.savez_compressed(buffer, points_link=result.surface_points_link.astype(np.float32),
                            link_index=result.surface_link_index, config=result.surface_config,
                            q=result.q.astype(np.float64))
        atomic_write_bytes(folder / SURFACE, buffer.getvalue())

        # The planner-speed form: every link network read once on a grid in its own frame.
        baked = bake(model)
        save_baked(baked, folder)
        config.update({"baked": BAKED, "baked_pitch_m": baked.pitch})
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    atomic_write_bytes(folder / WEIGHTS, buffer.getvalue())
    atomic_write_json(folder / CONFIG, config)


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


def load_model(folder: Path) -> StructuredSelfModel | FreeSelfModel:
    """The model saved in ``folder``; InputError for a missing, foreign or other-version folder.

    Every file it names (``urdf``, ``corrected_urdf``) must lie inside the folder.
    """
    folder = Path(folder)
    config = read_config(folder)
    network = config["network"]
    try:
        if config["kind"] == "structured":
            urdf = inside_folder(folder, config["urdf"], f"{folder / CONFIG}: key 'urdf'", "URDF path")
            corrected = inside_folder(folder, config["corrected_urdf"], f"{folder / CONFIG}: key 'corrected_urdf'",
                                      "URDF path")
            urdf_io.check_meshes(urdf)
            spec = ChainSpec.from_urdf(urdf, config["base_link"], config["tip_link"], config.get("held_joints") or {})
            if spec.link_names != config["link_names"] or spec.joint_names != config["joint_names"]:
                raise InputError(f"{folder / CONFIG}: its links and joints are not those of the chain of {urdf.name} "
                                 f"({spec.link_names}; {spec.joint_names}).")
            model = StructuredSelfModel(spec, np.array(network["domains_lo"]), np.array(network["domains_hi"]),
                                        np.array(config["workspace_lo"]), np.array(config["workspace_hi"]),
                                        network["hidden"], network["layers"], network["frequencies"], urdf_path=urdf,
                                        base_link=config["base_link"], tip_link=config["tip_link"])
            model.corrected_urdf_path = corrected
            model.corrections = None
            if config.get("joint_placement") is not None:
                try:
                    model.corrections = JointCorrections.from_json(config["joint_placement"], spec.joint_names)
                except (KeyError, TypeError, ValueError, IndexError):
                    raise InputError(f"{folder / CONFIG}: key 'joint_placement' is not a placement fit of joints "
                                     f"{', '.join(spec.joint_names)}.") from None
            model.board = config.get("board")
            model.folder = folder
        else:
            model = FreeSelfModel(config["joint_names"], config["workspace_lo"], config["workspace_hi"], network["q_lo"],
                                  network["q_hi"], network["hidden"], network["layers"], network["omega"])
    except KeyError as error:
        raise InputError(f"{folder / CONFIG}: key {error.args[0]!r} is missing.") from None
    weights = folder / WEIGHTS
    if not weights.is_file():
        raise InputError(f"{weights}: file not found.")
    state = load_torch(weights)  # weights_only=True: a file carrying pickled code is refused, never run
    try:
        model.load_state_dict(state)
    except (RuntimeError, ValueError, TypeError, AttributeError, KeyError) as error:
        raise InputError(f"{weights}: not weights of this model ({' '.join(str(error).split())[:200]}).") from None
    model.eval()
    return model


def surface_samples(model_or_folder) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Measured surface samples of a structured model's training data, per owner link.

    Returns (link -> points (M, 3) in the link frame, m; link -> configuration index (M,);
    q (C, dof) training configurations). Pose them with the model's learned kinematics
    (``model.base_T_links(q)``) or ``robot_corrected.urdf``.
    """
    folder = Path(getattr(model_or_folder, "folder", model_or_folder))
    config = read_config(folder)
    if config["kind"] != "structured":
        raise InputError(f"{folder}: surface samples are kept for structured models only.")
    arrays = load_npz(folder / SURFACE, ["points_link", "link_index", "config", "q"])
    points, owner, configs, q = arrays["points_link"], arrays["link_index"], arrays["config"], arrays["q"]
    links = config["link_names"]
    if points.ndim != 2 or points.shape[1:] != (3,) or owner.shape != (len(points),) or configs.shape != (len(points),) \
            or q.ndim != 2 or not np.issubdtype(owner.dtype, np.integer) or not np.issubdtype(configs.dtype, np.integer) \
            or (len(owner) and (owner.min() < 0 or owner.max() >= len(links) or configs.min() < 0 or configs.max() >= len(q))):
        raise InputError(f"{folder / SURFACE}: its arrays do not fit together (points (S, 3), link_index and config "
                         f"(S,) indices into the links and q).")
    return ({link: points[owner == i] for i, link in enumerate(links)},
            {link: configs[owner == i] for i, link in enumerate(links)}, q)


def training_session_paths(folder: Path) -> list[Path]:
    """The sessions the model in ``folder`` was trained on, as its config.json records them."""
    paths = (read_config(Path(folder)).get("training") or {}).get("sessions") or []
    return [Path(path) if Path(path).is_absolute() else (Path(folder) / path).resolve() for path in paths]
