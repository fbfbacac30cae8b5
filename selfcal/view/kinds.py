"""Which kind of result a folder holds, told by its files, and its scene.

calibration.yaml: a calibration (a recalibration when recalibration.json names the one it
replaced); config.json: a self-model; export_report.json with curobo_spheres.yml: a collision
export; fleet.json: a fleet. Anything else is the user's mistake, said in one sentence.
"""

from __future__ import annotations

from pathlib import Path

from rigs.errors import InputError
from rigs.files import read_json
from rigs.scene import Scene

KINDS = {"calibration.yaml": "calibration", "config.json": "self-model", "export_report.json": "collision export",
         "fleet.json": "fleet"}


def kind_of(folder: Path) -> str:
    """"calibration", "self-model", "collision export" or "fleet"; InputError otherwise."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder.")
    for name, kind in KINDS.items():
        if (folder / name).is_file():
            return kind
    raise InputError(f"{folder}: holds none of calibration.yaml, config.json (a self-model), export_report.json (a "
                     "collision export) or fleet.json, so it is not a result selfcal view can show.")


def previous_calibration(folder: Path) -> tuple[object | None, str | None]:
    """The calibration a recalibration in ``folder`` replaced, and a note when there is one the view
    does not follow: (calibration or None, note or None).

    recalibration.json names the previous folder as the user gave ``--previous``; it is followed
    only inside the folder above the recalibration (where `--previous cal --out cal-after` leaves
    both; a relative name is read from there), since a file may not send a reader elsewhere."""
    from calib.calibration import Calibration  # calib loads Pinocchio and scipy; only calibrations need it

    record = Path(folder) / "recalibration.json"
    if not record.is_file():
        return None, None
    document = read_json(record, "recalibration record")
    named = document.get("previous") if isinstance(document, dict) else None
    if not isinstance(named, str) or not named.strip():
        raise InputError(f"{record}: not a recalibration record (no 'previous' entry naming a folder).")
    workspace = Path(folder).resolve().parent
    previous = Path(named) if Path(named).is_absolute() else workspace / named
    if not previous.resolve().is_relative_to(workspace):
        return None, (f"Not compared with the previous calibration: {record.name} names {named}, outside "
                      f"{workspace}, and a file may not send the view elsewhere.")
    if not (previous / "calibration.yaml").is_file():
        return None, f"Not compared with the previous calibration: {named} holds no calibration.yaml any more."
    return Calibration.load(previous), None


def _checked(model) -> tuple[dict, list[str]]:
    """A self-model's links coloured by the damage check against its own description."""
    from selfmodel.inspect.check import check_against  # torch loads with it: only self-models need it
    from selfmodel.inspect.scene import check_colours  # (same reason)
    from selfmodel.inspect.verdicts import check_threshold  # (same reason)

    result = check_against(model, model.urdf_path)
    return check_colours(result, check_threshold(result.noise_mm, None).value)


def scene_of(folder: Path, check: bool = True) -> Scene:
    """The scene of whatever result ``folder`` holds; ``check``: colour a self-model's links by the
    damage check against its description once the viewer serves (``Scene.later``: seconds on a small
    model, a minute on an xArm6 on two cores)."""
    folder = Path(folder)
    kind = kind_of(folder)
    if kind == "calibration":
        from calib.calibration import Calibration  # each kind's loader is imported only for its kind
        from calib.io.scene import calibration_scene  # (same reason)

        previous, note = previous_calibration(folder)
        scene = calibration_scene(Calibration.load(folder), folder, previous)
        scene.notes += [note] if note else []
        return scene
    if kind == "self-model":
        from selfmodel.inspect.scene import selfmodel_scene  # torch loads with it: only self-models need it
        from selfmodel.model.models import SelfModel  # (same reason)

        model = SelfModel.load(folder)
        if model.kind != "structured":
            raise InputError(f"{folder}: holds a free self-model, which has no links to pose; selfcal view shows "
                             "structured models (`selfcal selfmodel train --kind structured`).")
        scene = selfmodel_scene(model, folder)
        if check and model.urdf_path is not None and Path(model.urdf_path).is_file():
            scene.later = lambda: _checked(model)
        return scene
    if kind == "collision export":
        from selfmodel.export.scene import export_scene  # (same reason)

        return export_scene(folder)
    from selfcal.view.fleet import fleet_scene  # (same reason)

    return fleet_scene(folder)
