"""Options several commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional


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


# Options with a fixed set of values: the parser lists them in help and refuses any other with one
# line and exit 2. They are spelled here, not imported from the rooms, so that `selfcal --help`
# loads nothing heavy; tests/test_command_line.py checks each against the room that owns it.
Deflection = Literal["auto", "none", "compliance", "learned", "both"]
CalibrationModel = Literal["full", "offsets"]
# calibrate also fits a model that holds the arm (hand-eye) and chooses among the three by cross-validation.
CalibrateModel = Literal["auto", "hand-eye", "full", "offsets"]
HandEyeSetup = Literal["eye-to-hand", "eye-in-hand"]
SelfModelKind = Literal["structured", "free"]
Placements = Literal["auto", "fit", "hold"]
AngleUnit = Literal["deg", "rad"]
LengthUnit = Literal["mm", "m", "cm", "in"]
Rotation = Literal["rotvec", "rpy"]
Match = Literal["auto", "name", "time"]
FrameConvention = Literal["auto", "optical", "body"]
CameraPoses = Literal["auto", "tf", "none"]
Torques = Literal["auto", "measured", "model"]


def require_pass_option():
    import typer

    return typer.Option(False, "--require-pass", help="Exit 1 when the verdict is FAIL and 3 when it is CANNOT TELL "
                        "(for CI and plant scripts); the outputs are written either way.")


def ros_package_option():
    import typer

    return typer.Option(None, "--ros-package", help="Write mesh paths in robot.urdf as package://NAME/... for the "
                        "ROS package NAME (optionally NAME/FOLDER: where this folder sits inside the package).")


def check_positive(**values: float | None) -> None:
    """Refuse a tolerance that is given but not positive, before any work (flag name from the keyword)."""
    from rigs.errors import InputError

    for name, value in values.items():
        if value is not None and not value > 0:
            raise InputError(f"--{name.replace('_', '-')} must be positive, got {value}.")


NO_DEPTH_HELP = ("What a depth pixel of 0 means, for every camera (MODE) or one (CAMERA=MODE; repeatable): auto "
                 "(default) no-return regions reaching the image border or larger than 1 % of it are free space up to "
                 "the camera's far range, small holes unknown; free: every 0 is free space up to the far range; "
                 "unknown: a 0 vouches for nothing (space no camera saw free becomes matter).")


def parse_no_depth(values: list[str]) -> str | dict | None:
    """``--no-depth`` values -> None (not given), one mode for all cameras, or {camera: mode}
    (a bare MODE among CAMERA=MODE items is every camera not named)."""
    from rigs.errors import InputError
    from rigs.no_return import check_mode

    if not values:
        return None
    every, named = None, {}
    for value in values:
        camera, _, mode = value.rpartition("=")
        check_mode(mode.strip(), f"--no-depth {value}")
        if camera:
            named[camera.strip()] = mode.strip()
        elif every is not None and every != mode.strip():
            raise InputError(f"--no-depth: two modes for every camera ({every} and {mode.strip()}); name the camera "
                             f"with CAMERA=MODE.")
        else:
            every = mode.strip()
    if not named:
        return every
    if every is not None:
        named["*"] = every
    return named
