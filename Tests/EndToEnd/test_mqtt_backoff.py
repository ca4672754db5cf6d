"""A session counts as up only once the broker has confirmed its subscriptions: a broker that
accepts the connection and then drops it at SUBSCRIBE, or refuses the subscription (SUBACK 0x80),
meets the growing reconnect backoff (1, 2, 4, 8 … s), not a reconnect every second, and
`drowse status` says why. The broker here is a scripted MQTT 3.1.1 server on loopback."""
from __future__ import annotations

import socket
import threading
import time

from drowse_e2e import free_port, wait_until


class ScriptedBroker:
    """Accepts every MQTT 3.1.1 connection with CONNACK 0 (refusing other versions as a 3.1.1
    server does); at the first SUBSCRIBE either closes the connection ("drop") or answers SUBACK
    with the failure code ("refuse")."""

    def __init__(self, mode: str):
        self.mode = mode
        self.port = free_port()
        self.connections: list[float] = []
        self.refused_versions: list[int] = []
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.server.settimeout(0.2)
        self.stopping = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.server.accept()
            except socket.timeout:
                continue
            self.connections.append(time.monotonic())
            threading.Thread(target=self.session, args=(conn,), daemon=True).start()

    @staticmethod
    def read_packet(conn: socket.socket) -> tuple[int, bytes] | None:
        head = conn.recv(1)
        if not head:
            return None
        length, shift = 0, 0
        while True:
            b = conn.recv(1)
            if not b:
                return None
            length |= (b[0] & 0x7F) << shift
            shift += 7
            if not b[0] & 0x80:
                break
        body = b""
        while len(body) < length:
            chunk = conn.recv(length - len(body))
            if not chunk:
                return None
            body += chunk
        return head[0], body

    def session(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            while True:
                p = self.read_packet(conn)
                if p is None:
                    return
                kind, body = p
                if kind >> 4 == 1:  # CONNECT
                    if body[6] != 4:
                        # What a 3.1.1 server says to MQTT 5: unacceptable protocol version.
                        self.refused_versions.append(body[6])
                        conn.sendall(bytes([0x20, 0x02, 0x00, 0x01]))
                        return
                    conn.sendall(bytes([0x20, 0x02, 0x00, 0x00]))
                elif kind >> 4 == 8:  # SUBSCRIBE
                    if self.mode == "drop":
                        return
                    mid = body[:2]
                    conn.sendall(bytes([0x90, 0x03]) + mid + bytes([0x80]))
        except OSError:
            return
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopping = True
        self.thread.join(timeout=2)
        self.server.close()


def run_against(make_drowse, mode: str, connections: int) -> tuple[list[float], dict]:
    """Runs drowsed against the scripted broker until it has connected `connections` times;
    returns the connection times (from the first) and the MQTT part of `drowse status`."""
    broker = ScriptedBroker(mode)
    try:
        d = make_drowse()
        d.set_mqtt(url=f"mqtt://127.0.0.1:{broker.port}", keepalive="60s")
        d.add_app("a", fetch=["/bin/true"], minimum_interval="1h")
        d.start()
        wait_until(lambda: len(broker.connections) >= connections, 30, what=f"{connections} connections")
        status = d.json("status")["mqtt"]
        d.stop()
        # MQTT 5 is tried once, then 3.1.1 only.
        assert broker.refused_versions == [5], broker.refused_versions
        first = broker.connections[0]
        return [t - first for t in broker.connections[:connections]], status
    finally:
        broker.stop()


def check_backoff(times: list[float]) -> None:
    # Attempt n waits within [c/2, c] for c = 1, 2, 4: four connections take at least
    # 0.5 + 1 + 2 = 3.5 s. Reconnecting every second (the old rule: the backoff reset at each
    # CONNACK) takes about 2 s for four.
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[-1] >= 3.5 * 0.95, f"4 connections in {times[-1]:.1f} s: gaps {gaps}"
    assert gaps[2] >= 2 * 0.95 and gaps[1] >= 1 * 0.95, f"gaps do not grow: {gaps}"


def test_a_broker_that_drops_at_subscribe_meets_a_growing_backoff(make_drowse):
    times, status = run_against(make_drowse, "drop", 4)
    check_backoff(times)
    assert not status["subscribed"] and status["failed_attempts"] >= 3, status
    assert status["last_error"], status


def test_a_refused_subscription_is_said_in_status_and_backs_off(make_drowse):
    times, status = run_against(make_drowse, "refuse", 4)
    check_backoff(times)
    assert not status["subscribed"] and status["failed_attempts"] >= 3, status
    assert "refused the subscription" in (status["last_error"] or ""), status
