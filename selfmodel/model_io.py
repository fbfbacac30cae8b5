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
```

``load_model(folder)`` gives the model back; a folder of another format version is refused with
one sentence.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import torch

from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.files import atomic_write_bytes, atomic_write_json
from selfmodel.chain import ChainSpec
from selfmodel.models import FreeSelfModel, StructuredSelfModel

FORMAT = "selfcal-selfmodel"
FORMAT_VERSION = 1
CONFIG = "config.json"
WEIGHTS = "weights.pt"
SURFACE = "surface_samples.npz"
CORRECTED_URDF = "robot_corrected.urdf"


def save_model(result, folder: Path, sessions: list, training: dict, board: dict | None = None) -> None:
    """Write a :class:`~selfmodel.training.TrainResult` into ``folder`` (which exists and is empty)."""
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
        urdf_io.copy_self_contained(tree, source.parent, folder, [source.parent], confine=False, name="robot.urdf")
        corrected = urdf_io.parse_urdf(folder / "robot.urdf")
        for joint, origin in model.corrected_joint_origins().items():
            urdf_io.set_joint_origin(corrected, joint, origin)
        urdf_io.write_urdf(corrected, folder / CORRECTED_URDF)
        config.update({"urdf": "robot.urdf", "corrected_urdf": CORRECTED_URDF, "base_link": model.base_link,
                       "tip_link": model.tip_link, "link_names": model.link_names, "board": board,
                       "held_joints": dict(model.spec.held),
                       "joint_corrections": model.chain.deltas.detach().numpy().tolist()})
        buffer = io.BytesIO()
        np.savez_compressed(buffer, points_link=result.surface_points_link.astype(np.float32),
                            link_index=result.surface_link_index, config=result.surface_config,
                            q=result.q.astype(np.float64))
        atomic_write_bytes(folder / SURFACE, buffer.getvalue())
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    atomic_write_bytes(folder / WEIGHTS, buffer.getvalue())
    atomic_write_json(folder / CONFIG, config)


def read_config(folder: Path) -> dict:
    folder = Path(folder)
    path = folder / CONFIG
    if not path.is_file():
        raise InputError(f"{folder}: not a self-model folder ({CONFIG} is missing).")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: not valid JSON ({error}).") from None
    if config.get("format") != FORMAT or config.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{path}: format {config.get('format')!r} version {config.get('format_version')!r} is not "
                         f"a {FORMAT} version {FORMAT_VERSION} this selfcal reads; retrain the model with this version.")
    return config


def load_model(folder: Path) -> StructuredSelfModel | FreeSelfModel:
    """The model saved in ``folder``; InputError for a missing, foreign or other-version folder."""
    folder = Path(folder)
    config = read_config(folder)
    network = config["network"]
    try:
        if config["kind"] == "structured":
            urdf = folder / config["urdf"]
            spec = ChainSpec.from_urdf(urdf, config["base_link"], config["tip_link"], config.get("held_joints") or {})
            model = StructuredSelfModel(spec, np.array(network["domains_lo"]), np.array(network["domains_hi"]),
                                        np.array(config["workspace_lo"]), np.array(config["workspace_hi"]),
                                        network["hidden"], network["layers"], network["frequencies"], urdf_path=urdf,
                                        base_link=config["base_link"], tip_link=config["tip_link"])
            model.corrected_urdf_path = folder / config["corrected_urdf"]
            model.board = config.get("board")
            model.folder = folder
        elif config["kind"] == "free":
            model = FreeSelfModel(config["joint_names"], config["workspace_lo"], config["workspace_hi"], network["q_lo"],
                                  network["q_hi"], network["hidden"], network["layers"], network["omega"])
        else:
            raise InputError(f"{folder / CONFIG}: unknown model kind {config['kind']!r}.")
    except KeyError as error:
        raise InputError(f"{folder / CONFIG}: key {error.args[0]!r} is missing.") from None
    weights = folder / WEIGHTS
    if not weights.is_file():
        raise InputError(f"{weights}: file not found.")
    try:
        state = torch.load(weights, weights_only=True)
        model.load_state_dict(state)
    except (RuntimeError, ValueError, OSError) as error:
        raise InputError(f"{weights}: not weights of this model ({str(error).splitlines()[0]}).") from None
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
    with np.load(folder / SURFACE, allow_pickle=False) as data:
        points, owner, configs, q = data["points_link"], data["link_index"], data["config"], data["q"]
    links = config["link_names"]
    return ({link: points[owner == i] for i, link in enumerate(links)},
            {link: configs[owner == i] for i, link in enumerate(links)}, q)
