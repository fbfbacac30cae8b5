"""Screenshots of `selfcal view` for the README: each folder served, opened in headless Chromium,
photographed once the arm is drawn and the panel has its notes.

    .venv/bin/python scripts/view_screenshots.py docs/view-calibration.png=CAL_FOLDER [PNG=FOLDER ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import matplotlib.image

from bench_view import DevTools, arm_drawn, browser

# viser warns in a toast that WebGL runs in software (true here, no GPU); the picture is of the scene.
CLOSE_TOASTS = "document.querySelectorAll('.mantine-Notification-root button').forEach(b => b.click())"


def photograph(folder: Path, png: Path, work: Path) -> None:
    from selfcal.view.kinds import scene_of
    from selfcal.view.live import free_port, start

    view = start(scene_of(folder))
    port = free_port("127.0.0.1")
    process = browser(view.url, work / "chromium-profile", port)
    try:
        tools = DevTools(port, view.url)
        deadline = time.time() + 600
        while not arm_drawn(tools.screenshot()) and time.time() < deadline:
            time.sleep(0.5)
        view.finished.wait(timeout=max(1.0, deadline - time.time()))
        time.sleep(4.0)  # the panel's notes and sliders settle
        tools.call("Runtime.evaluate", expression=CLOSE_TOASTS)
        time.sleep(1.0)
        matplotlib.image.imsave(png, tools.screenshot())
        print(f"{png}: {folder}")
    finally:
        process.kill()
        process.wait()
        view.stop()


def main() -> None:
    from rigs.errors import InputError

    pairs = [pair.partition("=") for pair in sys.argv[1:]]
    if not pairs or any(not sep or not png or not folder for png, sep, folder in pairs):
        print("usage: scripts/view_screenshots.py PNG=FOLDER [PNG=FOLDER ...]", file=sys.stderr)
        sys.exit(2)
    work = Path("bench-view")
    work.mkdir(exist_ok=True)
    try:
        for png, _, folder in pairs:
            photograph(Path(folder), Path(png), work.resolve())
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
