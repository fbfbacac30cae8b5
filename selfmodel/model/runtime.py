"""Where a self-model's computations run: the cores this process may use, torch's threads, and the
device (CPU or a GPU when torch sees one)."""

from __future__ import annotations

import os

import torch

from rigs.errors import InputError, setting


def usable_cores() -> int:
    """Cores this process may use (os.cpu_count can count cores it may not use)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)



def default_threads() -> int:
    """Torch's intra-op threads when the user does not say: half the usable cores, at least one.

    The trainer's steps are many small kernels; each one waits for its slowest thread, so a thread
    that shares its core with another process stalls every step. Measured on a 2-core machine with
    one competing process, 2 threads ran several times slower than 1 (BENCHMARKS.md, thread table),
    while 1 thread on a quiet machine lost well under half; leaving a core free keeps a --minutes
    budget near its steps when the machine is shared.
    """
    return max(1, usable_cores() // 2)



def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads (``threads`` or the default) and one inter-op thread; returns the count."""
    count = threads or default_threads()
    torch.set_num_threads(count)
    try:
        torch.set_num_interop_threads(1)  # nothing here runs operators in parallel with each other
    except RuntimeError:
        pass  # torch allows setting it once per process, before any parallel work: already set
    return count



DEVICES = ("auto", "cpu", "cuda")



def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when torch sees a GPU, else cpu; ``cuda`` without one is refused with a sentence."""
    if name not in DEVICES:
        raise InputError(f"{setting('device')} must be one of {', '.join(DEVICES)}, got {name!r}.")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError(f"{setting('device')} cuda: torch sees no GPU on this machine (the CPU wheel, or no driver); "
                         f"use {setting('device')} cpu or auto.")
    return torch.device(name)
