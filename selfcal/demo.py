"""The whole story on the built-in simulated rigs, in one folder with an index page.

1. The iiwa: capture, calibrate, validate on fresh poses.
2. An ISO 9283 audit, with commanded poses from the nominal and the calibrated model side by side.
3. The iiwa crashes: plan 30 D-optimal poses, record them, recalibrate, name the damage.
4. The xArm6, which took a knock too and has cameras, not a tracker: learn its shape from depth,
   measure the model, export collision geometry for planners, check the body against the URDF.

Every step runs the public command line (`selfcal ...`) in a child process, exactly as a user
would, and keeps its JSON; the index page links every report and shows the figures.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from rigs import html_report
from rigs.errors import InputError


@dataclass
class DemoSizes:
    calibration_poses: int
    check_poses: int
    audit_cycles: int
    crash_candidates: int
    camera_poses: int
    camera_heldout: int
    train_minutes: float | None  # the full demo trains by the clock
    train_steps: int | None  # the quick one by a fixed step count, so a busy machine cannot starve it
    srdf_samples: int


FULL = DemoSizes(100, 100, 30, 1500, 300, 30, 8.0, None, 10000)
QUICK = DemoSizes(40, 30, 5, 300, 24, 4, None, 600, 2000)


@dataclass
class Step:
    title: str
    args: list[str]
    json_output: bool = True
    result: dict | list | None = None
    seconds: float = 0.0


@dataclass
class Demo:
    folder: Path
    sizes: DemoSizes
    say: Callable[[str], None] = print
    steps: list[Step] = field(default_factory=list)

    def run(self, title: str, *args: str, json_output: bool = True):
        """Run ``selfcal ARGS`` in a child process; its JSON result, or a RuntimeError naming the step."""
        step = Step(title, list(args), json_output)
        command = [sys.executable, "-m", "selfcal.cli", *args, *(["--json"] if json_output else [])]
        self.say(f"[{len(self.steps) + 1:2d}] {title}")
        start = time.perf_counter()
        process = subprocess.run(command, cwd=self.folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        step.seconds = time.perf_counter() - start
        if process.returncode != 0:
            last = (process.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise RuntimeError(f"demo step '{title}' (selfcal {' '.join(args)}) failed with exit {process.returncode}: {last}")
        if json_output:
            step.result = json.loads(process.stdout)
        self.steps.append(step)
        return step.result


def run_demo(folder: Path, quick: bool = False, say: Callable[[str], None] = print) -> dict:
    """Run every step into ``folder`` (which must exist and be empty); returns the figures."""
    sizes = QUICK if quick else FULL
    demo = Demo(Path(folder), sizes, say)
    s = sizes
    figures: dict = {"quick": quick}

    # 1. Calibrate the iiwa from tracker data.
    demo.run("capture the iiwa with a laser tracker", "capture", "--rig", "iiwa-tracker", "--poses",
             str(s.calibration_poses), "--seed", "1", "--out", "sessions/iiwa")
    demo.run("capture fresh poses to check the calibration", "capture", "--rig", "iiwa-tracker", "--poses",
             str(s.check_poses), "--seed", "2", "--out", "sessions/iiwa-check")
    figures["calibrate"] = demo.run("calibrate the iiwa", "calibrate", "sessions/iiwa", "--out", "calibration")
    figures["validate"] = demo.run("validate on the fresh poses", "validate", "calibration", "sessions/iiwa-check")

    # 2. ISO 9283 audit before and after calibration.
    demo.run("plan an ISO 9283 audit", "audit", "plan", "--rig", "iiwa-tracker", "--cycles", str(s.audit_cycles),
             "--out", "audit-plan.csv")
    demo.run("record the audit", "capture", "--rig", "iiwa-tracker", "--plan", "audit-plan.csv", "--seed", "3",
             "--out", "sessions/iiwa-audit")
    figures["audit"] = demo.run("report the audit: nominal and calibrated", "audit", "report", "sessions/iiwa-audit",
                                "--calibration", "calibration", "--out", "audit")

    # 3. The crash.
    figures["plan"] = demo.run("plan 30 D-optimal poses for a recalibration", "plan", "--rig", "iiwa-tracker", "--poses",
                               "30", "--optimal", "--candidates", str(s.crash_candidates), "--calibration",
                               "calibration", "--out", "crash-plan.csv")
    demo.run("record the crashed iiwa", "capture", "--rig", "iiwa-tracker-crashed", "--plan", "crash-plan.csv",
             "--seed", "4", "--out", "sessions/iiwa-crashed")
    figures["recalibrate"] = demo.run("recalibrate and name the damage", "recalibrate", "sessions/iiwa-crashed",
                                      "--previous", "calibration", "--out", "recalibration")

    # 4. The xArm6's body from its cameras.
    demo.run("capture the xArm6 with four depth cameras", "capture", "--rig", "xarm6-cameras-crashed", "--poses",
             str(s.camera_poses), "--seed", "5", "--out", "sessions/xarm")
    demo.run("capture held-out xArm6 poses", "capture", "--rig", "xarm6-cameras-crashed", "--poses",
             str(s.camera_heldout), "--seed", "6", "--out", "sessions/xarm-heldout")
    budget = ["--steps", str(s.train_steps)] if s.train_steps else ["--minutes", str(s.train_minutes)]
    figures["train"] = demo.run("learn the xArm6's shape from depth", "selfmodel", "train", "sessions/xarm", "--out",
                                "selfmodel", *budget, "--seed", "0")
    figures["eval"] = demo.run("measure the self-model on held-out poses", "selfmodel", "eval", "selfmodel",
                               "sessions/xarm-heldout")
    figures["export"] = demo.run("export collision geometry for planners", "selfmodel", "export", "selfmodel", "--out",
                                 "collision", "--heldout", "sessions/xarm-heldout", "--srdf-samples",
                                 str(s.srdf_samples))
    figures["check"] = demo.run("check the learned body against the URDF", "selfmodel", "check", "selfmodel", "--urdf",
                                "sessions/xarm/robot.urdf")

    say("rendering images of the learned body and the exported geometry")
    images = render_images(Path(folder))
    write_index(Path(folder), demo.steps, figures, images)
    figures["steps"] = [{"title": st.title, "command": "selfcal " + " ".join(st.args), "seconds": round(st.seconds, 1)}
                        for st in demo.steps]
    (Path(folder) / "demo.json").write_text(json.dumps(figures, indent=2, default=float) + "\n")
    return figures


def _collision_meshes(urdf_path: Path) -> dict[str, list]:
    """Link -> list of trimesh convex pieces (link frame) from an exported URDF's <collision> elements."""
    import trimesh

    from rigs import urdf as urdf_io

    tree = urdf_io.parse_urdf(urdf_path)
    pieces: dict[str, list] = {}
    for link in tree.getroot().findall("link"):
        for collision in link.findall("collision"):
            mesh_element = collision.find("geometry/mesh")
            if mesh_element is None:
                continue
            path = urdf_io.resolve_mesh(mesh_element.get("filename", ""), urdf_path.parent)
            mesh = trimesh.load(str(path), force="mesh")
            mesh.apply_transform(urdf_io.element_origin(collision))
            pieces.setdefault(link.get("name"), []).append(mesh)
    return pieces


def render_images(folder: Path) -> dict[str, str]:
    """PNG renderings (matplotlib) of the learned body and the exported pieces at a held-out pose."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    from capture.session import load_session
    from rigs.kinematics import ChainModel
    from selfmodel.meshing import arm_mesh
    from selfmodel.model_io import load_model

    session = load_session(folder / "sessions" / "xarm-heldout")
    q = session.q[0]
    model = load_model(folder / "selfmodel")
    learned = arm_mesh(model, q, voxel=0.006)
    chain = ChainModel.from_urdf(folder / "collision" / "robot.urdf", session.base_link, session.tip_link)
    pieces = _collision_meshes(folder / "collision" / "robot.urdf")
    data = chain.model.createData()
    posed = []
    for link, meshes in pieces.items():
        frame = chain.model.getFrameId(link)
        if frame >= chain.model.nframes:
            continue
        base_T_link = chain.base_T_frame(q, frame, data)
        posed += [m.copy().apply_transform(base_T_link) for m in meshes]

    fig = plt.figure(figsize=(11, 5.2))
    colours = plt.cm.tab20(np.linspace(0, 1, max(len(posed), 1)))
    for index, (title, meshes) in enumerate((("learned body (marching cubes)", [learned]),
                                             (f"exported convex pieces ({len(posed)})", posed))):
        axis = fig.add_subplot(1, 2, index + 1, projection="3d")
        for k, mesh in enumerate(meshes):
            if not len(mesh.faces):
                continue
            colour = (0.55, 0.7, 0.9, 1.0) if index == 0 else colours[k % len(colours)]
            light = np.clip(0.35 + 0.65 * np.abs(mesh.face_normals @ np.array([0.4, -0.5, 0.77])), 0, 1)
            faces = Poly3DCollection(mesh.triangles, linewidths=0)
            faces.set_facecolor(np.column_stack([np.outer(light, colour[:3]), np.ones(len(light))]))
            axis.add_collection3d(faces)
        everything = np.vstack([m.vertices for m in meshes if len(m.vertices)]) if any(len(m.vertices) for m in meshes) else np.zeros((1, 3))
        centre, half = everything.mean(axis=0), (everything.max(axis=0) - everything.min(axis=0)).max() / 2 + 0.02
        axis.set_xlim(centre[0] - half, centre[0] + half)
        axis.set_ylim(centre[1] - half, centre[1] + half)
        axis.set_zlim(centre[2] - half, centre[2] + half)
        axis.set_box_aspect((1, 1, 1))
        axis.view_init(elev=20, azim=-60)
        axis.set_title(title)
        axis.set_axis_off()
    path = folder / "selfmodel-and-collision.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return {"body": path.name}


def _link(path: str, text: str) -> str:
    return f'<a href="{path}">{text}</a>'


def write_index(folder: Path, steps: list[Step], figures: dict, images: dict[str, str]) -> None:
    cal, val = figures["calibrate"], figures["validate"]
    audit = figures["audit"]["models"]
    recal = figures["recalibrate"]
    ev, export, check = figures["eval"], figures["export"], figures["check"]
    sections = []
    sections.append(("1. Calibrating the iiwa with a laser tracker", html_report.table(
        ["", "RMS (mm)"], [["nominal URDF (base and reflectors fitted)", val.get("nominal_rms_mm")],
                           ["calibrated, fresh poses", val.get("rms_mm")],
                           ["tracker noise floor", val.get("floor_rms_mm")]])
        + f"<p>{_link('calibration/report.html', 'calibration report')} · corrected URDF "
          f"{_link('calibration/robot.urdf', 'robot.urdf')} · {_link('calibration/calibration.yaml', 'calibration.yaml')}</p>"))
    rows = []
    for name, model in audit.items():
        rows.append([name, max(p["AP_mm"] for p in model["poses"]), max(p["RP_mm"] for p in model["poses"]),
                     model["AD_mm"], model["RD_mm"]])
    sections.append(("2. ISO 9283 audit, before and after calibration", html_report.table(
        ["commanded by", "max AP (mm)", "max RP (mm)", "AD (mm)", "RD (mm)"], rows)
        + f"<p>{_link('audit/report.html', 'audit report')}</p>"))
    sentences = "".join(f"<li>{html_report.paragraph(s)}</li>" for s in recal.get("summary", []))
    accuracy = recal.get("accuracy", {})
    sections.append(("3. The crash: 30 planned poses, recalibrated", html_report.table(
        ["", "RMS (mm)"], [["previous calibration on the crashed arm", accuracy.get("before_rms_mm")],
                           ["recalibrated, held-out poses", accuracy.get("after_holdout_rms_mm")]])
        + f"<p>What changed, most significant first:</p><ul>{sentences}</ul>"
        + f"<p>{_link('recalibration/report.html', 'recalibration report')} · "
          f"{_link('recalibration/recalibration.json', 'recalibration.json')}</p>"))
    shape_rows = [[k, v] for k, v in ev.items() if isinstance(v, (int, float))]
    sections.append(("4. The xArm6's body from its depth cameras", html_report.table(["figure", "value"], shape_rows)
                     + html_report.image_file(folder / images["body"], "learned body and exported geometry")
                     + f"<p>Collision geometry: {_link('collision/robot.urdf', 'robot.urdf (convex pieces)')} · "
                       f"{_link('collision/curobo_spheres.yml', 'curobo_spheres.yml')} · "
                       f"{_link('collision/robot.srdf', 'robot.srdf')} · "
                       f"{_link('collision/export_report.json', 'export_report.json')}</p>"))
    check_text = json.dumps(check, indent=1, default=float)
    sections.append(("5. The learned body against the URDF", f"<pre>{html.escape(check_text[:4000])}</pre>"))
    export_text = json.dumps(export, indent=1, default=float)
    sections.append(("Export figures", f"<pre>{html.escape(export_text[:6000])}</pre>"))
    sections.append(("Steps", html_report.table(["step", "command", "seconds"],
                                                [[st.title, "selfcal " + " ".join(st.args), round(st.seconds, 1)] for st in steps])))
    html_report.write_page(folder / "index.html", "selfcal demo", sections,
                           "Everything below ran on the built-in simulated rigs; the commands are in the last table.")


def check_demo_folder(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise InputError(f"{out}: already exists; choose another --out or pass --force.")
