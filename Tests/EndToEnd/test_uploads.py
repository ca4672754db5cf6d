"""Background uploads (`drowse transfer upload`) against the test servers in upload_servers.py:
tus 1.0.0, the IETF resumable-upload draft (current interop 8, and 3 = iOS 17's draft -01) and plain PUT.

Requirement under test: "Before every resume ask the server for the offset; never resend from a guess.
An upload survives daemon kills like a download does."
"""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request

import pytest

from drowse_e2e import sha256_file, wait_until, write_random_file
from upload_servers import UploadServer, data_requests, interrupted, resume_problems

MiB = 1 << 20

# --protocol value -> (server kind, server interop versions, the interop version the client must use)
IETF_FLAVOURS = {
    "ietf": ("ietf", (8,), 8),
    "ietf-3": ("ietf", (3,), 3),
}


# ----------------------------------------------------------------------------- fixtures and helpers

@pytest.fixture
def make_server(workdir, request):
    """Factory: make_server(kind, **UploadServer kwargs) -> a started UploadServer on 127.0.0.1."""
    made: list[UploadServer] = []

    def make(kind: str, **kw) -> UploadServer:
        s = UploadServer(kind, **kw).start()
        made.append(s)
        return s

    yield make
    failed = any(getattr(getattr(request.node, "rep_" + w, None), "failed", False) for w in ("setup", "call"))
    for i, s in enumerate(made):
        s.stop()
        text = describe(s)
        (workdir / f"upload-server-{i}-{s.kind}.log").write_text(text + "\n")
        if failed:
            print(f"\n----- {s.kind} upload server requests -----\n{text}")


def describe(s: UploadServer) -> str:
    lines = []
    for r in s.log():
        h = r["headers"]
        keys = [k for k in ("upload-offset", "upload-length", "upload-complete", "upload-incomplete",
                            "upload-draft-interop-version", "tus-resumable", "content-type", "upload-checksum")
                if k in h]
        lines.append(f"#{r['seq']} {r['method']} {r['path']} -> {r['status']} {r['outcome']} body={r['body_len']}"
                     f" offset_before={r['offset_before']} offset_after={r['offset_after']} "
                     + " ".join(f"{k}={h[k]!r}" for k in keys)
                     + (f" checksum={r['checksum']}" if "checksum" in r else ""))
    for u in s.uploads.values():
        lines.append(f"upload {u.protocol} {u.path} v={u.version} offset={u.offset} length={u.length} "
                     f"complete={u.complete} deleted={u.deleted} sha256={u.sha256()}")
    return "\n".join(lines)


def make_file(d, name: str, size: int) -> tuple:
    path = d.base / "outbox" / name
    digest = write_random_file(path, size)
    return path, digest


def start_upload(d, path, url: str, app: str = "up", protocol: str | None = None) -> str:
    args = ["transfer", "upload", str(path), url, "--app", app]
    if protocol is not None:
        args += ["--protocol", protocol]
    r = d.cli_ok(*args)
    lines = [l.strip() for l in r.stdout.splitlines() if l.strip()]
    assert len(lines) == 1, f"`drowse transfer upload` should print the id alone: {r.stdout!r}"
    return lines[0]


def wait_transfer(d, tid: str, timeout: str = "60s"):
    return d.cli("transfer", "wait", tid, "--timeout", timeout, timeout=90)


def assert_completed(d, tid: str, size: int, server: UploadServer | None = None) -> dict:
    r = wait_transfer(d, tid)
    extra = f"\n{describe(server)}" if server is not None else ""
    assert r.returncode == 0, (f"transfer wait exited {r.returncode}: {r.stdout} {r.stderr}\n"
                               f"{json.dumps(d.transfer(tid), indent=1)}{extra}")
    t = d.transfer(tid)
    assert t["id"] == tid
    assert t["kind"] == "upload", t
    assert t["state"] == "completed", t
    assert t["bytes_done"] == size, t
    assert t["bytes_total"] == size, t
    return t


def one_completed(server: UploadServer, protocol: str, digest: str, size: int):
    done = server.completed(protocol)
    assert len(done) == 1, f"expected one completed {protocol} upload on the server:\n{describe(server)}"
    u = done[0]
    assert u.offset == size, describe(server)
    assert u.sha256() == digest, f"the server stored different bytes:\n{describe(server)}"
    return u


def creations(server: UploadServer, upload_id: str) -> list[dict]:
    return [r for r in server.log() if r.get("upload") == upload_id and r["method"] in ("POST", "PUT")]


def patches(server: UploadServer, upload_id: str) -> list[dict]:
    return [r for r in server.log() if r.get("upload") == upload_id and r["method"] == "PATCH"]


def http_status(method: str, url: str, headers: dict) -> int:
    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def flavour_server(make_server, protocol: str, **kw) -> tuple[UploadServer, str, int | None]:
    """(server, upload URL, ietf interop version or None) for a --protocol value."""
    if protocol == "tus":
        s = make_server("tus", **kw)
        return s, s.url("/files/"), None
    if protocol == "put":
        s = make_server("put", **kw)
        return s, s.url("/put/payload.bin"), None
    kind, versions, v = IETF_FLAVOURS[protocol]
    s = make_server(kind, versions=versions, **kw)
    return s, s.url("/upload"), v


def check_ietf_requests(server: UploadServer, upload_id: str, v: int) -> None:
    on = [r for r in server.log() if r.get("upload") == upload_id]
    for r in on:
        assert r["headers"].get("upload-draft-interop-version") == str(v), \
            f"#{r['seq']} {r['method']} lacks Upload-Draft-Interop-Version: {v}:\n{describe(server)}"
    flag, done_value = ("upload-incomplete", "?0") if v == 3 else ("upload-complete", "?1")
    last = [r for r in on if r["method"] in ("POST", "PUT", "PATCH") and r["status"] in (200, 201, 204)][-1]
    assert last["headers"].get(flag) == done_value, \
        f"the request that completed the upload should carry {flag}: {done_value}:\n{describe(server)}"
    if v >= 6:
        for r in on:
            if r["method"] == "PATCH":
                assert r["headers"].get("content-type") == "application/partial-upload", describe(server)


# ----------------------------------------------------------------------------- each protocol completes

@pytest.mark.parametrize("relative", [False, True], ids=["absolute-location", "relative-location"])
def test_tus_upload_completes_with_checksums(make_drowse, make_server, relative):
    s = make_server("tus", relative_location=relative)
    d = make_drowse()
    d.add_app("up", events=d.recorder("up"))
    d.start()
    size = 4 * MiB + 17
    path, digest = make_file(d, "tus.bin", size)

    tid = start_upload(d, path, s.url("/files/"), protocol="tus")
    t = assert_completed(d, tid, size, s)
    assert t.get("protocol") == "tus", t
    u = one_completed(s, "tus", digest, size)

    [post] = creations(s, u.id)
    assert post["method"] == "POST" and post["path"] == "/files/", describe(s)
    assert post["headers"].get("upload-length") == str(size), describe(s)
    for r in s.log():
        if r["method"] != "OPTIONS":
            assert r["headers"].get("tus-resumable") == "1.0.0", f"#{r['seq']} lacks Tus-Resumable:\n{describe(s)}"
    ps = patches(s, u.id)
    assert ps, describe(s)
    for r in ps:
        assert r["headers"].get("content-type") == "application/offset+octet-stream", describe(s)
        # The server offers the checksum extension with sha1: every PATCH should be verifiable.
        assert r.get("checksum") == "ok", f"PATCH #{r['seq']} without a valid Upload-Checksum:\n{describe(s)}"
    assert sha256_file(path) == digest, "the source file changed"

    [run] = d.wait_runs("up", 1, timeout=15)
    assert run.env.get("DROWSE_EVENT") == "transfers"
    [mine] = [x for x in run.json()["transfers"] if x["id"] == tid]
    assert mine["state"] == "completed", mine


@pytest.mark.parametrize("protocol", ["ietf", "ietf-3"])
def test_ietf_upload_completes(make_drowse, make_server, protocol):
    s, url, v = flavour_server(make_server, protocol)
    d = make_drowse()
    d.add_app("up")
    d.start()
    size = 3 * MiB + 5
    path, digest = make_file(d, "ietf.bin", size)

    tid = start_upload(d, path, url, protocol=protocol)
    t = assert_completed(d, tid, size, s)
    assert t.get("protocol") == protocol, t
    u = one_completed(s, "ietf", digest, size)
    assert u.version == v, describe(s)
    check_ietf_requests(s, u.id, v)
    # A HEAD of the finished upload reports it complete (the server kept the resource).
    h = {"Upload-Draft-Interop-Version": str(v)}
    assert http_status("HEAD", s.url(u.path), h) == 204


def test_put_upload_completes(make_drowse, make_server):
    s = make_server("put")
    d = make_drowse()
    d.add_app("up")
    d.start()
    size = 2 * MiB + 3
    path, digest = make_file(d, "put.bin", size)

    tid = start_upload(d, path, s.url("/put/payload.bin"), protocol="put")
    t = assert_completed(d, tid, size, s)
    assert t.get("protocol") == "put", t
    u = one_completed(s, "put", digest, size)
    assert u.path == "/put/payload.bin"
    puts = [r for r in s.log() if r["method"] == "PUT"]
    assert len(puts) == 1 and puts[0]["body_len"] == size, describe(s)


# ----------------------------------------------------------------------------- resuming

@pytest.mark.parametrize("protocol,checksums", [("tus", False), ("tus", True), ("ietf", None), ("ietf-3", None)],
                         ids=["tus", "tus-checksum", "ietf", "ietf-3"])
def test_resume_after_dropped_connection_asks_server_for_offset(make_drowse, make_server, protocol, checksums):
    kw = {"tus_checksum": checksums} if protocol == "tus" else {}
    s, url, v = flavour_server(make_server, protocol, **kw)
    cut = 2 * MiB
    s.add_fault("drop", after=cut, methods=("PATCH",))
    d = make_drowse()
    d.add_app("up")
    d.start()
    size = 6 * MiB + 11
    path, digest = make_file(d, "drop.bin", size)

    tid = start_upload(d, path, url, protocol=protocol)
    assert_completed(d, tid, size, s)
    u = one_completed(s, "tus" if protocol == "tus" else "ietf", digest, size)

    ps = patches(s, u.id)
    dropped = [r for r in ps if r["outcome"] == "dropped"]
    assert len(dropped) == 1, describe(s)
    assert resume_problems(s.log(), u.id) == [], describe(s)
    assert len(creations(s, u.id)) == 1, f"the upload was created again instead of resumed:\n{describe(s)}"
    heads = [r for r in s.log() if r.get("upload") == u.id and r["method"] == "HEAD" and r["seq"] > dropped[0]["seq"]]
    assert heads, describe(s)
    resumed = [r for r in ps if r["seq"] > dropped[0]["seq"]][0]
    # Without per-PATCH checksums the server keeps the bytes that arrived, and the client must use them.
    expected = 0 if checksums else cut
    assert resumed["headers"].get("upload-offset") == str(expected), describe(s)
    if v is not None:
        check_ietf_requests(s, u.id, v)


@pytest.mark.parametrize("protocol,fault", [("tus", "drop"), ("ietf", "drop"), ("ietf-3", "drop"),
                                            ("tus", "short_ack")],
                         ids=["tus-lost-tail", "ietf-lost-tail", "ietf-3-lost-tail", "tus-short-ack"])
def test_server_side_data_loss_resends_from_reported_offset(make_drowse, make_server, protocol, fault):
    kw = {"tus_checksum": False} if protocol == "tus" else {}
    s, url, v = flavour_server(make_server, protocol, **kw)
    kept = 1 * MiB
    if fault == "drop":
        # 3 MiB arrive, then the connection breaks and the server keeps only 1 MiB of them.
        s.add_fault("drop", after=3 * MiB, keep=kept, methods=("PATCH",))
    else:
        # The whole PATCH arrives, but the server stores (and acknowledges) only 1 MiB of it.
        s.add_fault("short_ack", keep=kept, methods=("PATCH",))
    d = make_drowse()
    d.add_app("up")
    d.start()
    size = 5 * MiB + 1
    path, digest = make_file(d, "loss.bin", size)

    tid = start_upload(d, path, url, protocol=protocol)
    assert_completed(d, tid, size, s)
    u = one_completed(s, "tus" if protocol == "tus" else "ietf", digest, size)
    assert resume_problems(s.log(), u.id) == [], describe(s)
    ps = patches(s, u.id)
    first = ps[0]
    assert first["body_len"] >= (3 * MiB if fault == "drop" else size), describe(s)
    later = [r for r in ps if r["seq"] > first["seq"]]
    assert later, describe(s)
    # The next data the client sent started at what the server reported, not at what it had sent.
    good = [r for r in later if r["status"] in (200, 204)]
    assert good and good[0]["headers"].get("upload-offset") == str(kept), describe(s)
    assert not [r for r in later if r["status"] == 409], f"the client guessed an offset:\n{describe(s)}"


def test_tus_checksum_mismatch_is_resent(make_drowse, make_server):
    s = make_server("tus")
    s.add_fault("corrupt", methods=("PATCH",))
    d = make_drowse()
    d.add_app("up")
    d.start()
    size = 2 * MiB + 9
    path, digest = make_file(d, "corrupt.bin", size)

    tid = start_upload(d, path, s.url("/files/"), protocol="tus")
    assert_completed(d, tid, size, s)
    u = one_completed(s, "tus", digest, size)
    ps = patches(s, u.id)
    assert ps[0]["status"] == 460, f"the first PATCH should have been rejected as corrupt:\n{describe(s)}"
    assert resume_problems(s.log(), u.id) == [], describe(s)


# ----------------------------------------------------------------------------- protocol discovery

@pytest.mark.parametrize("kind", ["tus", "ietf", "put"])
def test_auto_picks_the_servers_protocol(make_drowse, make_server, kind):
    s = make_server(kind)
    url = {"tus": s.url("/files/"), "ietf": s.url("/upload"), "put": s.url("/put/auto.bin")}[kind]
    d = make_drowse()
    d.add_app("up")
    d.start()
    size = 1 * MiB + 77
    path, digest = make_file(d, "auto.bin", size)

    tid = start_upload(d, path, url, protocol="auto")
    t = assert_completed(d, tid, size, s)
    expected = {"tus": "tus", "ietf": "ietf", "put": "put"}[kind]
    u = one_completed(s, expected, digest, size)
    if kind == "ietf":
        check_ietf_requests(s, u.id, u.version)
    if kind != "put":
        # The file went through the resumable protocol, not a plain PUT/POST of the whole body.
        assert not s.completed("plain"), describe(s)
        assert not [r for r in s.log() if r["method"] == "PUT" and r["body_len"]], describe(s)
    # `drowse transfer show` names the protocol auto resolved to.
    assert t.get("protocol") == expected, t


def test_auto_on_ios17_draft_server_stays_resumable(make_drowse, make_server):
    """A server that only speaks iOS 17's draft (interop 3) answers interop 8 with 400
    (`Upload-Draft-Interop-Version: 3`); `auto` should still end up resumable (ietf-3), not a plain PUT."""
    s = make_server("ietf", versions=(3,))
    d = make_drowse()
    d.add_app("up")
    d.start()
    size = 1 * MiB + 5
    path, digest = make_file(d, "ios17.bin", size)

    tid = start_upload(d, path, s.url("/upload"), protocol="auto")
    t = assert_completed(d, tid, size, s)
    u = one_completed(s, "ietf", digest, size)
    check_ietf_requests(s, u.id, 3)
    assert t.get("protocol") == "ietf-3", t


# ----------------------------------------------------------------------------- cancel

@pytest.mark.parametrize("protocol", ["tus", "ietf"])
def test_cancel_deletes_the_server_side_upload(make_drowse, make_server, protocol):
    s, url, v = flavour_server(make_server, protocol)
    s.set_read_rate(512 * 1024)
    d = make_drowse()
    d.add_app("up")
    d.start()
    size = 6 * MiB
    path, _ = make_file(d, "cancel.bin", size)

    tid = start_upload(d, path, url, protocol=protocol)
    wait_until(lambda: s.bytes_seen("PATCH") >= 256 * 1024, 20, what="the daemon sending data")
    d.cli_ok("transfer", "cancel", tid)
    r = wait_transfer(d, tid, timeout="30s")
    assert r.returncode == 1, f"transfer wait exited {r.returncode}: {r.stdout} {r.stderr}"
    assert d.transfer(tid)["state"] == "cancelled"

    [u] = s.resumable_uploads()
    wait_until(lambda: [x for x in s.log("DELETE") if x.get("upload") == u.id], 15, what="a DELETE of the upload")
    [delete] = [x for x in s.log("DELETE") if x.get("upload") == u.id]
    assert delete["status"] == 204, describe(s)
    if protocol == "tus":
        assert delete["headers"].get("tus-resumable") == "1.0.0", describe(s)
        assert http_status("HEAD", s.url(u.path), {"Tus-Resumable": "1.0.0"}) == 404
    else:
        assert delete["headers"].get("upload-draft-interop-version") == str(v), describe(s)
        assert http_status("HEAD", s.url(u.path), {"Upload-Draft-Interop-Version": str(v)}) == 404
    assert u.deleted and not u.complete
    time.sleep(1.0)
    assert not [x for x in s.log() if x["seq"] > delete["seq"] and x["method"] in ("PATCH", "POST", "PUT")], \
        f"the daemon kept sending after the cancel:\n{describe(s)}"


# ----------------------------------------------------------------------------- daemon killed mid-upload

@pytest.mark.parametrize("protocol,checksums", [("tus", False), ("tus", True), ("ietf", None), ("ietf-3", None),
                                                ("put", None)],
                         ids=["tus", "tus-checksum", "ietf", "ietf-3", "put"])
def test_kill9_mid_upload_then_restart_completes(make_drowse, make_server, protocol, checksums):
    s, url, v = flavour_server(make_server, protocol, **({"tus_checksum": checksums} if protocol == "tus" else {}))
    s.set_read_rate(1 * MiB)  # ~8 s for the file, so the daemon is certainly mid-body when killed
    d = make_drowse(extra_config='[transfers]\ncommit_interval = "200ms"')
    d.add_app("up")
    d.start()
    size = 8 * MiB + 3
    path, digest = make_file(d, "kill.bin", size)

    tid = start_upload(d, path, url, protocol=protocol)
    data_method = "PUT" if protocol == "put" else "PATCH"
    leads = []

    def progressed():
        # bytes_confirmed is the server-confirmed offset: it may lag, but never lead, what the server stored.
        done = d.transfer(tid).get("bytes_confirmed") or 0
        stored = s.received()
        if protocol != "put" and done > stored:
            leads.append((done, stored))
        return s.bytes_seen(data_method) >= 2 * MiB

    wait_until(progressed, 30, interval=0.1, what="2 MiB of the body at the server")
    assert not s.completed(), f"the upload finished before the kill; the test is too slow:\n{describe(s)}"
    d.stop(signal.SIGKILL)
    s.set_read_rate(None)
    d.start()
    assert_completed(d, tid, size, s)

    if protocol == "put":
        u = one_completed(s, "put", digest, size)
        puts = s.log("PUT")
        assert len(puts) >= 2 and interrupted(puts[0]) and puts[-1]["body_len"] == size, describe(s)
        return
    u = one_completed(s, "tus" if protocol == "tus" else "ietf", digest, size)
    assert len(creations(s, u.id)) == 1, f"the upload was created again instead of resumed:\n{describe(s)}"
    cut = [r for r in data_requests(s.log(), u.id) if interrupted(r)]
    assert cut, f"no interrupted request: the kill did not hit the body?\n{describe(s)}"
    assert resume_problems(s.log(), u.id) == [], describe(s)
    heads = [r for r in s.log("HEAD") if r.get("upload") == u.id and r["seq"] > cut[0]["seq"]]
    assert heads, f"no HEAD after the restart:\n{describe(s)}"
    resumed = [r for r in patches(s, u.id) if r["seq"] > heads[0]["seq"]]
    assert resumed, describe(s)
    if checksums:
        # The interrupted checksummed chunk was discarded; the daemon must keep checksumming after restart.
        for r in patches(s, u.id):
            assert r.get("checksum") == "ok" or interrupted(r), \
                f"PATCH #{r['seq']} without a valid Upload-Checksum (after the restart?):\n{describe(s)}"
    else:
        # The server kept the bytes that arrived before the kill: the resume starts there, not at 0.
        assert int(resumed[0]["headers"]["upload-offset"]) > 0, \
            f"the restarted daemon did not resume from the server's offset:\n{describe(s)}"
    if v is not None:
        check_ietf_requests(s, u.id, v)
    assert not leads, (f"bytes_confirmed ran ahead of the server-confirmed offset while uploading "
                       f"(bytes_done, server offset): {leads[:5]}")


# ----------------------------------------------------------------------------- tus servers in the wild

def test_tus_kill9_resumes_against_a_strict_server(make_drowse, make_server):
    """A tus server as some real ones are: its HEAD announces the upload's size as Content-Length, and
    it answers 400 to a HEAD of an upload created without `filetype` metadata. After a kill -9 the
    resume must complete on the same resource; while a PATCH runs, `bytes_done` moves and `location`
    names the resource."""
    s = make_server("tus", tus_checksum=False, tus_head_content_length=True,
                    tus_require_metadata=("filename", "filetype"))
    s.set_read_rate(1 * MiB)
    d = make_drowse(extra_config='[transfers]\ncommit_interval = "200ms"')
    d.add_app("up")
    d.start()
    size = 8 * MiB + 3
    path, digest = make_file(d, "strict.bin", size)
    tid = start_upload(d, path, s.url("/files/"), protocol="tus")
    seen = []

    def progressed():
        t = d.transfer(tid)
        seen.append(t)
        return s.bytes_seen("PATCH") >= 2 * MiB and t["bytes_done"] > 0

    wait_until(progressed, 30, interval=0.1, what="2 MiB of the PATCH at the server, shown in bytes_done")
    assert not s.completed(), describe(s)
    live = seen[-1]
    assert live["bytes_done"] > 0 and live["bytes_confirmed"] == 0, live  # one PATCH in flight, nothing confirmed
    resource = live["location"]
    assert resource and resource.startswith(s.url("/files/")), live
    d.stop(signal.SIGKILL)
    s.set_read_rate(None)
    d.start()
    assert_completed(d, tid, size, s)
    u = one_completed(s, "tus", digest, size)
    assert len(s.uploads) == 1, f"more than one resource on the server:\n{describe(s)}"
    assert resource.endswith(u.path), (resource, u.path)
    assert resume_problems(s.log(), u.id) == [], describe(s)


def test_tus_offset_refused_after_restart_starts_a_new_upload(make_drowse, make_server):
    """When the server refuses to tell the offset (a 4xx other than 404/410), the upload starts again
    on a new resource; the old one is deleted only after the new one exists."""
    s = make_server("tus", tus_checksum=False)
    s.set_read_rate(1 * MiB)
    d = make_drowse(extra_config='[transfers]\ncommit_interval = "200ms"')
    d.add_app("up")
    d.start()
    size = 4 * MiB
    path, digest = make_file(d, "refused.bin", size)
    tid = start_upload(d, path, s.url("/files/"), protocol="tus")
    wait_until(lambda: s.bytes_seen("PATCH") >= 1 * MiB, 30, interval=0.1, what="1 MiB at the server")
    d.stop(signal.SIGKILL)
    old = next(iter(s.uploads.values()))
    s.head_status = 400
    s.set_read_rate(None)
    d.start()
    assert_completed(d, tid, size, s)
    new = one_completed(s, "tus", digest, size)
    assert new.id != old.id
    wait_until(lambda: old.deleted, 10, what="the old upload to be deleted")
    log = s.log()
    created = next(r["seq"] for r in log if r["method"] == "POST" and r.get("upload") == new.id)
    deleted = next(r["seq"] for r in log if r["method"] == "DELETE" and r.get("upload") == old.id)
    assert deleted > created, f"the old upload was deleted before its replacement existed:\n{describe(s)}"


def test_content_type_reaches_tus_metadata_and_put(make_drowse, make_server):
    import base64
    tus = make_server("tus", tus_checksum=False, tus_require_metadata=("filename", "filetype"))
    put = make_server("put")
    d = make_drowse()
    d.add_app("up")
    d.start()
    path, digest = make_file(d, "photo.png", 64 * 1024)
    tid = d.cli_ok("transfer", "upload", str(path), tus.url("/files/"), "--app", "up", "--protocol", "tus",
                   "--content-type", "image/png").stdout.strip()
    assert_completed(d, tid, 64 * 1024, tus)
    u = one_completed(tus, "tus", digest, 64 * 1024)
    assert "filetype " + base64.b64encode(b"image/png").decode() in u.metadata, u.metadata
    assert d.transfer(tid)["content_type"] == "image/png"
    tid = d.cli_ok("transfer", "upload", str(path), put.url("/p/photo.png"), "--app", "up", "--protocol", "put",
                   "--content-type", "image/png").stdout.strip()
    assert_completed(d, tid, 64 * 1024, put)
    assert [r["headers"].get("content-type") for r in put.log("PUT")] == ["image/png"]
    r = d.cli("transfer", "upload", str(path), put.url("/p/x"), "--app", "up", "--content-type", "bad\ttype")
    assert r.returncode != 0 and "content_type" in r.stderr, r.stderr
