"""Shell handlers finish their work with `drowse` alone (no jq, no curl): a notification handler
reads the payload's fields with `drowse payload`, begins a background task and queues a download
for its own app (drowsed's DROWSE_APP stands in for --app), and the app's events handler finds the
downloaded file in the transfers event the same way. The shell example that docs/getting-started.md
shows, deploy/apps/shell, runs as shipped, under the handlers' fixed PATH."""
import json
import shutil
import subprocess

from drowse_e2e import BIN_DIR, DROWSE, REPO, notify_topic, sha256_file, wait_until


def test_a_shell_notification_handler_queues_a_download_and_its_events_handler_gets_the_file(broker, nginx, make_drowse):
    d = make_drowse(broker=broker, handler_deadline="10s")
    out = d.out_dir("shell")
    url, digest, _ = nginx.add_file("report.bin", 300_000)
    notified = d.write_script("notified.sh", f"""
        #!/bin/sh
        set -e
        payload=$(cat)
        url=$(printf '%s' "$payload" | {DROWSE} payload data.url)
        label=$(printf '%s' "$payload" | {DROWSE} payload data.label --default unlabelled)
        task=$({DROWSE} task begin --name fetch-report)
        id=$({DROWSE} transfer download "$url" --session reports --json | {DROWSE} payload id)
        {DROWSE} task end "$task" > /dev/null
        printf '%s %s %s\\n' "$label" "$task" "$id" > {out}/notified.tmp
        mv {out}/notified.tmp {out}/notified
        """)
    events = d.write_script("events.sh", f"""
        #!/bin/sh
        set -e
        payload=$(cat)
        # The inbox file is the handler's to take while it runs (drowsed removes it afterwards).
        cp "$(printf '%s' "$payload" | {DROWSE} payload transfers.0.location)" {out}/report.bin
        printf '%s' "$payload" | {DROWSE} payload session transfers.0.state > {out}/events.tmp
        mv {out}/events.tmp {out}/events
        """)
    d.add_app("shell", notification=[str(notified)], events=[str(events)])
    d.start()
    broker.wait_subscribed(notify_topic("shell"))
    note = {"aps": {"content-available": 1}, "id": "n1", "data": {"url": url}}
    broker.publish(notify_topic("shell"), json.dumps(note).encode())

    wait_until(lambda: (out / "notified").exists(), 15, what="the notification handler")
    label, task, transfer = (out / "notified").read_text().split()
    assert label == "unlabelled" and task and len(transfer) == 16
    wait_until(lambda: (out / "events").exists(), 30, what="the events handler")
    session, state = (out / "events").read_text().splitlines()
    assert (session, state) == ("reports", "completed")
    assert sha256_file(out / "report.bin") == digest
    shown = d.json("transfer", "show", transfer)
    assert shown["app"] == "shell" and shown["session"] == "reports"
    # The task the handler began is over.
    assert d.json("task", "show", "--app", "shell", task)["state"] == "ended"


def test_drowse_payload_prints_fields_and_fails_on_a_missing_one():
    doc = json.dumps({"aps": {"content-available": 1}, "data": {"n": 3, "items": [{"url": "http://x/\u001b[2J"}], "ok": True, "z": None}})

    def payload(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(DROWSE), "payload", *args], input=doc, capture_output=True, text=True, timeout=10)

    r = payload("data.n", "aps.content-available", "data.ok", "data.z", "data.items.0", "data.items.0.url")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["3", "1", "true", "null", '{"url":"http://x/\\u001b[2J"}', "http://x/\\u{1B}[2J"], r.stdout
    missing = payload("data.nope")
    assert missing.returncode != 0 and "data.nope" in missing.stderr
    assert payload("data.items.1", "--default", "-").stdout == "-\n"
    # Not JSON: an error, not a crash.
    bad = subprocess.run([str(DROWSE), "payload", "a"], input="{oops", capture_output=True, text=True, timeout=10)
    assert bad.returncode != 0 and "not JSON" in bad.stderr
    # --app is needed outside a handler (no DROWSE_APP).
    env = {k: v for k, v in __import__("os").environ.items() if k != "DROWSE_APP"}
    r = subprocess.run([str(DROWSE), "task", "begin"], capture_output=True, text=True, timeout=10, env=env)
    assert r.returncode != 0 and "--app" in r.stderr


def test_the_shipped_shell_example_finds_the_checkouts_drowse_and_copies_the_download(broker, nginx, make_drowse, workdir):
    """deploy/apps/shell and deploy/apps.d/shell.toml as shipped, laid out as in a checkout (the
    scripts under deploy/apps/shell, the build in .build/release), as deploy/run-local.sh runs
    them: drowse is not on the handlers' PATH there, and the scripts find the checkout's."""
    checkout = workdir / "checkout"
    scripts = checkout / "deploy" / "apps" / "shell"
    scripts.mkdir(parents=True)
    for name in ("on-notify.sh", "on-transfers.sh"):
        shutil.copy2(REPO / "deploy" / "apps" / "shell" / name, scripts / name)
    (checkout / ".build").mkdir()
    (checkout / ".build" / "release").symlink_to(BIN_DIR)
    d = make_drowse(broker=broker, handler_deadline="10s")
    app_file = (REPO / "deploy" / "apps.d" / "shell.toml").read_text()
    assert 'working_directory = "../apps/shell"' in app_file
    d.add_app("shell", raw=app_file.replace('"../apps/shell"', json.dumps(str(scripts))))
    url, digest, _ = nginx.add_file("firmware.bin", 200_000)
    d.start()
    broker.wait_subscribed(notify_topic("shell"))
    # What `drowse push ... --app shell --silent -d url=URL` publishes.
    broker.publish(notify_topic("shell"), json.dumps({"aps": {"content-available": 1}, "id": "s1", "url": url}).encode())

    out = checkout / "deploy" / "local" / "apps" / "shell"
    copied = wait_until(lambda: [p for p in out.glob("*-firmware.bin")] if out.is_dir() else None, 30,
                        what="the events handler to copy the download")
    assert len(copied) == 1 and sha256_file(copied[0]) == digest
    # The events handler's run is recorded once it has exited, a moment after its copy.
    runs = wait_until(lambda: (lambda h: h if len(h) == 2 else None)(d.app("shell")["history"]), 15,
                      what="both runs recorded")
    assert sorted(h["event"] for h in runs) == ["notification", "transfers"], runs
    assert all(h["result"] == "new-data" for h in runs), runs
    # A notification without a url is "no data", not a failure.
    broker.publish(notify_topic("shell"), json.dumps({"aps": {"content-available": 1}, "id": "s2"}).encode())
    wait_until(lambda: len(d.app("shell")["history"]) == 3, 15, what="the second notification's run")
    assert d.app("shell")["history"][0]["result"] == "no-data"
