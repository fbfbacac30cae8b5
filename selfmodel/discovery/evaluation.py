"""How close a discovered chain is to a simulated session's truth: for evaluation only (benchmarks,
tests), never for a fit. Reads ``truth/robot.urdf``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rigs.kinematics import ArmModel
from rigs.urdf import chain as urdf_chain, movable, parse_urdf
from selfmodel.discovery.chain_discovery import DiscoveredArm
from selfmodel.discovery.screws import line_distance


def true_axes(truth_urdf: Path, base_link: str, tip_link: str, q: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(direction (3,), joint origin (3,) m) of each movable joint in the base frame at ``q``."""
    chain = ArmModel.from_urdf(truth_urdf, base_link, tip_link)
    return [(pose[:3, :3] @ axis, pose[:3, 3].copy()) for pose, axis in zip(chain.base_T_joints(q), chain.axes)]


def axis_errors(chain: DiscoveredArm, truth_urdf: Path, base_link: str, tip_link: str) -> list[dict]:
    """Per joint: type right or not, direction error (deg), and for a revolute joint the distance (mm)
    of the true joint origin from the discovered axis line, all at the home pose."""
    truth = true_axes(truth_urdf, base_link, tip_link, np.array(chain.home))
    types = ArmModel.from_urdf(truth_urdf, base_link, tip_link)

    true_types = [j.type for j in movable(urdf_chain(parse_urdf(truth_urdf), base_link, tip_link, truth_urdf))]
    del types
    rows = []
    for joint, (direction, origin), true_type in zip(chain.joints, truth, true_types):
        found = np.array(joint.direction)
        cosine = abs(float(found @ direction) / np.linalg.norm(found) / np.linalg.norm(direction))
        row = {"joint": joint.name, "type": joint.type, "true_type": "prismatic" if true_type == "prismatic" else "revolute",
               "direction_error_deg": float(np.degrees(np.arccos(min(cosine, 1.0)))),
               "direction_sd_deg": joint.direction_sd_deg}
        if joint.type == "revolute" and true_type != "prismatic":
            row["position_error_mm"] = 1000 * line_distance(origin, np.array(joint.point), found)
            row["position_sd_mm"] = joint.position_sd_mm
        rows.append(row)
    return rows


def tip_rms(discovered_urdf: Path, chain: DiscoveredArm, truth_urdf: Path, base_link: str, tip_link: str,
            q: np.ndarray) -> dict:
    """Forward kinematics of the discovered URDF (loaded by Pinocchio) against the truth at poses
    ``q`` (N, dof). The discovered tip frame is not the true one (nothing told where the true tip
    frame is), so the true tip origin at home is carried rigidly on the discovered last link: what is
    compared is where the chain takes that point, and how it turns (deg)."""
    found = ArmModel.from_urdf(discovered_urdf, chain.base_link, chain.tip_link)
    truth = ArmModel.from_urdf(truth_urdf, base_link, tip_link)
    home = np.array(chain.home)
    found_home, true_home = found.base_T_frame(home), truth.base_T_frame(home)
    tip_in_found = np.linalg.inv(found_home) @ true_home  # evaluation's alignment at home only
    errors, turns = [], []
    for pose in q:
        predicted = found.base_T_frame(pose) @ tip_in_found
        actual = truth.base_T_frame(pose)
        errors.append(np.linalg.norm(predicted[:3, 3] - actual[:3, 3]))
        relative = predicted[:3, :3].T @ actual[:3, :3]
        turns.append(np.degrees(np.arccos(np.clip((np.trace(relative) - 1) / 2, -1, 1))))
    errors = np.array(errors)
    return {"poses": len(q), "tip_rms_mm": float(1000 * np.sqrt(np.mean(errors ** 2))),
            "tip_max_mm": float(1000 * errors.max()), "rotation_rms_deg": float(np.sqrt(np.mean(np.square(turns))))}
