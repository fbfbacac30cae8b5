"""The 3D viewer's figures: time from `selfcal view` to the first frame, frames per second while a
joint slider is dragged, and what the offline view adds to a report folder.

    .venv/bin/python scripts/bench_view.py [--workdir DIR] [--seconds 8] [--poses 80] [--steps 1500]

1. Results to view, built once into --workdir and reused: an xArm6 self-model (`selfcal capture
   --rig xarm6-cameras --poses N`, `selfcal selfmodel train --steps S`), a Panda collision export
   (the same from panda-cameras with 3 S steps, then `selfcal selfmodel export
   --voxel 6 --srdf-samples 2000 --piece-vertices 128`) and
   an iiwa calibration (40 poses). Small trainings: the viewer's cost depends on the meshes' size,
   not on how well the body was learned.
2. Per result, in this process and on the clock from before the viewer's imports: the folder's
   scene (its loader, the meshing of the baked grids, the damage check for a self-model), the
   server, then headless Chromium opening the page; "first frame" is when a screenshot of the page
   (DevTools protocol) first shows the arm. The interpreter and command-line start (`selfcal
   --version` in a child process) is measured apart and added.
3. Frames per second: the page's requestAnimationFrame callbacks, at rest and while a thread runs
   the slider's own callback (``LiveView.update``: forward kinematics, node poses, live items) up
   to 60 times a second along the second joint's range, as a dragging mouse does. Chromium draws
   with software WebGL (SwiftShader) on the same 2 cores: a floor, a desktop GPU browser draws faster.
4. The report folder's extra size: the embedded view's bytes in each report.html.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from benchlib import ROOT, table, write_section

COMMAND = ".venv/bin/python scripts/bench_view.py"
SIZE = (1280, 800)
RATE = 60  # slider moves a second while dragging: a mouse reports about this many


def selfcal(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "selfcal.cli", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def build(work: Path, poses: int, steps: int, export: Path | None = None) -> dict[str, Path]:
    """The xArm6 self-model, the Panda export (or ``export``, an export folder made elsewhere) and an
    iiwa calibration, made once."""
    work.mkdir(parents=True, exist_ok=True)
    for rig, name in (("xarm6-cameras", "xarm"), ("panda-cameras", "panda")):
        if not (work / name).exists():
            selfcal("capture", "--rig", rig, "--poses", str(poses), "--seed", "1", "--out", str(work / name))
    if not (work / "xarm-model").exists():
        selfcal("selfmodel", "train", str(work / "xarm"), "--out", str(work / "xarm-model"), "--steps", str(steps),
                "--seed", "1", "--threads", "1")
    # After that many steps the Panda's fingers are still empty (the export refuses an empty link): three times as many.
    if export is None and not (work / "panda-model2").exists():
        selfcal("selfmodel", "train", str(work / "panda"), "--out", str(work / "panda-model2"), "--steps", str(3 * steps),
                "--seed", "1", "--threads", "1")
    if export is None and not (work / "panda-collision").exists():
        # 64 vertices a piece: the cut pieces of link5 and link7 still overlap by up to 0.8 mm at 6 recorded
        # poses after the six sweeps, and the export says so; 128 keeps the cuts.
        selfcal("selfmodel", "export", str(work / "panda-model2"), "--out", str(work / "panda-collision"), "--voxel", "6",
                "--srdf-samples", "2000", "--piece-vertices", "128")
    if not (work / "iiwa").exists():
        selfcal("capture", "--rig", "iiwa-tracker", "--poses", "40", "--seed", "1", "--out", str(work / "iiwa"))
    if not (work / "iiwa-cal").exists():
        selfcal("calibrate", str(work / "iiwa"), "--out", str(work / "iiwa-cal"))
    exported = ("Panda collision export", work / "panda-collision") if export is None else (f"collision export {export.name}", export)
    return {"xArm6 self-model": work / "xarm-model", exported[0]: exported[1], "iiwa calibration": work / "iiwa-cal"}


def command_start() -> float:
    """Seconds for the interpreter and the command line to start (`selfcal --version`), best of 3."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "selfcal.cli", "--version"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def browser(url: str, profile: Path, port: int) -> subprocess.Popen:
    """Headless Chromium showing ``url`` until killed (software WebGL, as on a machine without a GPU),
    driven through the DevTools protocol on ``port``."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (scripts/setup.sh installs it)")
    return subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--enable-unsafe-swiftshader",
                             f"--window-size={SIZE[0]},{SIZE[1]}", f"--user-data-dir={profile}",
                             f"--remote-debugging-port={port}", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class DevTools:
    """The smallest DevTools-protocol client: one page, commands answered in order."""

    def __init__(self, port: int, url: str, timeout: float = 120.0):
        from websockets.sync.client import connect  # viser's own dependency; only the benchmark drives a browser

        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                    pages = [p for p in json.loads(response.read()) if p.get("type") == "page" and p["url"].startswith(url)]
                if pages:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise SystemExit(f"chromium showed no page of {url}")
            time.sleep(0.1)
        self.socket = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self.next_id = 0

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=300))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise SystemExit(f"{method}: {message['error']}")
                return message["result"]

    def screenshot(self) -> np.ndarray:
        import matplotlib.image

        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        return matplotlib.image.imread(io.BytesIO(data), format="png")[..., :3]

    def frames_per_second(self, seconds: float) -> float:
        """requestAnimationFrame callbacks per second in the page over ``seconds``: the frames it draws."""
        script = ("new Promise(done => { let frames = 0; const start = performance.now();"
                  " function tick() { frames++; const spent = performance.now() - start;"
                  f" if (spent < {seconds * 1000}) requestAnimationFrame(tick); else done(frames / (spent / 1000)); }}"
                  " requestAnimationFrame(tick); })")
        return float(self.call("Runtime.evaluate", expression=script, awaitPromise=True)["result"]["value"])


def arm_drawn(picture: np.ndarray) -> bool:
    """Whether the middle of the page (left of viser's panel) holds the drawn arm, not background."""
    height, width = picture.shape[:2]
    middle = picture[int(0.3 * height):int(0.75 * height), int(0.3 * width):int(0.6 * width)]
    return float(np.mean(middle.min(axis=2) < 0.88)) > 0.02


def measure(folder: Path, seconds: float, work: Path) -> dict:
    load = os.getloadavg()[0]  # the machine is shared: how busy it was is part of the figure
    start = time.perf_counter()
    from selfcal.view.kinds import scene_of
    from selfcal.view.live import free_port, start as serve

    scene = scene_of(folder)
    loaded = time.perf_counter() - start
    view = serve(scene)
    served = time.perf_counter() - start
    port = free_port("127.0.0.1")
    process = browser(view.url, work / "chromium-profile", port)
    try:
        tools = DevTools(port, view.url)
        while not arm_drawn(tools.screenshot()):
            if time.perf_counter() - start > 600:
                raise SystemExit(f"{folder}: the arm was not drawn within 10 minutes")
        first = time.perf_counter() - start
        # A self-model's damage check runs after the first frame; frames are counted once it is done.
        view.finished.wait(timeout=900)
        later = time.perf_counter() - start
        idle = tools.frames_per_second(3.0)
        # Drag: the slider's callback as fast as the server runs it, sweeping the second joint to and fro.
        joint = 1 if len(scene.joints) > 1 else 0
        lower, upper = scene.joints[joint].lower, scene.joints[joint].upper
        stop, updates, update_seconds = threading.Event(), [0], []

        def drag() -> None:
            phase = 0.0
            while not stop.is_set():
                q = scene.q_start.copy()
                q[joint] = lower + (upper - lower) * (0.5 + 0.3 * np.sin(phase))
                tick = time.perf_counter()
                view.update(q)
                update_seconds.append(time.perf_counter() - tick)
                updates[0] += 1
                phase += 0.05
                time.sleep(1 / RATE)  # a mouse reports about 60 moves a second

        dragger = threading.Thread(target=drag)
        dragger.start()
        drag_start = time.perf_counter()
        dragging = tools.frames_per_second(seconds)
        stop.set()
        dragger.join()
        updates_per_second = updates[0] / (time.perf_counter() - drag_start)
    finally:
        process.kill()
        process.wait()
        view.stop()
    triangles = sum(len(item.faces) for item in scene.items if hasattr(item, "faces"))
    return {"scene_s": loaded, "served_s": served, "first_frame_s": first, "checked_s": later, "idle_fps": idle,
            "fps": dragging,
            "updates_per_s": updates_per_second, "load": load, "update_ms": 1e3 * float(np.median(update_seconds)),
            "triangles": triangles}


def view_bytes(folder: Path) -> int:
    """Bytes the offline 3D view adds to report.html in ``folder``: the embedded fragment."""
    page = (folder / "report.html").read_text()
    begin = page.index("<style>.selfcal-scene")
    end = page.index("})();\n</script>", begin) + len("})();\n</script>")
    return len(page[begin:end].encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("bench-view"))
    parser.add_argument("--seconds", type=float, default=8.0, help="how long the slider is dragged")
    parser.add_argument("--poses", type=int, default=80)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--export", type=Path, default=None, help="an export folder to measure instead of the Panda's")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    folders = build(args.workdir.resolve(), args.poses, args.steps, args.export)
    startup = command_start()
    rows, sizes = [], []
    for label, folder in folders.items():
        figures = measure(folder, args.seconds, args.workdir.resolve())
        print(label, figures, flush=True)
        rows.append([label, figures["triangles"], round(startup + figures["scene_s"], 2),
                     round(startup + figures["first_frame_s"], 2),
                     round(startup + figures["checked_s"], 1) if figures["checked_s"] - figures["first_frame_s"] > 0.5 else "-",
                     round(figures["idle_fps"], 1), round(figures["fps"], 1),
                     round(figures["updates_per_s"], 1), round(figures["update_ms"], 1), round(figures["load"], 1)])
        if (folder / "report.html").is_file():
            page = (folder / "report.html").stat().st_size
            extra = view_bytes(folder)
            sizes.append([label, f"{page / 1e3:.0f} kB", f"{extra / 1e3:.0f} kB"])
    body = (f"`selfcal view FOLDER` on this 2-core machine, headless Chromium drawing with software WebGL on the same "
            f"cores ({SIZE[0]} x {SIZE[1]}); the command line's own start ({startup:.2f} s, `selfcal --version`) is "
            f"included. First frame: until a screenshot of the page shows the arm. Frames per second: the page's "
            f"requestAnimationFrame callbacks over 3 s at rest and over {args.seconds:g} s while the second joint's "
            f"slider callback runs at up to 60 moves a second (a mouse's rate; the moves it managed are given), "
            f"on software WebGL (a floor: a GPU browser draws faster). "
            f"Results built with {args.poses} poses and {args.steps} training steps (small trainings: the viewer's "
            f"cost follows the meshes' size, not the body's accuracy).\n\n"
            + (f"The export measured is {args.export.name} (`--export`), in place of the Panda's.\n\n" if args.export else "")
            + table(["result", "triangles", "scene ready s", "first frame s", "check done s", "frames/s at rest",
                     "frames/s dragging",
                     "slider moves/s", "slider callback ms", "load average"], rows)
            + "\n\nThe offline view inside each report (scene at the opening configuration, gzip + base64, and the "
              "inlined WebGL client of about 10 kB):\n\n"
            + table(["report.html of", "page", "of which the 3D view"], sizes))
    write_section("view", "Seeing results in 3D: selfcal view and the reports' offline view", body, COMMAND)


if __name__ == "__main__":
    main()
