"""Folders as bytes, so that sessions travel to Ray workers and results come back without a shared disk.

An arm's sessions are packed into one uncompressed tar held in Ray's object store; the worker
unpacks it into a scratch folder of its own and packs its result folder the same way. Only regular
files travel: a symbolic link inside a session is packed as the file it names when that file lies
inside the session, and refused otherwise, so a packed session never carries a file from elsewhere.
Unpacking uses tarfile's ``data`` filter (no absolute paths, no ``..``, no links, no devices).

The same walk gives each folder's content hash (sha256 over relative paths and file contents), which
the fleet's ``--resume`` compares.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

from rigs.errors import InputError

# Simulated truth is for evaluation only: a fit never reads it, so it does not travel with a fit's input.
TRUTH = "truth"


def _files(folder: Path, skip: tuple[str, ...]) -> list[tuple[str, Path]]:
    """(relative path, file) of every regular file under ``folder``, sorted; links confined to ``folder``."""
    folder = Path(folder)
    root = folder.resolve()
    found = []
    for directory, subfolders, names in os.walk(folder, followlinks=False):
        here = Path(directory)
        relative_dir = here.relative_to(folder)
        if relative_dir == Path("."):
            subfolders[:] = [s for s in subfolders if s not in skip]
        for name in subfolders:
            if (here / name).is_symlink():  # os.walk lists a link to a folder among the folders; never follow it
                raise InputError(f"{here / name}: is a symbolic link to a folder; a session travels as plain files.")
        subfolders.sort()
        for name in sorted(names):
            path = here / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(root) or not target.is_file():
                    raise InputError(f"{path}: is a symbolic link that leads outside {folder}; refusing to send it.")
            elif not path.is_file():
                continue  # sockets, fifos: nothing a session holds
            found.append(((relative_dir / name).as_posix(), path))
    return found


def folder_hash(folder: Path, skip: tuple[str, ...] = ()) -> str:
    """sha256 of a folder's relative paths and file contents (top-level names in ``skip`` left out)."""
    digest = hashlib.sha256()
    for relative, path in _files(folder, skip):
        digest.update(relative.encode("utf-8") + b"\0")
        digest.update(hashlib.sha256(_read(path)).digest())
    return "sha256:" + digest.hexdigest()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise InputError(f"{path}: cannot read this file ({error.strerror or type(error).__name__}).") from None


def pack(folders: dict[str, Path], skip: tuple[str, ...] = (), whole: dict[str, Path] | None = None) -> bytes:
    """One tar of several folders, each under its name (a relative POSIX path; "" for the top): those in
    ``folders`` without their top-level ``skip`` names, those in ``whole`` entire."""
    buffer = io.BytesIO()
    written: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for group, left_out in ((folders, skip), (whole or {}, ())):
            for name, folder in group.items():
                for relative, path in _files(folder, left_out):
                    member = f"{name}/{relative}" if name not in ("", ".") else relative
                    if member in written:
                        continue
                    written.add(member)
                    data = _read(path)
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    info.mode = 0o644
                    archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def unpack(blob: bytes, into: Path) -> None:
    """Unpack a :func:`pack` tar into the folder ``into`` (made if missing)."""
    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:") as archive:
            archive.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as error:
        raise InputError(f"a packed folder for {into} could not be unpacked ({error}).") from None
