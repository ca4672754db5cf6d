"""docs/openapi.json against a real drowsed: schemathesis generates requests from the document
(valid ones, and ones that break its schemas) and checks every answer: no 5xx, a documented status
code and content type, and a body that matches its schema. It runs as root (an admin) and as
nobody (the user of one app), through a loopback TCP proxy run as that user, since drowsed tells
its callers apart by the socket's peer credentials.

drowsed runs in a network namespace of its own with only its loopback: a generated transfer URL
can reach nothing. The daemon must keep serving, and its RSS stays bounded over the run.

    DROWSE_SCHEMATHESIS_EXAMPLES=N   examples per operation and caller (default 100; CI runs the
                                     default, `deploy/test-api.sh` a long run)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from drowse_e2e import free_port, netns_unusable, wait_until

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCHEMA = REPO / "docs" / "openapi.json"
EXAMPLES = int(os.environ.get("DROWSE_SCHEMATHESIS_EXAMPLES", "100"))
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def schemathesis() -> str:
    found = os.environ.get("DROWSE_SCHEMATHESIS") or shutil.which("schemathesis")
    if not found:
        if os.environ.get("CI"):
            pytest.fail("schemathesis is not installed (deploy/test.sh installs it)")
        pytest.skip("schemathesis is not installed: run deploy/test.sh, or set DROWSE_SCHEMATHESIS")
    return found


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, timeout=30)


class Proxy:
    """unix_proxy.py as `uid`, on a free loopback port."""

    def __init__(self, socket_path: Path, uid: int | None):
        self.port = free_port()
        who = [] if uid is None else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        self.proc = subprocess.Popen([*who, sys.executable, str(HERE / "unix_proxy.py"), str(self.port), str(socket_path)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=5)


def fuzzed_schema(folder: Path) -> Path:
    """docs/openapi.json as fuzzed: the same, but a transfer's `wait` up to 2 s. The transfers
    this test makes retry for ever, so each request with a wait lasts that long: up to 60 s
    would outlast the request timeout below. Long waits are test_transfers.py's."""
    doc = json.loads(SCHEMA.read_text())
    for p in doc["paths"]["/v1/transfers/{transfer}"]["get"]["parameters"]:
        if p["name"] == "wait":
            p["schema"]["maximum"] = 2
    path = folder / "openapi-fuzzed.json"
    path.write_text(json.dumps(doc))
    return path


def run_schemathesis(binary: str, port: int, report: Path) -> dict:
    """One run; returns its counts from the JUnit report and the run's exit status."""
    r = subprocess.run(
        [binary, "run", str(fuzzed_schema(report.parent)), "--url", f"http://127.0.0.1:{port}", "--checks", CHECKS,
         "--max-examples", str(EXAMPLES), "--seed", "2026", "--request-timeout", "15", "--workers", "1",
         # The event stream stays open by design: nothing to check in one request.
         "--exclude-path", "/v1/apps/{app}/events",
         "--suppress-health-check", "all", "--no-color", "--report", "junit", "--report-junit-path", str(report)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
        cwd=report.parent)  # its example database (.schemathesis/) goes to the test's folder, not the checkout
    import xml.etree.ElementTree as ET
    suites = ET.parse(report).getroot()
    cases = list(suites.iter("testcase"))
    failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
    return {"rc": r.returncode, "operations": len(cases), "failed": failed, "output": r.stdout[-6000:] + r.stderr[-2000:]}


@pytest.mark.skipif(netns_unusable() is not None, reason=f"{netns_unusable()}; it also acts as nobody (setpriv)")
def test_the_daemon_answers_as_its_openapi_document_says(make_drowse, workdir):
    binary = schemathesis()
    ns = "drowse-api-" + uuid.uuid4().hex[:8]
    sh("ip", "netns", "add", ns)
    proxies: list[Proxy] = []
    try:
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        d = make_drowse(handler_deadline="2s")
        d.prefix = ["ip", "netns", "exec", ns]
        os.chmod(d.base, 0o755)  # nobody must reach the socket's folder
        # "weather" is the example app in docs/openapi.json; nobody runs it. "admin" runs as drowsed's user.
        d.add_app("weather", fetch=["/bin/true"], notification=["/bin/true"], user="nobody", working_directory="/")
        d.add_app("admin", fetch=["/bin/true"], minimum_interval="1h")
        # An app file drowsed refuses: root's listing holds its entry ("valid": false) too.
        (d.apps_dir / "broken.toml").write_text('id = "broken"\nno_such_key = 1\n')
        d.start()
        # Transfers to list and show: nothing listens on port 9 in the namespace, so they retry.
        for app in ("weather", "admin"):
            r = d.cli("transfer", "download", "http://127.0.0.1:9/file.bin", "--app", app, "--json")
            assert r.returncode == 0, r.stderr
        before = d.memory()["rss"]
        results = {}
        for name, uid in (("root", None), ("nobody", 65534)):
            proxy = Proxy(d.socket, uid)
            proxies.append(proxy)
            results[name] = run_schemathesis(binary, proxy.port, workdir / f"schemathesis-{name}.xml")
            assert d.proc.poll() is None, f"drowsed exited during the {name} run\n{d.stderr_text()[-3000:]}"
        after = d.memory()["rss"]
        summary = {k: {"operations": v["operations"], "failed": v["failed"], "rc": v["rc"]} for k, v in results.items()}
        print(f"schemathesis, {EXAMPLES} examples per operation: {json.dumps(summary)}; drowsed RSS {before} kB -> {after} kB")
        for name, res in results.items():
            print(f"--- {name}: schemathesis's summary\n" + res["output"][res["output"].rfind("SUMMARY"):])
        for name, res in results.items():
            assert res["operations"] >= 20, f"{name}: only {res['operations']} operations ran\n{res['output']}"
            assert not res["failed"] and res["rc"] == 0, f"{name}: {res['failed']}\n{res['output']}"
        # Bounded: what a run leaves behind is a few MB of caches, not one allocation per request.
        assert after - before < 16 * 1024, f"RSS grew from {before} kB to {after} kB"
        r = d.cli("status", "--json", timeout=5)
        assert r.returncode == 0 and json.loads(r.stdout)["apps"] == 2 and json.loads(r.stdout)["invalid_apps"] == 1
    finally:
        for p in proxies:
            p.stop()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
