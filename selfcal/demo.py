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

from rigs import html_report, scene_html
from rigs.errors import InputError
from selfmodel.export.scene import collision_pieces, export_scene


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
    json_file: str | None = None  # results/<name>.json: what the step printed with --json


@dataclass
class Demo:
    folder: Path
    sizes: DemoSizes
    say: Callable[[str], None] = print
    steps: list[Step] = field(default_factory=list)

    def run(self, title: str, *args: str, json_output: bool = True, name: str | None = None):
        """Run ``selfcal ARGS`` in a child process; its JSON result (kept as ``results/NAME.json``), or
        a RuntimeError naming the step."""
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
            if name is not None:
                step.json_file = f"results/{name}.json"
                (self.folder / "results").mkdir(exist_ok=True)
                (self.folder / step.json_file).write_text(process.stdout)
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
    figures["calibrate"] = demo.run("calibrate the iiwa", "calibrate", "sessions/iiwa", "--out", "calibration", name="calibrate")
    figures["validate"] = demo.run("validate on the fresh poses", "validate", "calibration", "sessions/iiwa-check", name="validate")

    # 2. ISO 9283 audit before and after calibration.
    demo.run("plan an ISO 9283 audit", "audit", "plan", "--rig", "iiwa-tracker", "--cycles", str(s.audit_cycles),
             "--out", "audit-plan.csv")
    demo.run("record the audit", "capture", "--rig", "iiwa-tracker", "--plan", "audit-plan.csv", "--seed", "3",
             "--out", "sessions/iiwa-audit")
    figures["audit"] = demo.run("report the audit: nominal and calibrated", "audit", "report", "sessions/iiwa-audit",
                                "--calibration", "calibration", "--out", "audit", name="audit")

    # 3. The crash.
    figures["plan"] = demo.run("plan 30 D-optimal poses for a recalibration", "plan", "--rig", "iiwa-tracker", "--poses",
                               "30", "--optimal", "--candidates", str(s.crash_candidates), "--calibration",
                               "calibration", "--out", "crash-plan.csv", name="plan")
    demo.run("record the crashed iiwa", "capture", "--rig", "iiwa-tracker-crashed", "--plan", "crash-plan.csv",
             "--seed", "4", "--out", "sessions/iiwa-crashed")
    figures["recalibrate"] = demo.run("recalibrate and name the damage", "recalibrate", "sessions/iiwa-crashed",
                                      "--previous", "calibration", "--out", "recalibration", name="recalibrate")

    # 4. The xArm6's body from its cameras.
    demo.run("capture the xArm6 with four depth cameras", "capture", "--rig", "xarm6-cameras-crashed", "--poses",
             str(s.camera_poses), "--seed", "5", "--out", "sessions/xarm")
    demo.run("capture held-out xArm6 poses", "capture", "--rig", "xarm6-cameras-crashed", "--poses",
             str(s.camera_heldout), "--seed", "6", "--out", "sessions/xarm-heldout")
    budget = ["--steps", str(s.train_steps)] if s.train_steps else ["--minutes", str(s.train_minutes)]
    figures["train"] = demo.run("learn the xArm6's shape from depth", "selfmodel", "train", "sessions/xarm", "--out",
                                "selfmodel", *budget, "--seed", "0", name="train")
    figures["eval"] = demo.run("measure the self-model on held-out poses", "selfmodel", "eval", "selfmodel",
                               "sessions/xarm-heldout", name="eval")
    figures["export"] = demo.run("export collision geometry for planners", "selfmodel", "export", "selfmodel", "--out",
                                 "collision", "--heldout", "sessions/xarm-heldout", "--srdf-samples",
                                 str(s.srdf_samples), name="export")
    figures["check"] = demo.run("check the learned body against the URDF", "selfmodel", "check", "selfmodel", "--urdf",
                                "sessions/xarm/robot.urdf", name="check")

    say("rendering images of the learned body and the exported geometry")
    images = render_images(Path(folder))
    write_index(Path(folder), demo.steps, figures, images)
    figures["steps"] = [{"title": st.title, "command": "selfcal " + " ".join(st.args), "seconds": round(st.seconds, 1)}
                        for st in demo.steps]
    (Path(folder) / "demo.json").write_text(json.dumps(figures, indent=2, default=float) + "\n")
    return figures


VIEWS = ((20, -60, "from the front left"), (35, 150, "from behind, above"))


def _posed_truth(session, q_index: int) -> list:
    """The true arm's link meshes (base frame) at pose ``q_index`` of a simulated session."""
    from selfmodel.evaluation.metrics import true_arm

    truth = true_arm(session, [session.pose_ids[q_index]])
    return [truth.meshes[name].copy().apply_transform(truth.base_T_links[0, i])
            for i, name in enumerate(truth.link_names) if name in truth.meshes]


def render_images(folder: Path) -> dict[str, str]:
    """PNG renderings (matplotlib) at a held-out pose: the learned body, the true body and the exported
    convex pieces side by side, from two viewpoints."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    from capture.session import load_session
    from rigs.kinematics import ArmModel
    from selfmodel.inspect.meshing import arm_mesh
    from selfmodel.model.models import SelfModel

    session = load_session(folder / "sessions" / "xarm-heldout")
    q = session.q[0]
    model = SelfModel.load(folder / "selfmodel")
    learned = arm_mesh(model, q, voxel=0.006)
    true_body = _posed_truth(session, 0)
    chain = ArmModel.from_urdf(folder / "collision" / "robot.urdf", session.base_link, session.tip_link)
    pieces = collision_pieces(folder / "collision" / "robot.urdf")
    links = [link for link in pieces if chain.model.existFrame(link)]
    posed = []
    for link, base_T_link in zip(links, chain.base_T_frames(q, [chain.model.getFrameId(link) for link in links])):
        posed += [m.copy().apply_transform(base_T_link) for m in pieces[link]]

    columns = (("learned body (marching cubes)", [learned], (0.55, 0.7, 0.9)),
               ("true body (simulation truth)", true_body, (0.75, 0.75, 0.72)),
               (f"exported convex pieces ({len(posed)})", posed, None))
    everything = np.vstack([m.vertices for _, meshes, _ in columns for m in meshes if len(m.vertices)])
    centre, half = everything.mean(axis=0), (everything.max(axis=0) - everything.min(axis=0)).max() / 2 + 0.02
    fig = plt.figure(figsize=(16, 10.5))
    colours = plt.cm.tab20(np.linspace(0, 1, max(len(posed), 1)))
    for row, (elevation, azimuth, view) in enumerate(VIEWS):
        for column, (title, meshes, colour) in enumerate(columns):
            axis = fig.add_subplot(len(VIEWS), len(columns), row * len(columns) + column + 1, projection="3d")
            for k, mesh in enumerate(meshes):
                if not len(mesh.faces):
                    continue
                rgb = colour if colour is not None else colours[k % len(colours)][:3]
                light = np.clip(0.35 + 0.65 * np.abs(mesh.face_normals @ np.array([0.4, -0.5, 0.77])), 0, 1)
                faces = Poly3DCollection(mesh.triangles, linewidths=0)
                faces.set_facecolor(np.column_stack([np.outer(light, rgb), np.ones(len(light))]))
                axis.add_collection3d(faces)
            axis.set_xlim(centre[0] - half, centre[0] + half)
            axis.set_ylim(centre[1] - half, centre[1] + half)
            axis.set_zlim(centre[2] - half, centre[2] + half)
            axis.set_box_aspect((1, 1, 1))
            axis.view_init(elev=elevation, azim=azimuth)
            axis.set_title(f"{title}, {view}")
            axis.set_axis_off()
    fig.subplots_adjust(left=0, right=1, top=0.95, bottom=0, wspace=0, hspace=0.05)
    path = folder / "selfmodel-and-collision.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return {"body": path.name}


def _link(path: str, text: str) -> str:
    return f'<a href="{html.escape(path)}">{html.escape(text)}</a>'


def _links(*pairs: tuple[str, str]) -> str:
    return "<p>" + " · ".join(_link(path, text) for path, text in pairs) + "</p>"


def _verdict(result: dict) -> str:
    """The job's verdict, from a command's --json output, as the section's first line."""
    from rigs.verdicts import Verdict

    return Verdict.from_dict(result["verdict"]).html()


def _numbers(rows: list[tuple[str, float | None, str]]) -> str:
    """Two or three figures that matter, each labelled in words with its unit."""
    return html_report.table(["", "value"], [[label, "n/a" if value is None else f"{value:.3g} {unit}"]
                                              for label, value, unit in rows])


def _largest(poses: list[dict], key: str) -> float:
    return max(entry[key] for entry in poses)


def _body_view(folder: Path, picture: str) -> str:
    """The exported geometry in 3D, offline, with the rendered picture where scripting is off (the
    picture alone when the page is written without the export folder)."""
    image = html_report.image_file(folder / picture, "learned body, true body and exported geometry")
    if not (folder / "collision" / "export_report.json").is_file():
        return image
    return scene_html.embed(export_scene(folder / "collision"), image)


def write_index(folder: Path, steps: list[Step], figures: dict, images: dict[str, str]) -> None:
    """index.html: one section per job, each opening with its verdict; no raw JSON (links to the files)."""
    validate, audit, recal = figures["validate"], figures["audit"], figures["recalibrate"]
    evaluation, export, check = figures["eval"], figures["export"], figures["check"]
    sections = []
    sections.append(("1. Calibrating the iiwa with a laser tracker", _verdict(validate) + _numbers([
        ("RMS error on 3D points of fresh poses, calibrated", validate.get("rms_mm"), "mm"),
        ("the same with the nominal URDF (base and reflectors fitted)", validate.get("nominal_rms_mm"), "mm"),
        ("the tracker's own error alone (noise floor)", validate.get("floor_rms_mm"), "mm")])
        + html_report.paragraph("Calibration: " + figures["calibrate"]["verdict"]["reason"] + ".")
        + _links(("calibration/report.html", "calibration report"), ("calibration/robot.urdf", "corrected robot.urdf"),
                 ("calibration/calibration.yaml", "calibration.yaml"), ("results/calibrate.json", "calibrate.json"),
                 ("results/validate.json", "validate.json"))))
    models = audit["models"]
    calibrated = models.get("calibrated", models["nominal"])["poses"]
    sections.append(("2. ISO 9283 accuracy audit", _verdict(audit) + _numbers([
        ("largest pose accuracy AP, commanded by the calibrated model", _largest(calibrated, "AP_mm"), "mm"),
        ("largest pose accuracy AP, commanded by the nominal URDF", _largest(models["nominal"]["poses"], "AP_mm"), "mm"),
        ("largest pose repeatability RP", _largest(calibrated, "RP_mm"), "mm"),
        ("the tracker's uncertainty at the audit's points", audit.get("tracker_uncertainty_mm"), "mm")])
        + _links(("audit/report.html", "audit report"), ("results/audit.json", "audit.json"))))
    accuracy = recal.get("accuracy", {})
    sentences = "".join(f"<li>{html.escape(sentence)}</li>" for sentence in recal.get("summary", []))
    sections.append(("3. After the crash: 30 planned poses, recalibrated", _verdict(recal) + _numbers([
        ("RMS error of the previous calibration on the crashed arm", accuracy.get("before_rms_mm"), "mm"),
        ("RMS error after recalibrating, on poses left out of the fit", accuracy.get("after_holdout_rms_mm"), "mm")])
        + f"<p>What changed, most significant first:</p><ul>{sentences}</ul>"
        + _links(("recalibration/report.html", "recalibration report"), ("recalibration/robot.urdf", "robot.urdf"),
                 ("results/recalibrate.json", "recalibrate.json"), ("results/plan.json", "plan.json"))))
    links = export.get("links", {})
    truth = export.get("truth") or {}
    coverage = (truth.get("pieces") or {}).get("coverage")
    sections.append(("4. The xArm6's body for planners, learned from four depth cameras", _verdict(evaluation) + _numbers([
        ("mean distance between the learned and the true surface (Chamfer-L1)", evaluation.get("chamfer_l1_mm"), "mm"),
        ("share of the true body the model calls free", 100 * evaluation.get("false_free_rate", float("nan")), "%"),
        ("largest safety margin added to a link's exported geometry", export.get("margin_mm"), "mm"),
        ("share of the true surface inside the exported convex pieces", None if coverage is None else 100 * coverage, "%")])
        + html_report.paragraph(f"Exported for planners: {sum(row.get('pieces', 0) for row in links.values())} convex "
                                f"pieces (URDF collision meshes) and {sum(row.get('spheres', 0) for row in links.values())} "
                                f"spheres (cuRobo) over {len(links)} links, and an SRDF of the pairs that never collide.")
        + _body_view(folder, images["body"])
        + _links(("collision/robot.urdf", "robot.urdf (convex pieces)"), ("collision/curobo_spheres.yml", "curobo_spheres.yml"),
                 ("collision/robot.srdf", "robot.srdf"), ("collision/export_report.json", "export_report.json"),
                 ("results/eval.json", "eval.json"), ("results/train.json", "train.json"))))
    def what(row: dict) -> str:
        if row["kind"].startswith("joint"):
            bend = row.get("bend_deg")
            return (f"{row['kind']} turned {bend:.2f} deg, moving what follows" if bend is not None else
                    f"where {row['kind']} places what follows")
        return {"added matter": "matter the URDF lacks", "missing matter": "matter the body lacks"}.get(row["kind"], row["kind"])

    rows = [[row["link"], f"{row['deviation_mm']:.1f} mm", what(row)] for row in check["links"][:4]]
    sections.append(("5. Is the xArm6 damaged? What the cameras measured against its URDF", _verdict(check)
                     + html_report.table(["link", "largest figure", "what differs"], rows)
                     + _links(("results/check.json", "check.json (every link)"))))
    sections.append(("Steps", html_report.table(["step", "command", "seconds"],
                                                [[st.title, "selfcal " + " ".join(st.args), round(st.seconds, 1)] for st in steps])
                     + _links(("demo.json", "demo.json (every figure)"))))
    html_report.write_page(folder / "index.html", "selfcal demo", sections,
                           "Everything below ran on the built-in simulated rigs; the commands are in the last table.")


def check_demo_folder(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise InputError(f"{out}: already exists; choose another --out or pass --force.")
