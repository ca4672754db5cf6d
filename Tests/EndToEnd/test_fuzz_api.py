"""No request kills the daemon: thousands of mutated requests
(request lines, query strings, headers, framing, JSON bodies, numbers) go to a real drowsed over
its Unix socket; after every batch it must still be the same process and answer GET /v1/status.

Seeded: DROWSE_FUZZ_SEED picks the seed (printed on failure), DROWSE_FUZZ_SECONDS the time
budget (default 45 s, so the test stays near a minute in CI)."""

from __future__ import annotations

import json
import os
import random
import socket
import time

from drowse_e2e import pid_alive, wait_until
from raw_http import connect, read_response, request, send_all

SEED = int(os.environ.get("DROWSE_FUZZ_SEED", "20250611"))
BUDGET = float(os.environ.get("DROWSE_FUZZ_SECONDS", "45"))
BATCH = 50
APP = "fz"
# Nothing listens there: a transfer that gets created fails its attempts quickly, and each
# batch ends with a force-quit of the app that cancels whatever was created.
DEAD_URL = "http://127.0.0.1:9/file.bin"

METHODS = ["GET", "POST", "DELETE", "PUT", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE", "BREW", "get",
           "", "G\x00T", "\xff\xfe", "A" * 300, "POST POST"]
PATHS = ["/v1/status", "/v1/conditions", "/v1/apps", f"/v1/apps/{APP}", "/v1/apps/nope", "/v1/transfers",
         "/v1/transfers/0000", "/v1/transfers/x/cancel", "/v1/conditions/refresh", f"/v1/apps/{APP}/used",
         "/", "", "*", "/v1", "/v1/", "//v1//status//", "/v1/../v1/status", "/v1/apps/%00", "/v1/apps/" + "a" * 2000,
         "http://drowse/v1/status", "/v1/transfers/%2e%2e", "/v1/apps/\xff", "/v1/transfers/'; DROP TABLE transfers;--"]
QUERIES = ["", "?", "?=", "?&&=", "?=&=", "?a=b&=c", "?%", "?%zz=%", "?&", "?==", "?a==b", "?refresh",
           "?refresh=1", "?refresh=true", "?app=", f"?app={APP}", "?app=%ff", "?" + "=" * 500, "?" + "&" * 500,
           "?" + "a=b&" * 300, "??", "?=?=", "#frag", "?\xff=\xfe", "?app", "?=app", "?app=&app=x"]
# Every way a number (or something in a number's place) can arrive, as JSON text.
NUMBERS = ["1e300", "-1e300", "1e999", "-1e999", "1e-999", "0", "-0", "-0.0", "0.0", "1", "-1", "0.5", "1e-300",
           "9007199254740993", "9223372036854775807", "9223372036854775808", "18446744073709551616",
           "-9223372036854775809", "315576000", "315576001", "3.15576e8", "1E+300", "1.7976931348623157e308",
           "4.9e-324", "NaN", "Infinity", "-Infinity", "1e", "--1", "01", "1.", ".5", "0x10",
           '"1e300"', '"1e300s"', '"99999999999999999999d"', '"-5s"', '"0s"', '"NaNs"', '"infs"', '"7d"',
           '"1h30m"', '"ms"', '""', '"10y"', '"3650d"', '"3651d"', '"1.5e3s"', '"9.9e99d"', "true", "null", "[]",
           "{}", "[1e300]", '{"seconds": 1}', '"\\ud800"']
STRINGS = ['"x"', '""', '"\\u0000"', '"\\ud800"', '"' + "a" * 5000 + '"', '"/etc/passwd"', '"relative/path"',
           '"http://127.0.0.1:9/"', '"file:///etc/passwd"', '"ftp://x/"', '"download"', '"upload"', '"auto"', '"tus"',
           '"../../x"', '"a/b"', '"\\n"']
FIELDS = ["url", "app", "session", "kind", "to", "sha256", "file", "protocol", "discretionary", "no_cellular",
          "requires_power", "timeout_resource"]


def base_fields() -> dict[str, str]:
    return {"url": json.dumps(DEAD_URL), "app": json.dumps(APP), "timeout_resource": "60"}


def json_body(rng: random.Random) -> bytes:
    """A transfer request with some fields replaced by hostile values (kept as raw JSON text,
    so that numbers such as 1e999 or -0 reach the server exactly as written)."""
    fields = base_fields()
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(FIELDS + ["timeout_resource"] * 4 + ["size", "zzz"])
        fields[key] = rng.choice(NUMBERS if rng.random() < 0.7 else STRINGS)
    if rng.random() < 0.1:
        fields["to"] = json.dumps("/nonexistent-dir/x")
    text = "{" + ",".join(f"{json.dumps(k)}: {v}" for k, v in fields.items()) + "}"
    return text.encode()


def odd_body(rng: random.Random) -> bytes:
    kind = rng.randrange(12)
    if kind == 0:  # deep nesting (moderate: the parser's own limit is another change)
        depth = rng.choice([10, 65, 100, 1000, 5000, 10000])
        return b"[" * depth + b"]" * depth
    if kind == 1:
        depth = rng.choice([10, 65, 1000, 5000])
        return b'{"a":' * depth + b"1" + b"}" * depth
    if kind == 2:  # invalid UTF-8 inside and outside strings
        return b'{"url": "\xff\xfe", "app": "\xc3\x28"}'
    if kind == 3:
        return rng.randbytes(rng.randint(1, 2000))
    if kind == 4:  # a byte flipped in a good body
        b = bytearray(json_body(rng))
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 5:  # truncated
        b = json_body(rng)
        return b[: rng.randrange(len(b))]
    if kind == 6:
        return rng.choice([b"[]", b"1e300", b"null", b'"x"', b"true", b"-0", b"1e999", b"{}", b" ", b"{", b"}"])
    if kind == 7:  # just over the 256 KiB body limit, or well over
        return b'{"a": "' + b"x" * rng.choice([256 * 1024, 600 * 1024]) + b'"}'
    if kind == 8:  # duplicate keys: the last one wins, every one must be valid to get that far
        return b'{"url": 1, "url": "%s", "app": "%s", "timeout_resource": 1e999, "timeout_resource": 5}' % (
            DEAD_URL.encode(), APP.encode())
    if kind == 9:
        return b'{"url": "' + DEAD_URL.encode() + b'", "app": "' + APP.encode() + b'", "kind": "upload", "file": "/etc/hostname", "timeout_resource": ' + rng.choice(NUMBERS).encode() + b"}"
    if kind == 10:
        return b'{"\\ud800": "\\udc00\\ud800", "app": "\\u0000"}'
    return json_body(rng)


def request_bytes(rng: random.Random) -> tuple[bytes, bool]:
    """One (possibly broken) request; the flag says whether to half-close after sending it."""
    method = rng.choice(METHODS) if rng.random() < 0.3 else rng.choice(["GET", "POST", "DELETE"])
    path = rng.choice(PATHS) if rng.random() < 0.5 else rng.choice(["/v1/status", "/v1/transfers", "/v1/conditions", "/v1/apps"])
    query = rng.choice(QUERIES) if rng.random() < 0.6 else ""
    version = "HTTP/1.1" if rng.random() < 0.85 else rng.choice(["HTTP/1.0", "HTTP/2.0", "HTTP/9.9", "HTTP/1.1x", "", "FOO", "HTTP/1.1 extra"])
    eol = b"\r\n" if rng.random() < 0.95 else b"\n"
    if method == "POST" and path == "/v1/transfers" and rng.random() < 0.7:
        body = json_body(rng) if rng.random() < 0.6 else odd_body(rng)
    elif rng.random() < 0.2:
        body = odd_body(rng)
    else:
        body = b""
    headers = [b"Host: drowse"]
    if rng.random() < 0.8:
        headers.append(b"Connection: close")
    half_close = rng.random() < 0.3
    framing = rng.randrange(14)
    if framing == 0:
        headers.append(b"Content-Length: %d" % (len(body) + rng.randint(1, 100)))  # body never completes
        half_close = True
    elif framing == 1:
        headers.append(b"Content-Length: " + rng.choice([b"-1", b"abc", b"99999999999999999999", b"1e3", b" ", b"0x10", b"+5"]))
    elif framing == 2:
        headers += [b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 1)]
    elif framing == 3:  # chunked, well formed
        headers.append(b"Transfer-Encoding: chunked")
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    elif framing == 4:  # chunked, broken sizes
        headers.append(b"Transfer-Encoding: chunked")
        body = rng.choice([b"zz\r\nabc\r\n0\r\n\r\n", b"ffffffffffffffffffff\r\nabc\r\n", b"-1\r\n\r\n", b"5\r\nab"])
        half_close = True
    elif framing == 5:
        headers += [b"Transfer-Encoding: chunked", b"Content-Length: %d" % len(body)]
    elif framing == 6:  # one header over any sane size
        headers.append(b"X-Big: " + b"a" * rng.choice([9000, 70000, 100000]))
    elif framing == 7:
        headers += [b"X-%d: v" % i for i in range(rng.choice([100, 1000, 5000]))]
    elif framing == 8:
        headers.append(rng.choice([b"No colon here", b"X-Nul: a\x00b", b"X-Utf: \xff\xfe", b" folded: line", b": empty-name",
                                   b"X-A:\r\n continued", b"Expect: 100-continue", b"Connection: keep-alive, upgrade",
                                   b"Upgrade: h2c", b"Content-Type: text/plain"]))
        headers.append(b"Content-Length: %d" % len(body))
    elif framing == 9:  # Content-Length shorter than the body: the rest looks like the next request
        headers.append(b"Content-Length: %d" % (len(body) // 2))
    else:
        headers.append(b"Content-Length: %d" % len(body))
    # latin-1 keeps "\xff" a single raw byte: invalid UTF-8 on the request line.
    line = method.encode("latin-1") + b" " + (path + query).encode("latin-1") + (b" " + version.encode() if version else b"")
    return line + eol + eol.join(headers) + eol + eol + body, half_close


def garbage(rng: random.Random) -> tuple[bytes, bool]:
    kind = rng.randrange(5)
    if kind == 0:
        return rng.randbytes(rng.randint(1, 4000)), True
    if kind == 1:
        return b"\r\n" * rng.randint(1, 2000), True
    if kind == 2:
        return b"GET /v1/status HTTP/1.1\r\nHost: drowse\r\n", True  # headers never end
    if kind == 3:
        return b"GET " + b"/v1/status?" + b"a=" * rng.choice([10000, 50000]) + b" HTTP/1.1\r\n\r\n", True
    return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", True


def pipelined(rng: random.Random) -> tuple[bytes, bool, int]:
    parts = []
    for _ in range(rng.randint(2, 8)):
        q = rng.choice(QUERIES)
        parts.append(b"GET /v1/status" + q.encode("latin-1") + b" HTTP/1.1\r\nHost: drowse\r\n\r\n")
    if rng.random() < 0.5:
        data, _ = request_bytes(rng)
        parts.insert(rng.randrange(len(parts)), data)
    return b"".join(parts), rng.random() < 0.5, len(parts)


def one_case(sock_path, rng: random.Random, stats: dict) -> None:
    kind = rng.random()
    if kind < 0.75:
        data, half_close = request_bytes(rng)
        expected = 1
    elif kind < 0.85:
        data, half_close = garbage(rng)
        expected = 1
    else:
        data, half_close, expected = pipelined(rng)
    try:
        s = connect(sock_path, timeout=5)
    except OSError as e:
        raise AssertionError(f"could not connect to drowsed: {e!r}") from None
    with s:
        if rng.random() < 0.05:  # the client gives up half way through
            send_all(s, data[: max(1, len(data) // 2)])
            stats["abandoned"] = stats.get("abandoned", 0) + 1
            return
        send_all(s, data)
        if half_close:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        # As many answers as requests were sent (a broken one may end the connection sooner);
        # the deadline only matters for a request the server is still waiting to see the end of.
        deadline = time.monotonic() + 1
        for _ in range(expected):
            status, _ = read_response(s, deadline)
            stats[status] = stats.get(status, 0) + 1
            if status is None:
                break


def assert_answers(d, pid: int, seed: int, cases: int) -> None:
    alive = d.proc.poll() is None and pid_alive(pid)
    if not alive:
        d.proc.wait(timeout=5)  # so that exit_note() tells how it ended
    assert alive, (
        f"drowsed died after {cases} fuzz cases (seed {seed}): {d.exit_note()}")
    status, body = request(d.socket, "GET", "/v1/status", timeout=10)
    assert status == 200, f"GET /v1/status answered {status} after {cases} cases (seed {seed}): {body[:300]!r}"


def test_drowsed_survives_mutated_requests(make_drowse, nginx):
    d = make_drowse()
    d.add_app(APP, fetch=d.recorder(APP))
    d.start()
    pid = d.proc.pid
    rng = random.Random(SEED)
    stats: dict = {}
    cases = 0

    # The known killers first, so that a short budget always covers them.
    for q in ["?=", "?a=b&=c", "?&&=", "?=&="]:
        request(d.socket, "GET", "/v1/transfers" + q, timeout=5)
        cases += 1
        assert_answers(d, pid, SEED, cases)
    for n in ["1e300", "1e999", "-0", "1.7976931348623157e308", '"99999999999999999999d"']:
        body = '{"url": %s, "app": %s, "timeout_resource": %s}' % (json.dumps(DEAD_URL), json.dumps(APP), n)
        request(d.socket, "POST", "/v1/transfers", body.encode(), timeout=5)
        cases += 1
        assert_answers(d, pid, SEED, cases)

    started = time.monotonic()
    while time.monotonic() - started < BUDGET:
        for _ in range(BATCH):
            one_case(d.socket, rng, stats)
            cases += 1
        # Cancel whatever valid transfers the batch created, so retries do not pile up.
        request(d.socket, "POST", f"/v1/apps/{APP}/quit", timeout=10)
        assert_answers(d, pid, SEED, cases)

    print(f"\n[fuzz] seed {SEED}: {cases} cases in {time.monotonic() - started:.0f} s; answers by status: "
          + ", ".join(f"{k}: {v}" for k, v in sorted(stats.items(), key=lambda kv: str(kv[0]))))
    assert cases >= 1000, f"only {cases} cases ran in {BUDGET} s"
    assert d.proc.poll() is None and d.proc.pid == pid, "drowsed restarted"
    assert sum(v for k, v in stats.items() if isinstance(k, int) and 200 <= k < 300) > 0, stats
    assert sum(v for k, v in stats.items() if isinstance(k, int) and 400 <= k < 500) > 0, stats

    # Still a working agent: a normal transfer goes through.
    url, sha, _ = nginx.add_file("after-fuzz.bin", 64 * 1024)
    tid = d.download(url, APP, "--to", str(d.base / "after-fuzz.bin"), "--sha256", sha)
    wait_until(lambda: d.transfer(tid)["state"] == "completed", 20, what="a transfer after the fuzzing")
    assert d.proc.pid == pid and pid_alive(pid)
