"""kill -9 drowsed again and again while three downloads run.

docs/contract.md ("Transfers"): a transfer survives a crash of drowsed and resumes where it stopped.
docs/design.md ("Durability"): write → fdatasync → commit the offset; on restart cut the part file back to the
committed offset and resume with Range + If-Range; the file appears at its final path only once verified.

So after any number of SIGKILLs: every file is whole and has the right sha256, nothing (partial) ever
sits at a --to path before its transfer completed, and what a kill costs is bounded by what can arrive
between two commits: at most `rate × commit_interval + commit_bytes` bytes fetched twice per kill.
The second test kills drowsed in the one spot where everything is committed but the file is not yet
in place (while it checks the sha256): nothing should be fetched again.

Env: DROWSE_E2E_SEED  the seed for the kill moments (printed with the results), to replay a run.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sqlite3
import time
from pathlib import Path

import pytest

from drowse_e2e import DROWSED, NGINX, Nginx, sha256_file, wait_until

MiB = 1 << 20
SIZE = 64 * MiB
FILES = 3
RATE = "6m"                  # nginx limit_rate per connection ("m" = MiB): 64 MiB take ~11 s
RATE_BYTES = 6 * MiB
COMMIT_INTERVAL = 0.5        # [transfers] commit_interval = "500ms"
COMMIT_BYTES = 4 * MiB       # [transfers] commit_bytes
KILLS = 8
GAP = (0.3, 2.0)             # seconds between kills, drawn uniformly

# What one kill may cost one download: every byte that can arrive in one commit interval at the
# served rate, plus one commit_bytes' worth (the byte-triggered commit and in-flight data).
BOUND_PER_KILL = int(RATE_BYTES * COMMIT_INTERVAL) + COMMIT_BYTES


@pytest.fixture
def slow_nginx(workdir):
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed")
    n = Nginx(workdir / "nginx", slow_rate=RATE)
    n.start()
    yield n
    n.stop()


def mib(n: float) -> str:
    return f"{n / MiB:.2f} MiB"


def committed_offsets(state_dir: Path) -> dict[str, int]:
    """bytes_done per transfer id as committed in state.db (read-only; call while drowsed is dead)."""
    db = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True, timeout=5)
    try:
        return {tid: int(done or 0) for tid, done in db.execute("SELECT id, bytes_done FROM transfers")}
    finally:
        db.close()


def test_repeated_sigkill_during_downloads(slow_nginx, make_drowse, capsys):
    nginx = slow_nginx
    seed = int(os.environ.get("DROWSE_E2E_SEED") or time.time_ns() % 1_000_000)
    rng = random.Random(seed)

    d = make_drowse(extra_config=f'[transfers]\ncommit_interval = "{int(COMMIT_INTERVAL * 1000)}ms"\n'
                                 f'commit_bytes = {COMMIT_BYTES}')
    d.add_app("dl", events=d.recorder("dl"))
    d.start()

    downloads = d.base / "downloads"
    downloads.mkdir()
    files = []
    for i in range(FILES):
        name = f"kill{i}.bin"
        url, digest, _ = nginx.add_file(name, SIZE, slow=True)
        files.append({"name": name, "uri": f"/slow/{name}", "url": url, "sha256": digest,
                      "dest": downloads / name, "kills": 0, "done_at_kill": None, "at_kill": []})
    for f in files:
        f["id"] = d.download(f["url"], "dl", "--sha256", f["sha256"], "--to", str(f["dest"]))
    started = time.monotonic()

    # ---- kill -9 at random moments, restart each time
    gaps = []
    for k in range(1, KILLS + 1):
        gaps.append(rng.uniform(*GAP))
        time.sleep(gaps[-1])
        rc = d.stop(signal.SIGKILL, timeout=10)
        assert rc == -signal.SIGKILL, f"drowsed had exited on its own before kill {k} (status {rc})"
        committed = committed_offsets(d.state_dir)
        # The daemon is dead now: whatever is at a --to path stays there. It must be the whole, verified file.
        for f in files:
            if f["dest"].exists():
                assert f["dest"].stat().st_size == SIZE and sha256_file(f["dest"]) == f["sha256"], \
                    f"kill {k}: a partial or wrong file is at {f['dest']} ({f['dest'].stat().st_size} bytes)"
                if f["done_at_kill"] is None:
                    f["done_at_kill"] = k
            else:
                f["kills"] += 1        # this kill interrupted this download
                part = f["dest"].parent / f".{f['dest'].name}.{f['id']}.drowse-part"  # beside its --to path
                # SIGKILL keeps the page cache: the part file's size is every byte drowsed had written.
                f["at_kill"].append((k, part.stat().st_size if part.exists() else 0, committed.get(f["id"], 0)))
        d.start()

    # ---- let them finish
    for f in files:
        r = d.cli("transfer", "wait", f["id"], "--timeout", "60s", timeout=90)
        assert r.returncode == 0, f"{f['name']}: transfer wait exited {r.returncode}: {r.stdout} {r.stderr}"
    elapsed = time.monotonic() - started

    for f in files:
        t = d.transfer(f["id"])
        assert t["state"] == "completed" and t["bytes_done"] == SIZE, t
        assert sha256_file(f["dest"]) == f["sha256"], f"{f['dest']} has the wrong content"
    leftovers = list((d.state_dir / "transfers").glob("*.part")) if (d.state_dir / "transfers").is_dir() else []
    assert not leftovers, f"part files left behind: {leftovers}"

    # ---- what nginx served
    time.sleep(0.5)  # nginx logs an interrupted request when it next writes to the dead connection
    rows = []
    problems = []
    for f in files:
        entries = [e for e in nginx.access_entries() if e["uri"] == f["uri"]]
        served = sum(int(e["body_bytes"]) for e in entries)
        refetched = served - SIZE
        bound = f["kills"] * BOUND_PER_KILL
        starts = []
        for e in entries:
            m = re.fullmatch(r"bytes=(\d+)-", e["range"] or "")
            start = int(m.group(1)) if m else 0
            starts.append(start)
            if start > 0:
                if e["status"] != 206 or not e["if_range"]:
                    problems.append(f"{f['name']}: resume at {start} not a 206 with If-Range: {e}")
            elif e["status"] != 200:
                problems.append(f"{f['name']}: unexpected status: {e}")
        if starts != sorted(starts):
            problems.append(f"{f['name']}: resume offsets went backwards: {starts}")
        if refetched > bound:
            problems.append(f"{f['name']}: {refetched} bytes fetched twice > bound {bound} "
                            f"({f['kills']} kills × {BOUND_PER_KILL})")
        if refetched < 0:
            problems.append(f"{f['name']}: nginx logged only {served} of {SIZE} bytes")
        rows.append((f["name"], f["kills"], len(entries), served, refetched, bound, starts))

    kills_total = sum(r[1] for r in rows)
    refetched_total = sum(r[4] for r in rows)
    lines = [
        "",
        f"kill test: {FILES} × {mib(SIZE)} at limit_rate {RATE}/s per connection, commit_interval "
        f"{COMMIT_INTERVAL}s, commit_bytes {mib(COMMIT_BYTES)}; {KILLS} × kill -9, seed {seed}, "
        f"{elapsed:.1f} s from the first download to the last completion",
        f"bound per kill per file = rate × commit_interval + commit_bytes = "
        f"{mib(RATE_BYTES * COMMIT_INTERVAL)} + {mib(COMMIT_BYTES)} = {mib(BOUND_PER_KILL)}",
        f"{'file':<10} {'kills hit':>9} {'requests':>8} {'served':>12} {'re-fetched':>12} {'per kill':>11} {'bound':>12}",
    ]
    for name, kills, nreq, served, refetched, bound, _ in rows:
        per = refetched / kills if kills else 0
        lines.append(f"{name:<10} {kills:>9} {nreq:>8} {mib(served):>12} {mib(refetched):>12} {mib(per):>11} {mib(bound):>12}")
    per_all = refetched_total / kills_total if kills_total else 0
    lines.append(f"{'all':<10} {kills_total:>9} {'':>8} {'':>12} {mib(refetched_total):>12} {mib(per_all):>11} "
                 f"{mib(kills_total * BOUND_PER_KILL):>12}")
    for name, _, _, _, _, _, starts in rows:
        lines.append(f"  {name} request start offsets (MiB): " + ", ".join(f"{s / MiB:.1f}" for s in starts))
    # Where each kill's loss came from: written but not yet committed (part file size − committed offset
    # in state.db) and in flight (served by nginx on that request but never written by drowsed).
    lines.append("per kill, each file: written-not-committed + in-flight = re-fetched (MiB)")
    by_kill: dict[int, list[str]] = {k: [] for k in range(1, KILLS + 1)}
    for f in files:
        entries = [e for e in nginx.access_entries() if e["uri"] == f["uri"]]
        for j, (k, part_size, committed) in enumerate(f["at_kill"]):
            if j >= len(entries):
                break
            e = entries[j]
            m = re.fullmatch(r"bytes=(\d+)-", e["range"] or "")
            start = int(m.group(1)) if m else 0
            unc = part_size - committed
            infl = int(e["body_bytes"]) - (part_size - start)
            by_kill[k].append(f"{unc / MiB:5.2f} + {infl / MiB:5.2f} = {(unc + infl) / MiB:5.2f}")
    for k in range(1, KILLS + 1):
        lines.append(f"  kill {k} (after {gaps[k - 1]:.2f} s): " + " | ".join(by_kill[k] or ["(all done)"]))
    with capsys.disabled():
        print("\n".join(lines))

    assert all(f["kills"] > 0 for f in files), \
        f"some download was never interrupted (the kills came too late): {[(f['name'], f['kills']) for f in files]}"
    assert not problems, "\n".join(problems)

    # The app hears about all three (at least once: a kill may land between its run and the bookkeeping).
    def delivered():
        seen = set()
        for run in d.runs("dl"):
            for t in run.json().get("transfers", []):
                if t.get("state") == "completed":
                    seen.add(t.get("id"))
        return {f["id"] for f in files} <= seen
    wait_until(delivered, 15, what="the events handler to get all three completed transfers")


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to hold the final rename")
def test_sigkill_after_the_last_commit_does_not_download_again(nginx, make_drowse):
    # The only commit is at the last byte (commit_bytes = the size); strace holds every rename for
    # 3 s, so drowsed is killed with the whole file committed but not yet in place.
    size = 64 * MiB
    d = make_drowse(extra_config=f'[transfers]\ncommit_interval = "10m"\ncommit_bytes = {size}')
    d.add_app("dl", events=d.recorder("dl"))
    d.prefix = [shutil.which("strace"), "-f", "-qq", "-o", "/dev/null",
                "-e", "trace=rename,renameat,renameat2", "-e", "inject=rename,renameat,renameat2:delay_enter=3000000"]
    d.start()
    url, digest, _ = nginx.add_file("whole.bin", size)
    dest = d.base / "whole.bin"
    tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
    db = None
    try:
        def committed_all():
            nonlocal db
            if db is None:
                db = sqlite3.connect(f"file:{d.state_dir / 'state.db'}?mode=ro", uri=True, timeout=5)
            row = db.execute("SELECT bytes_done FROM transfers WHERE id = ?", (tid,)).fetchone()
            return row is not None and row[0] == size
        wait_until(committed_all, 60, interval=0.01, what="the commit of the last byte")
    finally:
        if db is not None:
            db.close()
    # strace runs drowsed as its child: kill the daemon itself, not the tracer.
    daemon = int(subprocess.run(["pgrep", "-f", "-n", f"^{DROWSED} --config {d.config}"],
                                capture_output=True, text=True).stdout.split()[0])
    os.kill(daemon, signal.SIGKILL)
    d.stop(signal.SIGKILL)
    assert not dest.exists(), "the file was already in place; the rename was not held"

    d.prefix = []
    d.start()
    r = d.cli("transfer", "wait", tid, "--timeout", "60s", timeout=90)
    assert r.returncode == 0, f"transfer wait exited {r.returncode}: {r.stdout} {r.stderr}"
    assert sha256_file(dest) == digest
    uri = url.split(f":{nginx.port}", 1)[1]
    served = nginx.body_bytes(uri)
    # Every byte was committed: a restart has nothing to fetch.
    assert served <= size + 4096, \
        f"{served - size} bytes fetched again after the kill: {[e for e in nginx.access_entries() if e['uri'] == uri]}"


# ----------------------------------------------------------------------------- uploads

# Uploads (docs/contract.md: "Before every resume ask the server for the offset; never resend from a guess. An upload
# survives daemon kills like a download does."). The servers are upload_servers.py's, reading slowly.
from drowse_e2e import write_random_file  # noqa: E402
from upload_servers import UploadServer, data_requests, interrupted, resume_problems  # noqa: E402

UP_SIZE = 64 * MiB
UP_RATE = 7 * MiB            # the servers' read rate (bytes/s): 64 MiB take ~9 s
UP_KILLS = 6
UP_GAP = (0.5, 2.0)          # seconds between kills, drawn uniformly
# What one kill may cost one upload: what the server reads in one second, plus 1 MiB.
UP_BOUND_PER_KILL = UP_RATE * 1 + 1 * MiB


def _describe_upload_server(s: UploadServer) -> str:
    lines = []
    for r in s.log():
        h = r["headers"]
        lines.append(f"#{r['seq']} {r['method']} {r['path']} -> {r['status']} {r['outcome']} body={r['body_len']} "
                     f"offset_before={r['offset_before']} offset_after={r['offset_after']} "
                     f"upload-offset={h.get('upload-offset')!r}")
    for u in s.uploads.values():
        lines.append(f"upload {u.protocol} {u.path} offset={u.offset} length={u.length} complete={u.complete} "
                     f"deleted={u.deleted} sha256={u.sha256()}")
    return "\n".join(lines)


def test_repeated_sigkill_during_uploads(make_drowse, workdir, capsys):
    seed = int(os.environ.get("DROWSE_E2E_SEED") or time.time_ns() % 1_000_000)
    rng = random.Random(seed)

    # tus without the checksum extension: every PATCH carries the rest of the file and the server keeps
    # every byte that arrived (with checksums a cut 16 MiB chunk is discarded whole: another bound).
    servers = {"tus": UploadServer("tus", tus_checksum=False).start(),
               "ietf": UploadServer("ietf", versions=(8,)).start()}
    try:
        for s in servers.values():
            s.set_read_rate(UP_RATE)
        d = make_drowse(extra_config='[transfers]\ncommit_interval = "200ms"')
        d.add_app("up")
        d.start()

        ups = []
        for proto, s in servers.items():
            path = d.base / "outbox" / f"kill-{proto}.bin"
            digest = write_random_file(path, UP_SIZE)
            url = s.url("/files/") if proto == "tus" else s.url("/upload")
            ups.append({"proto": proto, "server": s, "path": path, "url": url, "sha256": digest, "kills": 0})
        for u in ups:
            r = d.cli_ok("transfer", "upload", str(u["path"]), u["url"], "--app", "up", "--protocol", u["proto"])
            lines = [l.strip() for l in r.stdout.splitlines() if l.strip()]
            assert len(lines) == 1, f"`drowse transfer upload` should print the id alone: {r.stdout!r}"
            u["id"] = lines[0]
        started = time.monotonic()

        # ---- kill -9 at random moments, restart each time
        gaps = []
        for k in range(1, UP_KILLS + 1):
            gaps.append(rng.uniform(*UP_GAP))
            time.sleep(gaps[-1])
            rc = d.stop(signal.SIGKILL, timeout=10)
            assert rc == -signal.SIGKILL, f"drowsed had exited on its own before kill {k} (status {rc})"
            for u in ups:
                if not u["server"].completed():
                    u["kills"] += 1        # this kill found this upload unfinished at the server
            d.start()

        # ---- let them finish
        for u in ups:
            r = d.cli("transfer", "wait", u["id"], "--timeout", "90s", timeout=120)
            assert r.returncode == 0, (f"{u['proto']}: transfer wait exited {r.returncode}: {r.stdout} {r.stderr}\n"
                                       f"{d.transfer(u['id'])}\n{_describe_upload_server(u['server'])}")
        elapsed = time.monotonic() - started

        rows = []
        problems = []
        for u in ups:
            s, proto = u["server"], u["proto"]
            t = d.transfer(u["id"])
            assert t["state"] == "completed" and t["bytes_done"] == UP_SIZE, t
            log = s.log()
            resources = s.resumable_uploads()
            # Exactly one upload resource for the transfer: no restart from scratch.
            if len(resources) != 1:
                problems.append(f"{proto}: {len(resources)} upload resources created (expected 1): "
                                f"{[(x.path, x.offset, x.complete) for x in resources]}")
            done = [x for x in resources if x.complete and not x.deleted]
            if len(done) != 1:
                problems.append(f"{proto}: {len(done)} completed upload resources on the server")
            for x in done:
                if x.offset != UP_SIZE or x.sha256() != u["sha256"]:
                    problems.append(f"{proto}: the server stored {x.offset} bytes with sha256 {x.sha256()}, "
                                    f"the file has {UP_SIZE} bytes with sha256 {u['sha256']}")
            sent = 0
            cut = 0
            patches = []
            starts = []
            for x in resources:
                creations = [r for r in log if r.get("upload") == x.id and r["method"] in ("POST", "PUT")]
                if len(creations) != 1:
                    problems.append(f"{proto}: {len(creations)} creation requests for {x.path}")
                problems += [f"{proto}: {p}" for p in resume_problems(log, x.id)]
                reqs = data_requests(log, x.id)
                sent += sum(r["body_len"] for r in reqs)
                cut += sum(1 for r in reqs if interrupted(r))
                # Every PATCH after the first data request resumes: a successful HEAD of the upload must
                # come between it and the previous data request, and it must start at that HEAD's offset.
                on = [r for r in log if r.get("upload") == x.id]
                prev_data = None
                heads_since = []
                for r in on:
                    if r["method"] == "HEAD":
                        if r.get("status") in (200, 204):
                            heads_since.append(r)
                        continue
                    if r["method"] not in ("POST", "PUT", "PATCH"):
                        continue
                    if r["method"] == "PATCH":
                        patches.append(r)
                        offset = r["headers"].get("upload-offset")
                        starts.append(int(offset) if offset and offset.isdigit() else -1)
                        if prev_data is not None and prev_data["method"] == "PATCH" or heads_since:
                            if not heads_since:
                                problems.append(f"{proto}: PATCH #{r['seq']} (Upload-Offset {offset}) resumed "
                                                f"without a HEAD after #{prev_data['seq']}")
                            elif offset != str(heads_since[-1]["offset_after"]):
                                problems.append(f"{proto}: PATCH #{r['seq']} sent Upload-Offset {offset}, the HEAD "
                                                f"#{heads_since[-1]['seq']} before it said "
                                                f"{heads_since[-1]['offset_after']}")
                        elif offset != "0":
                            problems.append(f"{proto}: first PATCH #{r['seq']} sent Upload-Offset {offset}, not 0")
                        if r.get("status") == 409:
                            problems.append(f"{proto}: PATCH #{r['seq']} got 409 (offset mismatch): a guessed offset")
                    prev_data = r
                    heads_since = []
            resent = sent - UP_SIZE
            bound = u["kills"] * UP_BOUND_PER_KILL
            if resent > bound:
                problems.append(f"{proto}: {mib(resent)} re-sent > bound {mib(bound)} "
                                f"({u['kills']} kills × {mib(UP_BOUND_PER_KILL)})")
            if resent < 0:
                problems.append(f"{proto}: the server read only {sent} of {UP_SIZE} body bytes")
            rows.append((proto, u["kills"], cut, len(patches), sent, resent, bound, starts))

        kills_total = sum(r[1] for r in rows)
        resent_total = sum(r[5] for r in rows)
        lines = [
            "",
            f"upload kill test: 2 × {mib(UP_SIZE)} (tus, ietf) at a server read rate of {mib(UP_RATE)}/s; "
            f"{UP_KILLS} × kill -9 ({', '.join(f'{g:.2f}' for g in gaps)} s apart), seed {seed}, "
            f"{elapsed:.1f} s from the first upload to the last completion",
            f"bound per kill per upload = read rate × 1 s + 1 MiB = {mib(UP_BOUND_PER_KILL)}",
            f"{'upload':<8} {'kills hit':>9} {'cut reqs':>8} {'PATCHes':>7} {'body bytes':>12} {'re-sent':>11} "
            f"{'(bytes)':>9} {'per kill':>10} {'bound':>12}",
        ]
        for proto, kills, cut, npatch, sent, resent, bound, _ in rows:
            per = resent / kills if kills else 0
            lines.append(f"{proto:<8} {kills:>9} {cut:>8} {npatch:>7} {mib(sent):>12} {mib(resent):>11} "
                         f"{resent:>9} {mib(per):>10} {mib(bound):>12}")
        per_all = resent_total / kills_total if kills_total else 0
        lines.append(f"{'all':<8} {kills_total:>9} {'':>8} {'':>7} {'':>12} {mib(resent_total):>11} "
                     f"{resent_total:>9} {mib(per_all):>10} {mib(kills_total * UP_BOUND_PER_KILL):>12}")
        for proto, *_, starts in rows:
            lines.append(f"  {proto} PATCH start offsets (MiB): " + ", ".join(f"{x / MiB:.2f}" for x in starts))
        with capsys.disabled():
            print("\n".join(lines))

        assert all(u["kills"] > 0 for u in ups), \
            f"some upload was never interrupted (the kills came too late): {[(u['proto'], u['kills']) for u in ups]}"
        assert all(r[2] > 0 for r in rows), \
            f"no kill cut a request body of some upload: {[(r[0], r[2]) for r in rows]}"
        assert not problems, "\n".join(problems) + "\n" + "\n\n".join(
            f"----- {u['proto']} server -----\n{_describe_upload_server(u['server'])}" for u in ups)
    finally:
        for name, s in servers.items():
            s.stop()
            (workdir / f"upload-server-{name}.log").write_text(_describe_upload_server(s) + "\n")
