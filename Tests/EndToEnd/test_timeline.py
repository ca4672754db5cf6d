"""Seeing what Drowse does (issue "Seeing what Drowse does"): `drowse simulate SCENARIO --svg FILE`
draws a day's radio timeline, and `drowse timeline --svg FILE` draws what a real agent recorded.
These tests read the pictures as XML, check them against the figures they were drawn from, and
render them to PNG with rsvg-convert (librsvg2-bin) to prove they render."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET

import pytest

from drowse_e2e import DROWSE, REPO

SVG = "{http://www.w3.org/2000/svg}"


def rsvg_convert() -> str:
    path = shutil.which("rsvg-convert")
    if path is None:
        msg = "rsvg-convert is not installed (Debian package librsvg2-bin; deploy/test.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def render_png(svg_path, png_path) -> tuple[int, int]:
    """Renders with rsvg-convert; returns the PNG's width and height, read from its header."""
    r = subprocess.run([rsvg_convert(), "-o", str(png_path), str(svg_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    head = png_path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    return struct.unpack(">II", head[16:24])


def panel(root, name):
    return next(g for g in root.iter(SVG + "g") if g.get("class") == "panel" and g.get("data-panel") == name)


def has_class(e, name) -> bool:
    return name in (e.get("class") or "").split()


def simulate(*args):
    r = subprocess.run([str(DROWSE), "simulate", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_simulated_day_draws_the_reports_figures_and_renders(workdir):
    scenario = REPO / "deploy" / "scenarios" / "twenty-apps-lte.toml"
    svg = workdir / "day.svg"
    report = json.loads(simulate(str(scenario), "--svg", str(svg), "--json"))
    root = ET.parse(svg).getroot()
    assert root.tag == SVG + "svg"
    day = panel(root, "day")
    lanes = [g for g in day.iter(SVG + "g") if g.get("class") == "radio-lane"]
    assert [g.get("data-lane") for g in lanes] == ["drowse", "android", "naive"]
    for lane in lanes:
        totals = report[lane.get("data-lane")]
        bars = [r for r in lane.iter(SVG + "rect") if has_class(r, "radio")]
        # One bar per radio wake, their lengths adding up to the report's radio-on seconds.
        assert len(bars) == totals["promotions"]
        assert sum(float(b.get("data-seconds")) for b in bars) == pytest.approx(totals["radio_on_seconds"], abs=0.0005 * len(bars))
        assert float(lane.get("data-radio-on-seconds")) == totals["radio_on_seconds"]
        assert float(lane.get("data-energy-joules")) == totals["energy_joules"]
        assert float(lane.get("data-staleness-median-seconds")) == totals["staleness_median_seconds"]
        # One mark per run of this strategy, across the app lanes.
        rows = [g for g in day.iter(SVG + "g") if g.get("class") == "row" and g.get("data-row") == lane.get("data-lane")]
        runs = sum(1 for row in rows for r in row.iter(SVG + "rect") if has_class(r, "run"))
        assert runs == totals["fetches"]
    assert not any(e.tag.endswith("script") or e.tag.endswith("image") for e in root.iter())
    width, height = render_png(svg, workdir / "day.png")
    assert (width, height) == (int(float(root.get("width"))), int(float(root.get("height"))))


def test_the_docs_picture_is_what_the_command_draws(workdir):
    """docs/timeline-twenty-apps.svg (shown in the README) is the command's output, not a stale copy."""
    drawn = simulate(str(REPO / "deploy" / "scenarios" / "twenty-apps-lte.toml"), "--svg", "-")
    assert drawn == (REPO / "docs" / "timeline-twenty-apps.svg").read_text()
