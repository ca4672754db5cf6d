"""package-updater: the notification handler.

The payload (already checked by drowsed: signed with the app's key, not expired, not a
duplicate) names a package: {"url": "https://…/name_version_arch.deb", "sha256": "<64 hex>"}.
It is queued as a discretionary download in the "packages" session, with its sha256, so it
waits for power and an unmetered network, survives reboots and power cuts, and reaches
on-transfers.py only whole and verified. Exit 0: queued; 100: nothing to do; 1: refused.
"""
import json
import os
import re
import subprocess
import sys


def main() -> int:
    try:
        note = json.load(sys.stdin)
    except ValueError as e:
        print(f"package-updater: payload is not JSON: {e}")
        return 1
    url, digest = note.get("url"), note.get("sha256")
    if url is None and digest is None:
        print("package-updater: no package named, nothing to do")
        return 100
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s]+\.deb", url):
        print("package-updater: 'url' must be an http(s) URL of a .deb")
        return 1
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
        print("package-updater: 'sha256' must be 64 hex digits")
        return 1
    app = os.environ["DROWSE_APP"]
    r = subprocess.run(["drowse", "--socket", os.environ["DROWSE_SOCKET"], "transfer", "download", url,
                        "--app", app, "--session", "packages", "--sha256", digest, "--discretionary"],
                       capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        print(f"package-updater: could not queue {url}: {r.stderr.strip()}")
        return 1
    print(f"package-updater: queued {url} as transfer {r.stdout.strip()}")
    return 0


sys.exit(main())
