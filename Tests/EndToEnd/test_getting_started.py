"""docs/getting-started.md, "From a checkout", run as written: drowsed with deploy/local.toml and
the example apps of deploy/apps.d (copied, with the apps' scripts, into the test's folder, so
what they write lands there and not in deploy/local/), then every command of the page's second
terminal, one by one, with the page's PATH and DROWSE_SOCKET. Each must exit 0, and where the
page quotes what a command prints ("weather: new-data (exit status 0)") it must print that.

The page's stand-ins are filled in: `drowse push ...` is the push above it, ID and t3 are the
transfer and the task the lines before them made, and the file the page downloads from the
internet comes from a loopback nginx. What cannot run here is left out, each with its reason
(SKIPPED below): lines with a placeholder the reader fills in (`…`, URL, FILE, HEX), a script of
the reader's, and the scheduler-trace pair, which restarts drowsed. The board part of the page (the .deb, systemd) runs on the board image, not here.
The loopback broker's port is a free one instead of 18830, which another run-local may hold.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from drowse_e2e import BIN_DIR, MOSQUITTO, REPO, Broker, free_port, stop_process, wait_until

PAGE = REPO / "docs" / "getting-started.md"

# A line matching one of these is not run: why.
SKIPPED = {
    r"…|\b(URL|FILE|HEX)\b": "a placeholder the reader fills in",
    r"^drowsed --scheduler-trace|--replay": "restarts drowsed with a trace (test_trace_replay.py runs that)",
    r"\./sync\.sh": "a script of the reader's",
    r"^export ": "the environment, set for every line here",
}
README_URL = "https://deb.debian.org/debian/README"


def second_terminal_lines() -> list[str]:
    """The commands of the page's block that starts with `export PATH=$PWD/.build/release…`."""
    text = PAGE.read_text()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        if block.startswith("export PATH=$PWD/.build/release"):
            return [l for l in block.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    raise AssertionError("docs/getting-started.md has no block starting with export PATH=$PWD/.build/release")


def skipped(line: str) -> str | None:
    return next((why for pattern, why in SKIPPED.items() if re.search(pattern, line)), None)


def quoted_output(line: str) -> str | None:
    """What the line's comment says the command prints: `# … "app: text"`."""
    m = re.search(r"#.*?\"([a-z-]+: [^\"]+)\"", line)
    return m.group(1) if m else None


@pytest.fixture
def checkout_copy(tmp_path):
    """deploy/ as run-local.sh uses it, in tmp_path: local.toml, apps.d, apps and scenarios, with
    the Sources and the build the example apps look for beside it."""
    root = tmp_path / "checkout"
    deploy = root / "deploy"
    deploy.mkdir(parents=True)
    for name in ("apps.d", "apps"):
        shutil.copytree(REPO / "deploy" / name, deploy / name, symlinks=True)
    (deploy / "scenarios").symlink_to(REPO / "deploy" / "scenarios")
    (root / "Sources").symlink_to(REPO / "Sources")
    (root / ".build").mkdir()
    (root / ".build" / "release").symlink_to(BIN_DIR)   # the page's PATH, and where run.sh looks
    return root


def test_the_commands_of_getting_started_run_as_written(checkout_copy, tmp_path, nginx):
    if not os.path.exists(MOSQUITTO):
        pytest.skip("mosquitto is not installed")
    if not (BIN_DIR / "drowse-resident-example").exists():
        pytest.skip(f"no drowse-resident-example in {BIN_DIR} (swift build)")
    lines = second_terminal_lines()
    assert len(lines) > 20, lines
    broker = Broker(tmp_path / "mqtt")
    broker.start()
    deploy = checkout_copy / "deploy"
    config = (REPO / "deploy" / "local.toml").read_text()
    assert "18830" in config
    (deploy / "local.toml").write_text(config.replace("18830", str(broker.port)))
    env = {**os.environ, "PATH": f"{checkout_copy}/.build/release:{os.environ['PATH']}",
           "DROWSE_SOCKET": str(deploy / "local" / "drowse.sock")}
    env.pop("DROWSE_CONFIG", None)
    daemon_log = open(tmp_path / "drowsed.log", "wb")
    daemon = subprocess.Popen([str(BIN_DIR / "drowsed"), "--config", str(deploy / "local.toml")], cwd=checkout_copy,
                              env=env, stdout=daemon_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: subprocess.run(["drowse", "status"], env=env, capture_output=True).returncode == 0,
                   20, what="drowsed to answer")
        # The page's lines come after run-local.sh has connected and the resident apps run.
        def connected() -> bool:
            r = subprocess.run(["drowse", "status", "--json"], env=env, capture_output=True, text=True)
            return r.returncode == 0 and json.loads(r.stdout)["mqtt"]["subscribed"]
        wait_until(connected, 20, what="drowsed to subscribe on the broker")
        # The page's own stand-ins: `drowse push ...` repeats the push above it; the file from the
        # internet comes from a loopback nginx; ID and t3 are what the lines before them printed.
        url, _, _ = nginx.add_file("README", 10_000)
        push = re.search(r"^(drowse push --broker \S+ --device \S+ --app \S+) --silent", "\n".join(lines), re.M).group(1)
        ids = {}
        ran, left_out, failures = [], [], []
        for line in lines:
            why = skipped(line)
            if why:
                left_out.append(f"{line.split('#')[0].strip()}  ({why})")
                continue
            command = line.split(" #")[0].replace("drowse push ...", push).replace(README_URL, url)
            command = command.replace("18830", str(broker.port))
            command = re.sub(r"\bID\b", ids.get("transfer", "ID"), command)
            command = re.sub(r"\bt3\b", ids.get("task", "t3"), command)
            r = subprocess.run(["sh", "-c", command], cwd=checkout_copy, env=env, capture_output=True, text=True,
                               timeout=180)
            if command.startswith("drowse transfer download") and r.returncode == 0:
                ids["transfer"] = r.stdout.strip()
            if command.startswith("drowse task begin") and r.returncode == 0:
                ids["task"] = r.stdout.strip()
            ran.append(line)
            expected = quoted_output(line)
            if r.returncode != 0:
                failures.append(f"{command}\n  exit {r.returncode}: {r.stderr.strip()[-500:]}")
            elif expected and expected not in r.stdout:
                failures.append(f"{command}\n  printed {r.stdout.strip()[-300:]!r}, the page says {expected!r}")
        print(f"ran {len(ran)} lines of docs/getting-started.md; left out:\n  " + "\n  ".join(left_out))
        assert not failures, "\n".join(failures)
        assert len(ran) >= 25, ran
        assert daemon.poll() is None, (tmp_path / "drowsed.log").read_text()[-3000:]
        # What the page says the example apps wrote.
        assert (deploy / "local" / "apps" / "weather" / "observations.log").exists()
    finally:
        stop_process(daemon)
        daemon_log.close()
        broker.stop()
