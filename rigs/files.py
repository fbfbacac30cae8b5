"""Writing results so that nothing is ever half-written.

Files go to a temporary name in the same folder and are renamed into place; output folders are
built under a temporary sibling name and renamed when complete. A failure removes the temporary
folder, so a user never finds a half-written output folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from rigs.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; give the file ordinary permissions
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def check_new_output(out: Path, force: bool = False) -> None:
    """Refuse an output folder that already exists, unless ``force``."""
    out = Path(out)
    if out.exists() and not force:
        raise InputError(f"{out}: output folder already exists; choose another --out or pass --force.")
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder.")


@contextlib.contextmanager
def output_folder(out: Path, force: bool = False) -> Iterator[Path]:
    """Build an output folder under a temporary sibling name; rename into place on success.

    Yields the temporary folder to write into. On any exception the temporary folder is removed
    and ``out`` is left as it was.
    """
    out = Path(out)
    check_new_output(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield temporary
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    os.chmod(temporary, 0o777 & ~_umask())  # mkdtemp makes 0700
    if out.exists():
        shutil.rmtree(out)
    os.replace(temporary, out)
