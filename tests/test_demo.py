"""The README's main command: the whole story, quick edition, as a new user would run it."""

from __future__ import annotations

import json
import re
import subprocess
import sys


def test_quick_demo_runs_every_step_and_links_every_report(tmp_path):
    out = tmp_path / "demo"
    # The timeout only catches a hang: the quick demo takes about 3 minutes on an idle 2-core machine
    # and over 15 on a busy one, and a correct run must not fail for being slow.
    process = subprocess.run([sys.executable, "-m", "selfcal.cli", "demo", "--quick", "--out", str(out), "--json"],
                             capture_output=True, text=True, timeout=3600)
    assert process.returncode == 0, process.stderr[-3000:]
    figures = json.loads(process.stdout)
    index = (out / "index.html").read_text()
    # Every link on the index page points at a file the demo wrote.
    links = re.findall(r'href="([^"]+)"', index)
    assert len(links) >= 10
    for link in links:
        assert (out / link).is_file(), link
    assert index.count("<img") >= 1 and (out / "selfmodel-and-collision.png").stat().st_size > 10_000
    # The story's numbers: calibration beats the nominal URDF by far, the crash is found, the body is learned.
    validate = figures["validate"]
    assert validate["rms_mm"] < 0.1 < validate["nominal_rms_mm"]
    recalibration = figures["recalibrate"]
    assert recalibration["changed"][0]["joint"] == "lbr_iiwa_joint_4"
    assert "bent lbr_iiwa_link_3" in recalibration["summary"][0]
    audit = figures["audit"]["models"]
    assert max(p["AP_mm"] for p in audit["calibrated"]["poses"]) < max(p["AP_mm"] for p in audit["nominal"]["poses"])
    assert (out / "collision" / "robot.urdf").is_file() and (out / "collision" / "curobo_spheres.yml").is_file()
    assert not list(tmp_path.glob(".demo*"))  # no temporary folder left behind
