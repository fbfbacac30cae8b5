"""Keep pybullet's C-level chatter (build time, inertia warnings) off the user's terminal."""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def c_output_silenced():
    """Point file descriptors 1 and 2 at /dev/null for the duration (C code writes there directly)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no real descriptors (some embedders): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def import_pybullet():
    """``import pybullet`` without its build-time banner."""
    with c_output_silenced():
        import pybullet

    return pybullet
