"""The README's main command: the whole story, quick edition, as a new user would run it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser


class Sections(HTMLParser):
    """The page's sections: heading and the text of what follows it, tags apart."""

    def __init__(self):
        super().__init__()
        self.sections: list[list] = []
        self.in_heading = False
        self.in_pre = False

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self.in_heading = True
            self.sections.append(["", "", []])
        elif tag == "pre":
            self.in_pre = True
        elif self.sections and tag == "p":
            self.sections[-1][2].append(dict(attrs).get("class", ""))

    def handle_endtag(self, tag):
        self.in_heading = self.in_heading and tag != "h2"

    def handle_data(self, data):
        if self.sections:
            self.sections[-1][0 if self.in_heading else 1] += data


def assert_a_person_can_read(index: str) -> None:
    """No raw JSON on the page, and each job's section opens with its verdict."""
    parser = Sections()
    parser.feed(index)
    assert not parser.in_pre, "a <pre> block on the page"
    for heading, text, paragraphs in parser.sections:
        assert not re.search(r'[{\[]\s*"\w+"\s*:', text), f"raw JSON in section {heading!r}"
        assert "_mm" not in text and "_pct" not in text, f"a JSON key as a label in {heading!r}"
        if heading[:1].isdigit():  # a job's section
            assert paragraphs and "verdict" in paragraphs[0], f"section {heading!r} does not open with its verdict"
            assert re.match(r"\s*(PASS|FAIL|CANNOT TELL):", text), f"section {heading!r}: {text[:80]!r}"


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
    assert_a_person_can_read(index)
    assert {link for link in links if link.startswith("results/")} >= {
        f"results/{name}.json" for name in ("calibrate", "validate", "audit", "recalibrate", "eval", "check")}
    # The story's numbers: calibration beats the nominal URDF by far, the crash is found, the body is learned.
    validate = figures["validate"]
    assert validate["rms_mm"] < 0.1 < validate["nominal_rms_mm"]
    assert validate["verdict"]["result"] == "PASS" and figures["audit"]["verdict"]["result"] == "PASS"
    recalibration = figures["recalibrate"]
    assert recalibration["changed"][0]["joint"] == "lbr_iiwa_joint_4"
    assert "bent lbr_iiwa_link_3" in recalibration["summary"][0]
    audit = figures["audit"]["models"]
    assert max(p["AP_mm"] for p in audit["calibrated"]["poses"]) < max(p["AP_mm"] for p in audit["nominal"]["poses"])
    assert (out / "collision" / "robot.urdf").is_file() and (out / "collision" / "curobo_spheres.yml").is_file()
    assert not list(tmp_path.glob(".demo*"))  # no temporary folder left behind
