"""Seeing what Drowse does: `drowse simulate SCENARIO --svg FILE`
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

from drowse_e2e import DROWSE, REPO, notify_topic, wait_until

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
    """docs/timeline-twenty-apps.svg (shown in docs/getting-started.md) is the command's output, not a stale copy."""
    drawn = simulate(str(REPO / "deploy" / "scenarios" / "twenty-apps-lte.toml"), "--svg", "-")
    assert drawn == (REPO / "docs" / "timeline-twenty-apps.svg").read_text()


def lane(root, lane_id):
    return next(g for g in panel(root, "day").iter(SVG + "g") if g.get("class") == "lane" and g.get("data-lane") == lane_id)


def row(lane_el, row_id):
    return next(g for g in lane_el.iter(SVG + "g") if g.get("class") == "row" and g.get("data-row") == row_id)


def marks(el, role):
    return [r for r in el.iter(SVG + "rect") if has_class(r, role)]


def title(el) -> str:
    t = el.find(SVG + "title")
    return t.text if t is not None else ""


def file_state(paths):
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in paths if p.exists()}


def fake_power(base, ac_online: int, battery: int):
    """A power_supply tree drowsed reads instead of /sys (as test_conditions.py does)."""
    ps = base / "sys" / "class" / "power_supply"
    for name, kind in (("AC", "Mains"), ("BAT0", "Battery")):
        (ps / name).mkdir(parents=True, exist_ok=True)
        (ps / name / "type").write_text(kind + "\n")
    (ps / "AC" / "online").write_text(f"{ac_online}\n")
    (ps / "BAT0" / "capacity").write_text(f"{battery}\n")
    (ps / "BAT0" / "status").write_text(("Charging" if ac_online else "Discharging") + "\n")
    net = base / "sys" / "class" / "net"
    if not net.exists():
        net.symlink_to("/sys/class/net")
    return base / "sys"


def trace_has_low_battery(path) -> bool:
    for line in path.read_text().splitlines()[1:]:
        try:
            event = json.loads(line)["event"]
        except ValueError:
            continue
        if event["type"] == "conditions_changed" and event["conditions"]["low_battery"]:
            return True
    return False


def test_a_recorded_session_draws_its_fetch_notification_and_download(broker, nginx, make_drowse, workdir):
    sysfs = fake_power(workdir, ac_online=1, battery=80)
    d = make_drowse(broker=broker, extra_config=f'''
        [radio]
        model = "lte"
        [conditions]
        sysfs_root = "{sysfs}"
        battery_low_percent = 20
    ''')
    d.add_app("news", fetch=d.recorder("news"), minimum_interval="5s", notification=d.recorder("news-note"))
    d.add_app("dl", events=d.recorder("dl"))
    trace = d.base / "scheduler.trace"
    d.daemon_args = ["--scheduler-trace", str(trace)]
    d.start()
    broker.wait_subscribed(notify_topic("news"))
    d.wait_runs("news", 1)  # a scheduled window
    d.push("news", "-d", "content-id=1")
    d.wait_runs("news-note", 1)
    url, digest, _ = nginx.add_file("payload.bin", 256 * 1024)
    dest = d.base / "payload.bin"
    tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
    wait_until(lambda: d.transfer(tid)["state"] == "completed", 20, what="the download completed")
    d.wait_runs("dl", 1)
    d.cli_ok("used", "news")
    # Unplugged with the battery low: the scheduler hears of it (and the trace records it).
    fake_power(workdir, ac_online=0, battery=15)
    assert d.json("conditions", "--refresh")["power_source"] == "battery"
    wait_until(lambda: trace_has_low_battery(trace), 10, what="the low battery in the trace")
    d.wait_idle()

    # Read-only, and not through drowsed: the state files are untouched and no socket is needed.
    state_files = [d.state_dir / n for n in ("state.db", "state.db-wal")]
    before = file_state(state_files)
    fetched_before = len(d.runs("news"))
    svg = d.base / "timeline.svg"
    r = subprocess.run([str(DROWSE), "timeline", "--config", str(d.config), "--since", "2m", "--svg", str(svg), "--trace", str(trace)],
                       capture_output=True, text=True, timeout=60, env={**d.env(), "DROWSE_SOCKET": str(d.base / "no.sock")})
    assert r.returncode == 0, r.stderr
    assert file_state(state_files) == before
    fetched_after = len(d.runs("news"))  # news fetches every 5 s: one may end meanwhile

    root = ET.parse(svg).getroot()
    radio = next(g for g in panel(root, "day").iter(SVG + "g") if g.get("class") == "radio-lane")
    bars = marks(radio, "radio")
    assert len(bars) >= 1 and len(bars) == int(float(radio.get("data-promotions")))
    # Each wake: a promotion and at least a tail (lte); radio-on counts what lies inside the
    # picture (the last tail runs on past now).
    assert all(float(b.get("data-promotion-seconds")) == 0.26 and float(b.get("data-tail-seconds")) >= 11.576 for b in bars)
    span = float(panel(root, "day").get("data-to")) - float(panel(root, "day").get("data-from"))
    inside = sum(min(float(b.get("data-start")) + float(b.get("data-seconds")), span) - max(float(b.get("data-start")), 0) for b in bars)
    assert float(radio.get("data-radio-on-seconds")) == pytest.approx(inside, abs=0.002 * len(bars))
    assert float(radio.get("data-radio-on-seconds")) > 0
    assert int(float(radio.get("data-notifications"))) == 1
    assert int(float(radio.get("data-transfers"))) == 1
    # The fetch: a run mark per recorded run, coloured new-data (the recorder exits 0).
    news = lane(root, "news")
    fetches = marks(row(news, "fetch"), "run")
    assert fetched_before <= len(fetches) <= fetched_after and len(fetches) >= 1
    assert all(has_class(m, "new") for m in fetches)
    # The notification: its arrival, and its handler's run.
    note_row = row(news, "notification")
    [arrival] = marks(note_row, "notification")
    assert "notification" in title(arrival)
    assert len(marks(note_row, "run")) == len(d.runs("news-note")) == 1
    # The use.
    assert len([u for u in news.iter(SVG + "line") if has_class(u, "use")]) == 1
    # The download, and the events handler it ran.
    dl = lane(root, "dl")
    [xfer] = marks(row(dl, "transfer"), "transfer")
    assert tid in title(xfer) and "completed" in title(xfer)
    assert len(marks(row(dl, "transfer"), "run")) == len(d.runs("dl"))
    # The window that fetched news, and the conditions as drowsed kept them: on AC, then
    # unplugged with the battery at 15 %.
    windows = marks(lane(root, "windows"), "window")
    assert any("news" in title(w) for w in windows)
    states = [title(m) for m in marks(lane(root, "conditions"), "state")]
    assert states[0].startswith("ac power 80 %") and states[-1].startswith("battery power 15 %"), states
    render_png(svg, d.base / "timeline.png")
