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
    """Accepts every connection with CONNACK 0; at the first SUBSCRIBE either closes the
    connection ("drop") or answers SUBACK with the failure code ("refuse")."""

    def __init__(self, mode: str):
        self.mode = mode
        self.port = free_port()
        self.connections: list[float] = []
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


def run_against(make_drowse, mode: str, seconds: float) -> tuple[list[float], dict]:
    broker = ScriptedBroker(mode)
    try:
        d = make_drowse()
        d.set_mqtt(url=f"mqtt://127.0.0.1:{broker.port}", keepalive="60s")
        d.add_app("a", fetch=["/bin/true"], minimum_interval="1h")
        d.start()
        wait_until(lambda: broker.connections, 10, what="the first connection")
        time.sleep(seconds)  # the point: how many reconnects this much time holds
        status = d.json("status")["mqtt"]
        d.stop()
        first = broker.connections[0]
        return [t - first for t in broker.connections], status
    finally:
        broker.stop()


def test_a_broker_that_drops_at_subscribe_meets_a_growing_backoff(make_drowse):
    times, status = run_against(make_drowse, "drop", 8)
    # Reconnecting every second would be 9 connections in 8 s; the backoff allows at most
    # 1 + (1 + 2 + 4 ...): the fifth attempt cannot come before 0.5 + 1 + 2 + 4 = 7.5 s.
    assert len(times) <= 5, f"{len(times)} connections in 8 s: {times}"
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(b >= a * 0.9 for a, b in zip(gaps, gaps[1:])), f"gaps do not grow: {gaps}"
    assert not status["subscribed"] and status["failed_attempts"] >= 2, status
    assert status["last_error"], status


def test_a_refused_subscription_is_said_in_status_and_backs_off(make_drowse):
    times, status = run_against(make_drowse, "refuse", 8)
    assert len(times) <= 5, f"{len(times)} connections in 8 s: {times}"
    assert not status["subscribed"] and status["failed_attempts"] >= 2, status
    assert "refused the subscription" in (status["last_error"] or ""), status
