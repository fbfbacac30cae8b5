"""DIR/fleet.json: the record of a fleet run, rewritten after every arm, and what ``--resume`` trusts.

Every arm's entry holds its status, its sentence, the commands' JSON, the hash of its inputs (the
files that travelled to the worker, the options, the command, selfcal's version) and the hash of the
result folder that was written. ``--resume`` skips an arm only when it finished ``ok``, its inputs
hash the same now, and ``DIR/<arm>/`` still hashes to what was written; every other arm runs again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rigs.documents import check_format
from rigs.errors import InputError
from rigs.files import read_json
from rigs.version import VERSION
from selfcal.fleet.archive import TRUTH, folder_hash
from selfcal.fleet.table import ArmRow

FORMAT = "selfcal-fleet"
FORMAT_VERSION = 1
RECORD = "fleet.json"


def shipped_folders(row: ArmRow, folder: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """(fit inputs, held-out inputs) as {name as in the table: folder}. Fit inputs travel without
    truth/ (a fit never reads it); a held-out session travels whole (evaluation reads its truth)."""
    fit = {relative: folder / relative for relative in row.sessions}
    held = {row.validate: folder / row.validate} if row.validate else {}
    return fit, held


def inputs_hash(kind: str, row: ArmRow, folder: Path) -> str:
    """sha256 of everything an arm's result depends on."""
    fit, held = shipped_folders(row, folder)
    document = {"kind": kind, "selfcal_version": VERSION, "options": row.options,
                "sessions": [[name, folder_hash(path, (TRUTH,))] for name, path in fit.items()],
                "validate": [[name, folder_hash(path)] for name, path in held.items()]}
    return "sha256:" + hashlib.sha256(json.dumps(document, sort_keys=True).encode("utf-8")).hexdigest()


def read_previous(out: Path, kind: str) -> dict:
    """The arms of an earlier run into ``out``, for --resume; InputError when there is none to resume."""
    path = Path(out) / RECORD
    if not Path(out).is_dir():
        raise InputError(f"{out}: nothing to resume (no such folder); run without --resume.")
    if not path.is_file():
        raise InputError(f"{path}: not found, so {out} is not a fleet folder to resume; choose another --out or "
                         f"run without --resume into a new one.")
    document = read_json(path, "fleet record")
    check_format(document, path, FORMAT, FORMAT_VERSION, "selfcal fleet record")
    if document.get("job") != kind:
        raise InputError(f"{path}: records a `fleet {document.get('job')}` run; resume it with that command.")
    arms = document.get("arms")
    if not isinstance(arms, dict):
        raise InputError(f"{path}: has no 'arms' table.")
    return arms


def verified(out: Path, arm: str, previous: dict | None, expected_inputs: str) -> bool:
    """Whether an earlier run's result for ``arm`` is complete and made from these very inputs."""
    if not isinstance(previous, dict) or previous.get("status") != "ok":
        return False
    if previous.get("inputs_hash") != expected_inputs or not previous.get("result_hash"):
        return False
    folder = Path(out) / arm
    if not folder.is_dir() or folder.is_symlink():
        return False
    try:
        return folder_hash(folder) == previous["result_hash"]
    except InputError:
        return False
