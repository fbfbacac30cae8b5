"""Writes the example import files of this folder (run from the repository root):

    .venv/bin/python tests/data/import/make_examples.py

Six poses of the arm3 robot (robot/arm3.urdf) seen by a tracker 2 m away: three reflectors on
tool0 and a 6-DoF probe. Every dialect holds the same measurements, so tests can check that they
import to the same numbers. ``truth.json`` keeps the values the files were made from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from rigs.kinematics import ArmModel
from rigs.transforms import make_transform

HERE = Path(__file__).parent
TIME0 = 1_700_000_000.0  # 2023-11-14T22:13:20 UTC
TARGETS = {"smr1": [0.03, 0.0, 0.02], "smr2": [-0.02, 0.04, 0.03], "smr3": [0.0, -0.05, 0.04]}


def main() -> None:
    chain = ArmModel.from_urdf(HERE / "robot" / "arm3.urdf", "base_link", "tool0")
    rng = np.random.default_rng(3)
    q = rng.uniform(-1.2, 1.2, (6, 3))
    payload = np.array([0.0, 0.0, 2.5, 2.5, 5.0, 5.0])
    effort = np.array([chain.gravity_torques(qi, p, np.array([0.0, 0.0, 0.05])) for qi, p in zip(q, payload)])
    tracker_T_base = make_transform([2.1, -0.4, -0.3], [0.0, 0.0, np.deg2rad(30.0)])
    tip_T_probe = make_transform([0.01, 0.02, 0.06], [0.1, -0.2, 0.3])
    ids = [f"p{k:04d}" for k in range(len(q))]
    times = TIME0 + 10.0 * np.arange(len(q))

    joints = ["// joint log exported from the robot controller, degrees",
              "# columns in the controller's order, not the URDF's",
              "elbow,pose,time,shoulder_pan,payload_kg,effort_elbow,shoulder_lift,effort_shoulder_lift,effort_shoulder_pan"]
    for k in range(len(q)):
        d = np.rad2deg(q[k])
        joints.append(f"{d[2]:.7f},{ids[k]},{times[k]:.3f},{d[0]:.7f},{payload[k]:g},{effort[k, 2]:.4f},{d[1]:.7f},"
                      f"{effort[k, 1]:.4f},{effort[k, 0]:.4f}")
    (HERE / "joints_deg.csv").write_text("\n".join(joints) + "\n")

    points = []  # (pose, target, xyz mm, time)
    for k in range(len(q)):
        base_T_tip = chain.base_T_frame(q[k])
        for j, (name, offset) in enumerate(TARGETS.items()):
            xyz = (tracker_T_base @ base_T_tip @ np.append(offset, 1.0))[:3] * 1000.0
            points.append((ids[k], name, np.round(xyz, 4), times[k] + 0.1 * j))

    sa = ["// SpatialAnalyzer ASCII export", "// Units: Millimeters",
          "// Collection::Group::Target  X  Y  Z  Measured"]
    sa += [f"A::{p}::{t}\t{x[0]:.4f}\t{x[1]:.4f}\t{x[2]:.4f}\t2023-11-14T22:13:20" for p, t, x, _ in points]
    (HERE / "sa_export.txt").write_text("\n".join(sa) + "\n")

    columns = ["// SpatialAnalyzer export, one column per name part", "Collection,Group,Target,X [mm],Y [mm],Z [mm],Time,Temperature"]
    columns += [f"A,{p},{t},{x[0]:.4f},{x[1]:.4f},{x[2]:.4f},{s:.3f},21.4" for p, t, x, s in points]
    (HERE / "sa_columns.csv").write_text("\n".join(columns) + "\n")

    plain = [f"{p}_{t}  {x[0]:.4f}  {x[1]:.4f}  {x[2]:.4f}" for p, t, x, _ in points]
    (HERE / "points_plain.txt").write_text("\n".join(plain) + "\n")

    sigma = ["pose,target,x,y,z,ux,uy,uz"]
    sigma += [f"{p},{t},{x[0]:.4f},{x[1]:.4f},{x[2]:.4f},0.010,0.020,0.020" for p, t, x, _ in points]
    (HERE / "points_uxyz.csv").write_text("\n".join(sigma) + "\n")

    single = ["# one standard deviation per axis, mm", "name;x;y;z;sigma"]
    single += [f"{p}_{t};{x[0]:.4f};{x[1]:.4f};{x[2]:.4f};0.015" for p, t, x, _ in points]
    (HERE / "points_sigma.csv").write_text("\n".join(single) + "\n")

    probe = np.array([tracker_T_base @ chain.base_T_frame(qk) @ tip_T_probe for qk in q])
    quat = Rotation.from_matrix(probe[:, :3, :3]).as_quat()
    rotvec = np.rad2deg(Rotation.from_matrix(probe[:, :3, :3]).as_rotvec())
    rpy = np.rad2deg(Rotation.from_matrix(probe[:, :3, :3]).as_euler("xyz"))
    mm = probe[:, :3, 3] * 1000.0
    rows = ["pose,x,y,z,qx,qy,qz,qw,sigma_pos,sigma_rot"]
    rows += [f"{ids[k]},{mm[k, 0]:.6f},{mm[k, 1]:.6f},{mm[k, 2]:.6f},{quat[k, 0]:.12f},{quat[k, 1]:.12f},"
             f"{quat[k, 2]:.12f},{quat[k, 3]:.12f},0.05,0.01" for k in range(len(q))]
    (HERE / "poses_quat.csv").write_text("\n".join(rows) + "\n")
    rows = ["time,x,y,z,rx,ry,rz"]
    rows += [f"{times[k] + 0.2:.3f},{mm[k, 0]:.6f},{mm[k, 1]:.6f},{mm[k, 2]:.6f},{rotvec[k, 0]:.10f},"
             f"{rotvec[k, 1]:.10f},{rotvec[k, 2]:.10f}" for k in range(len(q))]
    (HERE / "poses_rotvec.csv").write_text("\n".join(rows) + "\n")
    rows = ["pose,x,y,z,rx,ry,rz"]
    rows += [f"{ids[k]},{mm[k, 0]:.6f},{mm[k, 1]:.6f},{mm[k, 2]:.6f},{rpy[k, 0]:.10f},{rpy[k, 1]:.10f},"
             f"{rpy[k, 2]:.10f}" for k in range(len(q))]
    (HERE / "poses_rpy.csv").write_text("\n".join(rows) + "\n")
    header = "pose," + ",".join(f"m{r}{c}" for r in range(4) for c in range(4))
    rows = [header]
    for k in range(len(q)):
        matrix = probe[k].copy()
        matrix[:3, 3] *= 1000.0
        rows.append(ids[k] + "," + ",".join(f"{v:.12f}" for v in matrix.ravel()))
    (HERE / "poses_matrix.csv").write_text("\n".join(rows) + "\n")

    truth = {"q_rad": q.tolist(), "payload_kg": payload.tolist(), "effort_nm": effort.tolist(),
             "tracker_T_base": tracker_T_base.tolist(), "tip_T_probe": tip_T_probe.tolist(),
             "targets": TARGETS, "tracker_T_probe": probe.tolist(), "times": times.tolist()}
    (HERE / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
