"""The geometry a robot's description puts on each link: its URDF visual meshes, the calibration
board a session declares on the tip, and the solids they enclose (the prior on which link owns
matter the depth cannot assign)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh

from rigs.link_meshes import link_meshes
from rigs.simulator import board_plate
from rigs.solids import solid_of
from selfmodel.model.chain import ArmLinks

DESCRIBED_PITCH = 0.003  # m: grid of the description's solids (the ownership prior)


def board_mount(board: dict) -> tuple[np.ndarray, bool]:
    """Where a model's board sits on the tip: ``tip_T_board`` (4, 4) and whether a board calibration
    measured it (``tip_T_board_fitted``, written by training on that calibration's URDF) rather than
    the session stating it (``tip_T_board_nominal``)."""
    fitted = board.get("tip_T_board_fitted")
    mount = fitted if fitted is not None else board["tip_T_board_nominal"]
    return np.asarray(mount, dtype=float), fitted is not None



def board_mesh(board: dict | None):
    """The calibration board a session declares (``sensors.board``) as a plate in the tip frame, at
    its mount (:func:`board_mount`), or None."""
    if not board:
        return None

    return board_plate(tuple(board["squares"]), float(board["square_m"])).apply_transform(board_mount(board)[0])



def described_meshes(spec: ArmLinks, urdf_path: Path, tip: str, board: dict | None) -> dict:
    """Link -> its description's surface (URDF visual meshes, and a board the session declares on the
    tip), trimesh in the link frame."""
    meshes = link_meshes(Path(urdf_path), spec.link_names)
    plate = board_mesh(board)
    if plate is not None:
        meshes[tip] = trimesh.util.concatenate([meshes[tip], plate]) if tip in meshes else plate
    return meshes



def described_solids(meshes: dict) -> dict:
    """Link -> the solid its description's surface (``described_meshes``) encloses, link frame: the
    prior on which link owns matter the data cannot assign."""
    return {link: solid_of(mesh, DESCRIBED_PITCH) for link, mesh in meshes.items()}
