"""Writing results so that nothing is ever half-written, and nothing is ever deleted unasked.

Files go to a temporary name in the same folder and are renamed into place; output folders are
built under a temporary sibling name (``.<name>.selfcal-XXXXXXXX.tmp``) and renamed when complete,
with a rename that never replaces what is there. A failure removes the temporary folder, so a user
never finds a half-written output folder; a folder that appears at ``--out`` while a command runs
(a second run of the same command, a colleague's copy) is never removed, and the results are not
left anywhere else either: the command stops with a sentence and leaves nothing behind.

A temporary folder is locked (``flock``) by the process that builds it. The lock dies with its
process, even one killed outright, so the next run can tell a leftover of a killed run (unlocked:
it is cleaned) from a run still writing (locked: the next run stops with a sentence).

Readers of user files use :func:`read_text`, :func:`read_json`, :func:`read_yaml`, :func:`load_npz` and
:func:`load_torch`, which turn
undecodable, pickle-bearing or corrupt files into one :class:`InputError` sentence naming the file.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import errno
import fcntl
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from rigs.errors import InputError, first_line, setting

TEMPORARY_TAG = ".selfcal-"
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _why(error: OSError) -> str:
    return error.strerror or type(error).__name__


def _temporary_pattern(name: str) -> re.Pattern:
    # mkstemp/mkdtemp draw 8 characters from [a-z0-9_]
    return re.compile(rf"^\.{re.escape(name)}{re.escape(TEMPORARY_TAG)}[a-z0-9_]{{8}}\.tmp$")


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _lock_path(path: Path) -> int | None:
    """An open, exclusively locked descriptor of ``path``; None when another process holds the lock."""
    fd = os.open(path, os.O_RDONLY)
    if _try_lock(fd):
        return fd
    os.close(fd)
    return None


def temporaries(target: Path) -> list[Path]:
    """Temporary siblings of ``target`` (folders or files) that some selfcal run made."""
    target = Path(target)
    pattern = _temporary_pattern(target.name)
    try:
        return sorted(p for p in target.parent.iterdir() if pattern.match(p.name))
    except OSError:
        return []


def clean_leftovers(target: Path) -> None:
    """Remove temporary siblings of ``target`` left by killed runs; InputError when a live run holds one."""
    for leftover in temporaries(target):
        try:
            fd = _lock_path(leftover)
        except FileNotFoundError:
            continue  # its run just finished
        if fd is None:
            raise InputError(f"{target}: another selfcal command is writing it now (into {leftover}); wait for it "
                             f"to finish or choose another {setting('out')}.")
        try:
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        finally:
            os.close(fd)


def rename_no_replace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``; FileExistsError when ``target`` exists (even an empty folder).

    ``os.rename`` silently replaces an empty folder; Linux's renameat2(RENAME_NOREPLACE) does not.
    Where that call is missing, a check just before the rename does the same, less strictly.
    """
    source, target = os.fsencode(source), os.fsencode(target)
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, source, _AT_FDCWD, target, _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code), os.fsdecode(target))
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(target))
    os.rename(source, target)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (temporary sibling, then rename); InputError when it cannot."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise InputError(f"{path}: is a folder; expected a file name to write.")
        clean_leftovers(path)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{TEMPORARY_TAG}", suffix=".tmp")
    except OSError as error:
        raise InputError(f"{path}: cannot write here ({_why(error)}).") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            os.chmod(temporary, 0o666 & ~current_umask())  # mkstemp makes 0600; give the file ordinary permissions
            os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise InputError(f"{path}: cannot write here ({_why(error)}).") from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def check_new_file(out: Path, force: bool = False) -> None:
    """Refuse a single output file that exists (unless ``force``) or that cannot be written."""
    out = Path(out)
    if out.is_dir():
        raise InputError(f"{out}: is a folder; {setting('out')} names the file to write.")
    if out.exists() and not force:
        raise InputError(f"{out}: already exists; choose another {setting('out')} or pass {setting('force')}.")
    _check_writable(out)


def _existing_ancestor(folder: Path) -> Path:
    folder = Path(os.path.abspath(folder))
    while not folder.exists() and folder != folder.parent:
        if os.path.lexists(folder):  # a dangling link
            break
        folder = folder.parent
    return folder


def _check_writable(out: Path) -> None:
    """The folder that will hold ``out`` exists or can be made, and a file can be created there."""
    ancestor = _existing_ancestor(out.parent)
    if not ancestor.is_dir():
        raise InputError(f"{out}: cannot be created, {ancestor} is not a folder.")
    try:
        # Not named like a temporary folder: another run's clean-up must never take it for a leftover.
        probe = tempfile.mkdtemp(dir=ancestor, prefix=f".{out.name}.writable-", suffix=".probe")
        os.rmdir(probe)
    except OSError as error:
        raise InputError(f"{out}: cannot write in {ancestor} ({_why(error)}).") from None


def check_new_output(out: Path, force: bool = False) -> None:
    """Refuse an output folder that exists (unless ``force``), that another run is writing, or that
    cannot be created. Cheap: call it before minutes of work, not after."""
    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder.")
    if out.exists() and not force:
        raise InputError(f"{out}: output folder already exists; choose another {setting('out')} or pass "
                         f"{setting('force')}.")
    _check_writable(out)
    clean_leftovers(out)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and missing ancestors; returns those created, deepest first."""
    created = []
    folder = Path(os.path.abspath(folder))
    while not folder.exists():
        created.append(folder)
        folder = folder.parent
    try:
        for path in reversed(created):
            path.mkdir()
    except OSError as error:
        remove_empty_folders(created)
        raise InputError(f"{path}: cannot create this folder ({_why(error)}).") from None
    return created


def remove_empty_folders(folders: list[Path]) -> None:
    for folder in folders:  # deepest first
        with contextlib.suppress(OSError):
            folder.rmdir()


def _put_in_place(temporary: Path, out: Path, replace: tuple[int, int] | None) -> None:
    """Rename the finished ``temporary`` to ``out``. What is at ``out`` is replaced only when it is the
    very folder that was there at the start and the user passed --force (``replace`` is its identity)."""
    try:
        rename_no_replace(temporary, out)
        return
    except FileExistsError:
        pass
    if replace is not None and _identity(out) == replace:
        aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}{TEMPORARY_TAG}", suffix=".tmp"))
        os.rmdir(aside)
        rename_no_replace(out, aside)
        try:
            rename_no_replace(temporary, out)
        except OSError:
            rename_no_replace(aside, out)
            raise
        shutil.rmtree(aside, ignore_errors=True)
        return
    # Not delivered under another name: results may name their own folder (a planner's config holds
    # its absolute path), so a copy beside ``out`` could point into someone else's folder.
    raise InputError(f"{out}: appeared while this command ran (another run, or a colleague's folder?), so it was "
                     f"left as it is and these results were not written; run again with another {setting('out')}.")


@contextlib.contextmanager
def output_folder(out: Path, force: bool = False) -> Iterator[Path]:
    """Build an output folder under a temporary sibling name; rename into place on success.

    Yields the temporary folder to write into. On any exception the temporary folder (and any parent
    folder made for it) is removed and ``out`` is left as it was. With ``force``, the folder that was
    at ``out`` when the command started is replaced; anything that appeared there meanwhile is not.
    """
    out = Path(out)
    check_new_output(out, force)
    replace = _identity(out) if force else None
    created = make_parents(out.parent)
    try:
        temporary = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}{TEMPORARY_TAG}", suffix=".tmp"))
    except OSError as error:
        remove_empty_folders(created)
        raise InputError(f"{out}: cannot create the output folder ({_why(error)}).") from None
    lock = _lock_path(temporary)
    try:
        yield temporary
        os.chmod(temporary, 0o777 & ~current_umask())  # mkdtemp makes 0700
        _put_in_place(temporary, out, replace)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        if not out.exists():
            remove_empty_folders(created)
        raise
    finally:
        if lock is not None:
            os.close(lock)


@contextlib.contextmanager
def locked_folder(folder: Path, busy: str) -> Iterator[None]:
    """Hold ``folder``'s lock while the block runs; InputError ``busy`` when another process holds it."""
    fd = _lock_path(Path(folder))
    if fd is None:
        raise InputError(busy)
    try:
        yield
    finally:
        os.close(fd)


def is_locked(folder: Path) -> bool:
    """Whether a running process holds ``folder``'s lock (see :func:`locked_folder`)."""
    try:
        fd = _lock_path(Path(folder))
    except OSError:
        return False
    if fd is None:
        return True
    os.close(fd)
    return False


# -- reading user files ---------------------------------------------------------------------------

def inside_folder(folder: Path, relative, where: str, what: str = "path") -> Path:
    """``folder / relative``, refused (InputError naming ``where``) unless it stays inside ``folder``
    with every symbolic link followed. A file may name only files of its own folder."""
    if not isinstance(relative, str) or not relative.strip():
        raise InputError(f"{where} should be a {what} relative to {folder}, got {relative!r}.")
    candidate = Path(folder) / relative
    if Path(relative).is_absolute() or not candidate.resolve().is_relative_to(Path(folder).resolve()):
        raise InputError(f"{where}: {what} {relative!r} leads outside {folder}; refusing to read it.")
    return candidate


def read_text(path: Path, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (a BOM is dropped); InputError when missing, unreadable or not UTF-8."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: {what} not found.") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, expected a {what}.") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read this {what} ({_why(error)}).") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise InputError(f"{path}: line {line} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                         f"{error.start}); save the {what} as UTF-8.") from None


def read_csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a CSV file (``#`` comment rows and blank rows skipped); InputError when the
    file is missing, not UTF-8 or not CSV."""
    path = Path(path)
    text = read_text(path, "CSV file")
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row and not row[0].startswith("#")]
    except csv.Error as error:
        raise InputError(f"{path}: not a readable CSV file ({error}).") from None
    if not rows:
        raise InputError(f"{path}: empty file (expected a header row).")
    return [h.strip() for h in rows[0]], rows[1:]


def read_json(path: Path, what: str = "file") -> object:
    """Parsed JSON of ``path``; InputError naming the file and line when it is not valid JSON."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: not valid JSON (line {error.lineno}: {error.msg}).") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a selfcal {what}.") from None


def read_yaml(path: Path, what: str = "file") -> object:
    """Parsed YAML of ``path`` (``yaml.safe_load``: no Python objects); InputError naming the file when
    it is missing, not UTF-8 or not YAML. Check the blocks' types with :mod:`rigs.documents`."""
    import yaml

    text = read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not valid YAML ({first_line(error)}).") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a selfcal {what}.") from None


def load_npz(path: Path, keys: list[str]) -> dict:
    """Arrays ``keys`` of an .npz file, never unpickling (``allow_pickle=False``); InputError otherwise."""
    import zipfile

    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found.")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [key for key in keys if key not in data.files]
            if missing:
                raise InputError(f"{path}: array {missing[0]!r} is missing.")
            return {key: data[key] for key in keys}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise InputError(f"{path}: holds Python objects (pickled arrays), which selfcal refuses to load "
                             f"(np.load with allow_pickle=False); expected plain numeric arrays.") from None
        raise InputError(f"{path}: not a readable .npz file ({error}).") from None
    except (OSError, zipfile.BadZipFile, EOFError, KeyError) as error:
        raise InputError(f"{path}: not a readable .npz file ({type(error).__name__}).") from None


def load_torch(path: Path, what: str = "weights file"):
    """``torch.load(path, weights_only=True)`` on the CPU, with every failure as one InputError sentence.

    ``weights_only`` refuses to run any pickled code, so a file that carries some is refused, not run.
    """
    import pickle
    import warnings

    import torch

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: {what} not found.")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about odd pickle protocols: the sentence below says it
            return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as error:
        lines = [line.strip() for line in str(error).splitlines()]
        code = next((line for line in lines if "GLOBAL" in line), None)
        if code is not None:  # a pickle that would import and call something: refused, never run
            raise InputError(f"{path}: carries pickled code ({code.rstrip('.')}), which selfcal refuses to run "
                             f"(torch.load with weights_only=True); expected plain tensors.") from None
        raise InputError(f"{path}: not a readable {what}: not a file of plain tensors (torch.load with "
                         f"weights_only=True refused it).") from None
    except Exception as error:  # torch raises many kinds (RuntimeError, struct.error, EOFError...) for a damaged file
        message = first_line(error)
        raise InputError(f"{path}: not a readable {what} ({message[:160]}).") from None
