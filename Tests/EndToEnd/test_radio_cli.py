"""`drowse radio` on captures written here (docs/contract.md, "Other commands"): the figures of a
known capture, and a clear error, never a crash, for a cut, foreign or damaged file."""

import json
import random
import struct
import subprocess

import pytest

from drowse_e2e import DROWSE, binaries_present

pytestmark = pytest.mark.skipif(not binaries_present(), reason="drowse binaries not built")

BROKER = 1883


def tcp_v4(src_port, dst_port, flags, payload=b""):
    tcp = struct.pack("!HHIIBBHHH", src_port, dst_port, 1, 1, 0x50, flags, 502, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))
    return ip + tcp


def cooked2(ip):
    """Linux cooked capture v2 (tcpdump -i any): protocol first, then 18 bytes."""
    return struct.pack("!H", 0x0800) + bytes(18) + ip


def pcap(frames, big_endian=True, nano=True, link=276):
    e = ">" if big_endian else "<"
    out = struct.pack(e + "IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, 262144, link)
    scale = 10**9 if nano else 10**6
    for t, frame in frames:
        whole = int(t)
        out += struct.pack(e + "IIII", whole, round((t - whole) * scale), len(frame), len(frame)) + frame
    return out


def capture():
    """Ten minutes: a ping every 60 s, and a fetch riding the one at 300 s."""
    t0, frames = 1_767_571_200.0, []
    for m in range(10):
        t = t0 + 60 * m
        frames += [(t, cooked2(tcp_v4(40000, BROKER, 0x18, b"\xc0\x00"))),
                   (t + 0.02, cooked2(tcp_v4(BROKER, 40000, 0x18, b"\xd0\x00"))),
                   (t + 0.05, cooked2(tcp_v4(40000, BROKER, 0x10)))]
        if m == 5:
            frames += [(t + 1, cooked2(tcp_v4(50000, 80, 0x02))),
                       (t + 1.1, cooked2(tcp_v4(50000, 80, 0x18, b"GET / HTTP/1.1\r\n\r\n")))]
    return frames


def radio(path, *args):
    return subprocess.run([str(DROWSE), "radio", str(path), *args], capture_output=True, text=True, timeout=30)


def test_figures_of_a_known_capture(tmp_path):
    f = tmp_path / "ten-minutes.pcap"
    f.write_bytes(pcap(capture()))
    r = radio(f, "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["link_type"] == "Linux cooked v2"
    assert (j["packets"], j["skipped_not_ip"], j["keepalive_packets"]) == (32, 0, 20)
    # LTE's tail is 11.576 s: each minute's ping is a wake, nine of them keepalive-only.
    assert (j["wakes"], j["keepalive_wakes"]) == (10, 9)
    assert abs(j["span_seconds"] - 540.05) < 1e-3
    # The same capture made 10 times faster, read with --compress 10: the same figures.
    fast = [(1_767_571_200.0 + (t - 1_767_571_200.0) / 10, b) for t, b in capture()]
    g = tmp_path / "fast.pcap"
    g.write_bytes(pcap(fast, big_endian=False, nano=False))
    k = json.loads(radio(g, "--json", "--compress", "10").stdout)
    assert (k["wakes"], k["keepalive_wakes"]) == (10, 9)
    assert abs(k["radio_on_seconds"] - j["radio_on_seconds"]) < 0.01
    assert abs(k["joules"] - j["joules"]) < 0.01
    # Pings on another port are ordinary traffic.
    other = json.loads(radio(f, "--json", "--broker-port", "8883").stdout)
    assert (other["wakes"], other["keepalive_wakes"]) == (10, 0)
    text = radio(f, "--model", "3g")
    assert text.returncode == 0 and "keepalive-only wakes   9" in text.stdout, text.stdout


@pytest.mark.parametrize("name, data, says", [
    ("empty", b"", "too short"),
    ("text", b"this is not a capture at all\n" * 4, "not a pcap file"),
    ("pcapng", bytes.fromhex("0a0d0d0a") + bytes(60), "pcapng"),
    ("cut", pcap(capture())[:-7], "truncated: packet 32"),
    ("wifi", pcap(capture(), link=127), "unsupported: link type 127"),
])
def test_refuses_a_bad_file_with_a_reason(tmp_path, name, data, says):
    f = tmp_path / f"{name}.pcap"
    f.write_bytes(data)
    r = radio(f)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert says in r.stderr, r.stderr
    assert str(f) in r.stderr


def test_damaged_files_never_crash_it(tmp_path):
    good = pcap(capture())
    rng = random.Random(11)
    codes = set()
    for i in range(60):
        bad = bytearray(good)
        for _ in range(rng.randint(1, 12)):
            bad[rng.randrange(24, len(bad))] = rng.randrange(256)
        if i % 3 == 0:
            bad = bad[:rng.randrange(len(bad))]
        f = tmp_path / "bad.pcap"
        f.write_bytes(bytes(bad))
        r = radio(f, "--json")
        assert r.returncode in (0, 1), (i, r.returncode, r.stderr)
        if r.returncode == 0:
            json.loads(r.stdout)
        else:
            assert r.stderr.startswith("Error: "), r.stderr
        codes.add(r.returncode)
    assert codes == {0, 1}
