"""package-updater: the transfers handler.

Standard input: {"event": "transfers", "app", "session", "transfers": [{"id", "state", "url",
"location", …}]}. Each completed .deb (verified against its sha256 by drowsed) is installed
with `dpkg -i` inside a background task (`drowse task run`, so the install is given its own
time and is not cut at this handler's deadline), unless that version is installed already:
a session delivered again after a power cut installs nothing twice. The installed version is
then reported (`drowse report`), which the device publishes in its fleet status.
"""
import json
import os
import subprocess
import sys

SOCKET = os.environ["DROWSE_SOCKET"]
APP = os.environ["DROWSE_APP"]


def drowse(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["drowse", "--socket", SOCKET, *args], capture_output=True, text=True, timeout=timeout)


def field(deb: str, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", deb, name], capture_output=True, text=True, check=True).stdout.strip()


def installed(package: str) -> str | None:
    r = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Version}", package], capture_output=True, text=True)
    status, _, version = r.stdout.partition(" ")
    return version.strip() if r.returncode == 0 and status.startswith("ii") else None


def main() -> int:
    doc = json.load(sys.stdin)
    failed = False
    for t in doc.get("transfers", []):
        loc = t.get("location")
        if t.get("state") != "completed" or not loc:
            print(f"package-updater: {t.get('url')} {t.get('state')}: {t.get('reason')}")
            failed = failed or t.get("state") == "failed"
            continue
        package, version = field(loc, "Package"), field(loc, "Version")
        if installed(package) == version:
            print(f"package-updater: {package} {version} is installed already")
        else:
            r = drowse("task", "run", "--app", APP, "--name", f"install {package}", "--", "dpkg", "-i", loc)
            if r.returncode != 0:
                print(f"package-updater: dpkg -i {package} {version} failed ({r.returncode}): {r.stdout}{r.stderr}")
                failed = True
                continue
            print(f"package-updater: installed {package} {version}")
        now = installed(package)
        r = drowse("report", "--app", APP, f"package={package}", f"version={now or 'none'}")
        if r.returncode != 0:
            print(f"package-updater: report failed: {r.stderr.strip()}")
    return 1 if failed else 0


sys.exit(main())
