"""Options several commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def robot_from_options(rig: Optional[str], urdf: Optional[Path], base_link: Optional[str], tip_link: Optional[str]):
    """The Rig named by ``--rig``, or a bare one from ``--urdf --base-link --tip-link``."""
    from rigs import InputError, load_rig
    from rigs.spec import rig_from_urdf

    if (rig is None) == (urdf is None):
        raise InputError("give either --rig NAME or --urdf FILE (with --base-link and --tip-link).")
    if rig is not None:
        return load_rig(rig)
    if not base_link or not tip_link:
        raise InputError("--urdf needs --base-link and --tip-link.")
    return rig_from_urdf(urdf, base_link, tip_link)
