"""Downloads from servers that misbehave (docs/contract.md: "Transfers"; docs/design.md: "Durability", "Security").

Every test runs a real drowsed against the scripted server in hostile_server.py and judges only
what a user can see: the bytes at `--to` (compared with the exact content the server meant to serve,
so a splice of two versions or of two offsets is caught) and the transfer's final state and reason
from `drowse transfer show ID --json`. The server misbehaves on the first one or two requests only,
because retries back off from 1 s (with jitter).
"""

from __future__ import annotations

import hashlib
import random
import time

import pytest

from drowse_e2e import sha256_file, wait_until
from hostile_server import (
    Exchange, cut, cut_range, error, overflow, partial, redirect, serve, slow, stall_after,
)

KiB = 1 << 10
MiB = 1 << 20
FINISHED = ("completed", "failed", "cancelled")

# Progress is committed often, so that a cut attempt leaves a resumable offset behind.
RESUME_CONFIG = """
[transfers]
commit_interval = "100ms"
commit_bytes = 65536
"""


def content(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def start_drowse(make_drowse, extra_config: str = RESUME_CONFIG):
    d = make_drowse(extra_config=extra_config)
    d.add_app("dl", events=d.recorder("dl"))
    d.start()
    return d


def describe(d, srv, tid=None, dest=None) -> str:
    """Context for assertion messages: the transfer, the file on disk, the server's request log."""
    parts = []
    if tid is not None:
        try:
            parts.append(f"transfer: {d.transfer(tid)}")
        except AssertionError as e:
            parts.append(f"transfer: ({e})")
    if dest is not None:
        parts.append(f"--to: {dest} " + (f"{dest.stat().st_size} bytes sha256={sha256_file(dest)}"
                                         if dest.exists() else "absent"))
    parts.append("requests:\n  " + srv.log().replace("\n", "\n  "))
    return "\n".join(parts)


def wait_final(d, srv, tid, dest=None, timeout: float = 20.0, max_size: int | None = None) -> dict:
    """Polls `drowse transfer show` until the transfer has finished. With `max_size`, also checks on
    every poll that the file at `dest` is never longer than that."""
    seen = {}

    def finished():
        if max_size is not None and dest is not None and dest.exists():
            size = dest.stat().st_size
            assert size <= max_size, f"{dest} grew to {size} bytes (> {max_size})\n{describe(d, srv, tid, dest)}"
        t = d.transfer(tid)
        seen["t"] = t
        return t if t["state"] in FINISHED else None

    try:
        return wait_until(finished, timeout, interval=0.1, what=f"transfer {tid} to finish")
    except TimeoutError as e:
        raise AssertionError(f"{e}; last seen {seen.get('t')}\n{describe(d, srv, tid, dest)}") from None


def diagnose(got: bytes, expected: bytes, old: bytes | None = None) -> str:
    """Says how `got` differs from `expected`, and whether it is a splice of `old` and `expected`."""
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    msg = f"{len(got)} bytes, expected {len(expected)}; first difference at byte {first}"
    if old is not None:
        k = next((i for i, (a, b) in enumerate(zip(got, old)) if a != b), min(len(got), len(old)))
        if k > 0 and got[k:] == expected[k:]:
            msg += f"; it is a SPLICE: the old version's bytes 0..{k - 1} followed by the new version's bytes {k}.."
    return msg


def assert_completed_with(d, srv, tid, dest, expected: bytes, old: bytes | None = None) -> dict:
    t = wait_final(d, srv, tid, dest, max_size=len(expected))
    info = describe(d, srv, tid, dest)
    assert t["state"] == "completed", f"expected completed\n{info}"
    assert dest.is_file(), f"no file at --to\n{info}"
    got = dest.read_bytes()
    assert got == expected, f"the file at --to is not the expected content ({diagnose(got, expected, old)})\n{info}"
    assert t["bytes_done"] == len(expected), info
    return t


def assert_correct_or_failed(d, srv, tid, dest, expected: bytes, old: bytes | None = None) -> dict:
    """The rule for a server whose answers cannot be trusted: never a splice. Either the download
    restarts and completes with exactly the right bytes, or it fails with a reason and leaves no file."""
    t = wait_final(d, srv, tid, dest, max_size=len(expected))
    info = describe(d, srv, tid, dest)
    if t["state"] == "completed":
        assert dest.is_file(), f"completed, but no file at --to\n{info}"
        got = dest.read_bytes()
        assert got == expected, f"completed, but with the wrong bytes ({diagnose(got, expected, old)})\n{info}"
    else:
        assert t["state"] == "failed", info
        assert isinstance(t["reason"], str) and t["reason"].strip(), f"failed without a reason\n{info}"
        assert not dest.exists(), f"failed, but left a file at --to\n{info}"
    return t


def ranged_requests(srv, path):
    return [r for r in srv.requests_for(path) if r.range is not None]


# ----------------------------------------------------------------------------- 1. 200 instead of 206

def test_server_ignoring_range_answers_200_and_the_file_is_not_spliced(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(1 * MiB + 17, 1)
    N = 300_000
    etag = '"v1"'
    url = srv.script("/f.bin", [cut(A, N, etag=etag)], then=serve(A, etag=etag, ranges=False))
    dest = d.base / "f.bin"

    tid = d.download(url, "dl", "--to", str(dest))
    assert_completed_with(d, srv, tid, dest, A)

    reqs = srv.requests_for("/f.bin")
    info = describe(d, srv, tid, dest)
    assert reqs[0].range is None and reqs[0].outcome == "closed-by-server", info
    # The retry really was a resume (so the 200 had to be handled as "start over"), answered with 200.
    assert reqs[1].range == f"bytes={N}-" and reqs[1].status == 200, info


# ----------------------------------------------------------------------------- 2. file changed between attempts

@pytest.mark.parametrize("how", [
    "206-with-new-etag",
    "if-range-honoured-200",
    "206-with-new-last-modified",
])
def test_file_changed_between_attempts_gives_the_new_content_exactly(hostile_server, make_drowse, how):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(1 * MiB, 2)
    B = content(1 * MiB, 3)                 # same size: only the validator tells the versions apart
    N = 400_000
    if how == "206-with-new-etag":
        # A server that ignores If-Range: resumes with the new version's bytes and its new ETag.
        steps = [cut(A, N, etag='"v1"'),
                 partial(f"bytes {N}-{len(B) - 1}/{len(B)}", B[N:], headers=[("ETag", '"v2"')])]
        then = serve(B, etag='"v2"')
        validator = '"v1"'
    elif how == "if-range-honoured-200":
        B = content(1 * MiB + 54_321, 3)    # a new version of another size, sent whole because If-Range failed
        steps = [cut(A, N, etag='"v1"')]
        then = serve(B, etag='"v2"')
        validator = '"v1"'
    else:
        lm1, lm2 = "Mon, 02 Nov 2026 10:00:00 GMT", "Sat, 21 Nov 2026 23:00:00 GMT"
        steps = [cut(A, N, last_modified=lm1),
                 partial(f"bytes {N}-{len(B) - 1}/{len(B)}", B[N:], headers=[("Last-Modified", lm2)])]
        then = serve(B, last_modified=lm2)
        validator = lm1
    url = srv.script("/f.bin", steps, then=then)
    dest = d.base / "f.bin"

    tid = d.download(url, "dl", "--to", str(dest))
    assert_completed_with(d, srv, tid, dest, B, old=A)

    reqs = srv.requests_for("/f.bin")
    info = describe(d, srv, tid, dest)
    # The scenario happened: the second request resumed at N with the first version's validator.
    assert reqs[1].range == f"bytes={N}-" and reqs[1].if_range == validator, info


# ----------------------------------------------------------------------------- 3. wrong Content-Range start

@pytest.mark.parametrize("where", ["zero", "ahead", "behind"])
def test_206_with_wrong_start_is_never_spliced(hostile_server, make_drowse, where):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(1 * MiB + 3, 4)
    L = len(A)
    N = 300_000
    wrong = {"zero": 0, "ahead": N + 4096, "behind": N - 4096}[where]
    bad_206 = partial(f"bytes {wrong}-{L - 1}/{L}", A[wrong:])
    full = serve(A, ranges=False)

    def handler(ex: Exchange):
        if ex.index == 0:
            return cut(A, N)(ex)
        # Every ranged request gets a 206 that starts at the wrong byte; a plain GET gets the file.
        return (bad_206 if ex.request.range is not None else full)(ex)

    url = srv.route("/f.bin", handler)
    dest = d.base / "f.bin"
    tid = d.download(url, "dl", "--to", str(dest))
    assert_correct_or_failed(d, srv, tid, dest, A)
    info = describe(d, srv, tid, dest)
    assert any(r.range == f"bytes={N}-" and r.status == 206 for r in srv.requests_for("/f.bin")), \
        f"the daemon never asked to resume, so the wrong 206 was never tested\n{info}"


# ----------------------------------------------------------------------------- 4. wrong total

@pytest.mark.parametrize("change", [+50_000, -50_000], ids=["bigger", "smaller"])
def test_206_with_a_different_total_is_never_spliced(hostile_server, make_drowse, change):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(1 * MiB, 5)
    B = content(1 * MiB + change, 6)        # the file changed size on the server, validators did not tell
    N = 300_000
    url = srv.script("/f.bin", [cut(A, N), partial(f"bytes {N}-{len(B) - 1}/{len(B)}", B[N:])], then=serve(B))
    dest = d.base / "f.bin"

    tid = d.download(url, "dl", "--to", str(dest))
    assert_correct_or_failed(d, srv, tid, dest, B, old=A)
    reqs = srv.requests_for("/f.bin")
    assert reqs[1].range == f"bytes={N}-" and reqs[1].status == 206, describe(d, srv, tid, dest)


# ----------------------------------------------------------------------------- 5. truncated bodies

def test_truncated_bodies_are_resumed_and_the_file_is_correct(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(1 * MiB + 999, 7)
    etag = '"t1"'
    N1, M = 250_000, 300_000
    # Request 0: 200 that says Content-Length L and stops at N1. Request 1: a correct 206 that stops
    # M bytes later. Then the server behaves.
    url = srv.script("/f.bin", [cut(A, N1, etag=etag), cut_range(A, M, etag=etag)], then=serve(A, etag=etag))
    dest = d.base / "f.bin"

    tid = d.download(url, "dl", "--to", str(dest), "--sha256", sha(A))
    assert_completed_with(d, srv, tid, dest, A)

    reqs = srv.requests_for("/f.bin")
    info = describe(d, srv, tid, dest)
    assert [r.range for r in reqs[:3]] == [None, f"bytes={N1}-", f"bytes={N1 + M}-"], \
        f"each retry should resume where the previous body stopped\n{info}"
    assert [r.if_range for r in reqs[1:3]] == [etag, etag], info
    assert len(reqs) == 3, info


# ----------------------------------------------------------------------------- 6. more bytes than announced

def test_body_longer_than_content_length_is_cut_at_content_length(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(512 * KiB + 5, 8)
    junk = content(4 * MiB, 9)
    url = srv.script("/f.bin", [overflow(A, junk)], then=serve(A))
    dest = d.base / "f.bin"

    tid = d.download(url, "dl", "--to", str(dest))
    t = wait_final(d, srv, tid, dest, max_size=len(A))
    info = describe(d, srv, tid, dest)
    if t["state"] == "completed":
        assert dest.read_bytes() == A, info
        assert t["bytes_done"] == len(A), info
    else:
        assert t["state"] == "failed" and t["reason"], info
        assert not dest.exists(), info


def test_endless_chunked_206_is_capped_at_the_known_size(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(1 * MiB, 10)
    L = len(A)
    N = 300_000
    etag = '"e1"'
    junk = content(16 * MiB, 11)
    # Request 0 announces L bytes (Content-Length) and is cut. Request 1 resumes correctly (206,
    # Content-Range N-(L-1)/L) but chunked, and runs 16 MiB past the end of the file.
    url = srv.script("/f.bin", [
        cut(A, N, etag=etag),
        partial(f"bytes {N}-{L - 1}/{L}", A[N:] + junk, headers=[("ETag", etag)], chunked=True),
    ], then=serve(A, etag=etag))
    dest = d.base / "f.bin"

    tid = d.download(url, "dl", "--to", str(dest))
    assert_correct_or_failed(d, srv, tid, dest, A)
    reqs = srv.requests_for("/f.bin")
    info = describe(d, srv, tid, dest)
    assert reqs[1].range == f"bytes={N}-" and reqs[1].status == 206, info
    # The daemon stopped reading the runaway body instead of swallowing all 16 MiB of it.
    assert reqs[1].bytes_sent < (L - N) + len(junk), info


# ----------------------------------------------------------------------------- 7. stall

def test_stalled_body_is_detected_and_resumed(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse, extra_config=RESUME_CONFIG + 'stall_timeout = "2s"\n')
    A = content(1 * MiB + 1, 12)
    N = 200_000
    etag = '"s1"'
    # Headers and N bytes, then silence on an open connection (for longer than the test may take).
    url = srv.script("/f.bin", [stall_after(A, N, 60, etag=etag)], then=serve(A, etag=etag))
    dest = d.base / "f.bin"

    tid = d.download(url, "dl", "--to", str(dest))
    assert_completed_with(d, srv, tid, dest, A)
    reqs = srv.requests_for("/f.bin")
    info = describe(d, srv, tid, dest)
    assert reqs[0].outcome == "client-gone", f"the daemon should have dropped the stalled connection\n{info}"
    assert reqs[1].range == f"bytes={N}-", info


# ----------------------------------------------------------------------------- 8. redirect loop

def test_redirect_loop_fails_with_a_reason_about_redirects(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse)
    srv.route("/loop/a", redirect(srv.url("/loop/b")))
    srv.route("/loop/b", redirect(srv.url("/loop/a")))
    dest = d.base / "loop.bin"

    tid = d.download(srv.url("/loop/a"), "dl", "--to", str(dest))
    t = wait_final(d, srv, tid, dest)
    info = describe(d, srv, tid, dest)
    assert t["state"] == "failed", info
    assert "redirect" in (t["reason"] or "").lower(), info
    assert not dest.exists(), info
    n = len(srv.requests)
    assert 2 <= n <= 51, f"redirects should be bounded\n{info}"
    # A permanent failure is not retried: none is scheduled (TransferRetryTests checks the policy).
    assert t["retries"] == 0 and t["next_retry_at"] is None, f"the redirect loop is to be retried\n{info}"
    assert len(srv.requests) == n, f"the redirect loop was retried\n{describe(d, srv, tid, dest)}"


# ----------------------------------------------------------------------------- 9. 5xx, then success

def test_503_twice_then_200_completes(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(700 * KiB + 1, 13)
    url = srv.script("/f.bin", [error(503), error(503)], then=serve(A, etag='"ok"'))
    dest = d.base / "f.bin"

    tid = d.download(url, "dl", "--to", str(dest), "--sha256", sha(A))
    assert_completed_with(d, srv, tid, dest, A)
    reqs = srv.requests_for("/f.bin")
    info = describe(d, srv, tid, dest)
    assert len(reqs) >= 3, info
    assert [r.status for r in reqs[:3]] == [503, 503, 200], info


# ----------------------------------------------------------------------------- 10. 404

def test_404_fails_permanently_after_one_request(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse)
    srv.route("/missing.bin", error(404))
    dest = d.base / "missing.bin"

    tid = d.download(srv.url("/missing.bin"), "dl", "--to", str(dest))
    t = wait_final(d, srv, tid, dest)
    info = describe(d, srv, tid, dest)
    assert t["state"] == "failed", info
    assert "HTTP 404" in (t["reason"] or ""), info
    assert not dest.exists(), info
    assert t["attempts"] == 1 and t["retries"] == 0 and t["next_retry_at"] is None, f"a 404 is to be retried\n{info}"
    assert len(srv.requests_for("/missing.bin")) == 1, f"a 404 was retried\n{describe(d, srv, tid, dest)}"


# ----------------------------------------------------------------------------- 11. force-quit during a slow download

def test_quit_cancels_a_slow_download_and_tells_the_app(hostile_server, make_drowse):
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(8 * MiB, 14)
    url = srv.route("/slow.bin", slow(A, 16 * KiB, 0.05, etag='"slow"'))  # ~320 KiB/s: minutes for 8 MiB
    dest = d.base / "slow.bin"

    tid = d.download(url, "dl", "--to", str(dest))
    part = dest.parent / f".{dest.name}.{tid}.drowse-part"  # a --to download gathers beside its destination
    wait_until(lambda: (d.transfer(tid).get("bytes_done") or 0) > 0 and part.exists() and part.stat().st_size > 0,
               15, interval=0.1, what="the slow download to make progress on disk")
    assert d.transfer(tid)["state"] == "running", describe(d, srv, tid, dest)

    d.cli_ok("quit", "dl")

    t = wait_final(d, srv, tid, dest, timeout=10)
    info = describe(d, srv, tid, dest)
    assert t["state"] == "cancelled", info
    [run] = d.wait_runs("dl", 1, timeout=15)
    assert run.env.get("DROWSE_EVENT") == "transfers", run
    doc = run.json()
    mine = [x for x in doc.get("transfers", []) if x.get("id") == tid]
    assert len(mine) == 1 and mine[0].get("state") == "cancelled", f"events handler got {doc}"

    wait_until(lambda: not part.exists(), 5, what=f"{part} to be removed")
    leftovers = [p for p in list((d.state_dir / "transfers").glob("*")) + list(dest.parent.glob(".*")) if tid in p.name]
    assert leftovers == [], f"partial data left in the state dir: {leftovers}"
    assert not dest.exists(), info
    # The daemon hung up on the server and did not come back.
    wait_until(lambda: srv.requests_for("/slow.bin")[0].outcome == "client-gone", 5,
               what="the daemon to drop the slow connection")
    t = d.transfer(tid)
    assert t["state"] == "cancelled" and t["next_retry_at"] is None, f"the cancelled download is to be retried\n{info}"
    assert len(srv.requests_for("/slow.bin")) == 1, f"the cancelled download was retried\n{describe(d, srv, tid, dest)}"


# ----------------------------------------------------------------------------- 11. resume always broken

def test_server_that_always_breaks_resume_is_retried_with_growing_backoff(hostile_server, make_drowse):
    """Every plain GET sends part of the body and closes; every Range request gets a 206 for another
    offset (thrown away). Each cycle "moves" bytes that the next one discards: that is no progress,
    so the retries must back off more and more (they came every 0.7 s for the transfer's 7 days)."""
    srv = hostile_server
    d = start_drowse(make_drowse)
    A = content(1 * MiB, 21)
    L, N = len(A), 300_000
    bad_206 = partial(f"bytes {N + 4096}-{L - 1}/{L}", A[N + 4096:])

    def handler(ex: Exchange):
        return (bad_206 if ex.request.range is not None else cut(A, N))(ex)

    url = srv.route("/f.bin", handler)
    tid = d.download(url, "dl", "--to", str(d.base / "f.bin"))
    reqs = wait_until(lambda: (lambda rs: rs if len(rs) >= 4 else None)(srv.requests_for("/f.bin")), 15, interval=0.1,
                      what=f"four requests\n{describe(d, srv, tid)}")
    info = describe(d, srv, tid)
    assert any(r.range is not None for r in reqs), f"the daemon never tried to resume\n{info}"
    # Growing from 0.5–1 s: the waits before the 2nd, 3rd and 4th requests are at least 0.5, 1
    # and 2 s (each step doubles; TransferRetryTests checks the policy itself). Before, a cycle
    # of two took at most 3 s, every request within 1.5 s of the one before.
    gaps = [b.at - a.at for a, b in zip(reqs, reqs[1:4])]
    assert gaps[2] >= 2.0 - 0.05 and sum(gaps) >= 3.5 - 0.05, f"waits between requests {gaps}: the backoff does not grow\n{info}"
    assert d.transfer(tid)["state"] in ("waiting", "running"), info


# ----------------------------------------------------------------------------- 12. minimum speed

def test_trickle_below_min_speed_ends_the_attempt_and_is_retried(hostile_server, make_drowse):
    """10 bytes/s would hold a connection slot for a day (stall detection only needs 1 byte/s):
    with `[transfers] min_speed`, an attempt below it for the window ends as transient and is retried."""
    srv = hostile_server
    d = start_drowse(make_drowse, extra_config=RESUME_CONFIG + 'min_speed = 1024\nmin_speed_window = "3s"\n')
    A = content(64 * KiB, 22)
    url = srv.route("/f.bin", slow(A, 10, 1.0))
    tid = d.download(url, "dl", "--to", str(d.base / "f.bin"))
    t0 = time.monotonic()
    wait_until(lambda: len(srv.requests_for("/f.bin")) >= 2, 15, interval=0.1,
               what=f"a second request after the first trickled below min_speed\n{describe(d, srv, tid)}")
    elapsed = time.monotonic() - t0
    reqs = srv.requests_for("/f.bin")
    info = describe(d, srv, tid)
    # The first attempt was given up (the server notices only at its next write): a new request came
    # while the first had sent a few bytes of its 64 KiB.
    assert reqs[0].bytes_sent < 200, info
    assert elapsed < 12, f"the first attempt lasted {elapsed:.1f} s with a 3 s window\n{info}"
    assert d.transfer(tid)["state"] in ("waiting", "running"), info
