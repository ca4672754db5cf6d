"""A RabbitMQ cluster on loopback for the end-to-end tests (Debian's rabbitmq-server, 3.10, with
its MQTT plugin): each node is its own Erlang VM with its own node name, AMQP, distribution and
MQTT ports, data and log dirs under the test's temp dir, one shared Erlang cookie and a private
epmd on a port of its own (so a test never meets another RabbitMQ or epmd on this machine).

Also a minimal MQTT 3.1.1 QoS 1 publisher (`publish_qos1`) that reports which messages the broker
acknowledged (PUBACK), which is what "every acknowledged notification runs exactly once" counts.

Only the standard library is used. Everything started here is in a process group of its own
and is killed by `RabbitCluster.stop()`; `drowse_e2e.kill_strays(dir)` catches the rest (every
process started here has the cluster's dir in its environment).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

from drowse_e2e import DROWSE, free_port, port_open, stop_process, wait_until

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
RABBITMQ_SERVER = RABBIT_BIN / "rabbitmq-server"  # not /usr/sbin's wrapper, which switches to the rabbitmq user
EPMD = shutil.which("epmd", path="/usr/bin:/usr/lib/erlang/bin") or "/usr/bin/epmd"

# Long enough for any offline period a test makes: RabbitMQ's default (24 h) would drop a session.
SUBSCRIPTION_TTL_MS = 7 * 24 * 3600 * 1000


def rabbitmq_installed() -> bool:
    return RABBITMQ_SERVER.exists() and Path(EPMD).exists()


class RabbitNode:
    def __init__(self, cluster: "RabbitCluster", index: int):
        self.cluster = cluster
        self.index = index
        self.name = f"drowse{index}@localhost"
        self.dir = cluster.dir / f"node{index}"
        self.amqp_port = free_port()
        self.dist_port = free_port()
        self.mqtt_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.out = self.dir / "server.out"
        self.started_at = 0.0
        self.start_seconds: list[float] = []  # how long each start took (until the MQTT port listened)

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.mqtt_port}"

    def env(self) -> dict[str, str]:
        d = self.dir
        return {
            **self.cluster.env(),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.cluster.dir / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(d / "pid"),
            # The distribution listener on loopback only (the node's AMQP and MQTT listeners are
            # set in rabbitmq.conf).
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def write_config(self) -> None:
        (self.dir / "log").mkdir(parents=True, exist_ok=True)
        (self.dir / "mnesia").mkdir(parents=True, exist_ok=True)
        lines = [
            f"listeners.tcp.1 = 127.0.0.1:{self.amqp_port}",
            f"mqtt.listeners.tcp.1 = 127.0.0.1:{self.mqtt_port}",
            "mqtt.allow_anonymous = true",
            "log.console = false",
            "log.file.level = info",
            # A test's disk is whatever the machine has: never block publishers over it.
            "disk_free_limit.absolute = 1MB",
        ]
        if self.cluster.subscription_ttl_ms is not None:  # None: RabbitMQ's default (24 h)
            lines.append(f"mqtt.subscription_ttl = {self.cluster.subscription_ttl_ms}")
        if self.cluster.queue_type == "quorum":
            lines.append("mqtt.durable_queue_type = quorum")
        if self.cluster.definitions is not None:
            lines.append(f"load_definitions = {self.cluster.dir / 'definitions.json'}")
        if self.index > 1:
            # A blank node joins the first one as it boots (peer discovery from a fixed list), which
            # is `rabbitmqctl join_cluster` without three CLI runs per node (an Erlang VM each, 5 to
            # 40 s apiece on a loaded 2-core machine). A node that restarts keeps its cluster.
            lines += ["cluster_formation.peer_discovery_backend = classic_config",
                      f"cluster_formation.classic_config.nodes.1 = {self.cluster.nodes[0].name}"]
        (self.dir / "rabbitmq.conf").write_text("\n".join(lines) + "\n")
        (self.dir / "advanced.config").write_text("[].\n")

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is already running"
        self.write_config()
        out = open(self.out, "ab")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen([str(RABBITMQ_SERVER)], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(self.dir),
                                     env=self.env())
        out.close()

    def wait_started(self, timeout: float = 90.0) -> float:
        """Waits until the node's MQTT listener accepts connections; returns how long the start took."""
        assert self.proc is not None
        wait_until(lambda: self.proc.poll() is not None or port_open(self.mqtt_port), timeout, interval=0.1,
                   what=f"{self.name} to listen for MQTT on {self.mqtt_port}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
        took = time.monotonic() - self.started_at
        self.start_seconds.append(took)
        return took

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, wait_closed: bool = True) -> None:
        """kill -9 of the node's whole process group (beam.smp, erl_child_setup, inet_gethost)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.proc = None
        if wait_closed:
            wait_until(lambda: not port_open(self.mqtt_port), 10, what=f"{self.name}'s MQTT port to close")

    def stop(self, timeout: float = 60.0) -> None:
        """A clean stop (SIGTERM: RabbitMQ shuts down in order), then whatever is left of the group."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        stop_process(self.proc, signal.SIGTERM, timeout)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc = None

    def log_tail(self, n: int = 60000) -> str:
        parts = []
        for p in [self.out, *sorted((self.dir / "log").glob("*.log"))]:
            try:
                parts.append(f"--- {p}\n" + p.read_text(errors="replace")[-n:])
            except FileNotFoundError:
                pass
        return "\n".join(parts)


class RabbitCluster:
    """`n` RabbitMQ nodes on 127.0.0.1 joined into one cluster. queue_type "quorum" sets
    `mqtt.durable_queue_type = quorum` (the MQTT sessions' queues replicated on every node);
    "classic" keeps RabbitMQ's default (a session's queue lives on one node)."""

    def __init__(self, workdir: Path, n: int = 3, queue_type: str = "quorum",
                 subscription_ttl_ms: int | None = SUBSCRIPTION_TTL_MS, users: list[dict] | None = None):
        assert queue_type in ("quorum", "classic")
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.queue_type = queue_type
        self.subscription_ttl_ms = subscription_ttl_ms
        self.epmd_port = free_port()
        self.epmd: subprocess.Popen | None = None
        (self.dir / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        cookie = self.dir / ".erlang.cookie"
        cookie.write_text(os.urandom(16).hex().upper())
        os.chmod(cookie, 0o400)
        self.nodes = [RabbitNode(self, i + 1) for i in range(n)]
        # Users beside guest (anonymous MQTT clients are guest), loaded when the nodes first boot:
        # {"name", "password", "permissions": (configure, write, read), "topic": (write, read)},
        # the patterns as `rabbitmqctl set_permissions` and `set_topic_permissions` take them.
        self.definitions = None
        if users:
            self.definitions = definitions([{"name": "guest", "password": "guest", "tags": ["administrator"],
                                             "permissions": (".*", ".*", ".*")}, *users])
            (self.dir / "definitions.json").write_text(json.dumps(self.definitions, indent=1))

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        return {
            **env,
            "HOME": str(self.dir),  # the shared Erlang cookie: $HOME/.erlang.cookie, for nodes and rabbitmqctl
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),  # not /etc/rabbitmq's
            "RABBITMQ_CTL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "DROWSE_E2E_DIR": str(self.dir),  # kill_strays(dir) finds every process started here
        }

    def start(self, timeout: float = 120.0) -> None:
        (self.dir / "rabbitmq-env.conf").write_text("")
        out = open(self.dir / "epmd.out", "ab")
        self.epmd = subprocess.Popen([EPMD, "-port", str(self.epmd_port)], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=self.env())
        out.close()
        wait_until(lambda: self.epmd.poll() is not None or port_open(self.epmd_port), 10, what="epmd to listen")
        first = self.nodes[0]
        first.start()
        first.wait_started(timeout)
        for node in self.nodes[1:]:  # in parallel: each joins the first as it boots
            node.start()
        for node in self.nodes[1:]:
            node.wait_started(timeout)
        # Every node takes a session and a QoS 1 publish (the MQTT plugin's client-id tracking, a
        # Raft cluster of its own, settles after the joins: a CONNECT can be refused meanwhile).
        for node in self.nodes:
            wait_until(lambda: publish_qos1(node.mqtt_port, "e2e/ready", [b"x"], timeout=5)[0], timeout,
                       interval=0.2, what=f"{node.name} to acknowledge a publish")
        # One cluster: a message published on the first node reaches a subscriber on each other one.
        for node in self.nodes[1:]:
            topic = f"e2e/cluster-check/{node.index}"
            got = receive_one(node.mqtt_port, topic, lambda: publish_qos1(first.mqtt_port, topic, [b"x"]))
            assert got == b"x", f"{node.name} is not in {first.name}'s cluster:\n{self.logs()}"

    def stop(self) -> None:
        for node in self.nodes:
            node.kill(wait_closed=False)
        if self.epmd is not None:
            stop_process(self.epmd, signal.SIGKILL)
            self.epmd = None

    def logs(self) -> str:
        return "\n".join(f"===== {n.name}\n{n.log_tail(20000)}" for n in self.nodes)


def fleet_per_node(nodes: list[RabbitNode], timeout: str = "3s") -> dict[str, list[dict]]:
    """`drowse fleet --json` against each of `nodes`: node name -> the devices it listed."""
    out = {}
    for n in nodes:
        r = subprocess.run([str(DROWSE), "fleet", "--broker", n.url, "--json", "--timeout", timeout],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"drowse fleet --broker {n.url}: {r.stderr}"
        out[n.name] = json.loads(r.stdout)
    return out


def definitions(users: list[dict]) -> dict:
    """RabbitMQ definitions (what `load_definitions` imports) for `users` on the vhost "/"."""
    def password_hash(password: str) -> str:  # rabbit_password_hashing_sha256: salt ++ sha256(salt ++ password)
        salt = os.urandom(4)
        return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()

    return {
        "vhosts": [{"name": "/"}],
        "users": [{"name": u["name"], "password_hash": password_hash(u["password"]),
                   "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": u.get("tags", [])} for u in users],
        "permissions": [{"user": u["name"], "vhost": "/", "configure": u["permissions"][0],
                         "write": u["permissions"][1], "read": u["permissions"][2]} for u in users],
        "topic_permissions": [{"user": u["name"], "vhost": "/", "exchange": "amq.topic", "write": u["topic"][0],
                               "read": u["topic"][1]} for u in users if "topic" in u],
    }


# ----------------------------------------------------------------------------- MQTT 3.1.1 clients

def _remaining_length(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n % 128, n // 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _packet(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + _remaining_length(len(body)) + body


def _utf8(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def _read_packet(sock: socket.socket) -> tuple[int, bytes]:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return buf

    head = exactly(1)[0]
    length, mult = 0, 1
    while True:
        b = exactly(1)[0]
        length += (b & 0x7F) * mult
        mult *= 128
        if not b & 0x80:
            break
    return head, exactly(length)


def _connect(s: socket.socket, client_id: str, username: str | None = None, password: str | None = None,
             clean: bool = True) -> int:
    """Sends CONNECT; returns the CONNACK's return code (0: accepted)."""
    flags = (0x02 if clean else 0) | (0x80 if username is not None else 0) | (0x40 if password is not None else 0)
    body = _utf8("MQTT") + bytes([4, flags]) + struct.pack("!H", 30) + _utf8(client_id)
    if username is not None:
        body += _utf8(username)
    if password is not None:
        body += _utf8(password)
    s.sendall(_packet(0x10, body))
    head, ack = _read_packet(s)
    return ack[1] if head >> 4 == 2 and len(ack) >= 2 else -1


def subscribe_result(port: int, topic: str, client_id: str, username: str, password: str,
                     timeout: float = 10.0) -> str:
    """What a QoS 1 SUBSCRIBE to `topic` by this user, in the persistent session `client_id`, gets:
    "refused login (rc N)", "granted N", "failure (0x80)" or "connection closed"."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            rc = _connect(s, client_id, username, password, clean=False)
            if rc != 0:
                return f"refused login (rc {rc})"
            s.sendall(_packet(0x82, struct.pack("!H", 1) + _utf8(topic) + bytes([1])))
            head, body = _read_packet(s)
            if head >> 4 != 9:
                return f"packet {head:#x}"
            return "failure (0x80)" if body[2] == 0x80 else f"granted {body[2]}"
    except (OSError, ConnectionError):
        return "connection closed"


def publish_qos1(port: int, topic: str, payloads: list[bytes], client_id: str = "",
                 timeout: float = 10.0) -> list[bool]:
    """Publishes each payload at QoS 1 over one clean-session connection to 127.0.0.1:port, each
    after the previous one's PUBACK. Returns, per payload, whether the broker acknowledged it
    (a refused or lost connection leaves the rest unacknowledged)."""
    acked = [False] * len(payloads)
    client_id = client_id or f"e2e-pub-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            if _connect(s, client_id) != 0:
                return acked
            for i, p in enumerate(payloads):
                pid = i + 1
                s.sendall(_packet(0x32, _utf8(topic) + struct.pack("!H", pid) + p))
                while True:
                    head, body = _read_packet(s)
                    if head >> 4 == 4 and struct.unpack("!H", body[:2])[0] == pid:
                        acked[i] = True
                        break
            s.sendall(bytes([0xE0, 0]))
    except (OSError, ConnectionError):
        pass
    return acked


def receive_one(port: int, topic: str, then, timeout: float = 10.0) -> bytes | None:
    """Subscribes (QoS 0, clean session) to `topic` on 127.0.0.1:port, calls `then()` once the
    SUBACK is in, and returns the payload of the first message received (None if none came)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        if _connect(s, f"e2e-sub-{os.getpid()}-{time.monotonic_ns() % 10**9}") != 0:
            return None
        s.sendall(_packet(0x82, struct.pack("!H", 1) + _utf8(topic) + bytes([0])))
        while _read_packet(s)[0] >> 4 != 9:
            pass
        then()
        try:
            while True:
                head, body = _read_packet(s)
                if head >> 4 == 3:
                    return _publish_parts(head, body)[1]
        except (OSError, ConnectionError):
            return None


def _publish_parts(head: int, body: bytes) -> tuple[str, bytes]:
    """A PUBLISH packet's topic and payload."""
    n = struct.unpack("!H", body[:2])[0]
    return body[2:2 + n].decode(), body[2 + n + (2 if (head >> 1) & 3 else 0):]


def retained_statuses(port: int, device_ids: list[str], prefix: str = "drowse", quiet: float = 1.0,
                      timeout: float = 10.0) -> dict[str, dict]:
    """The retained statuses the node on 127.0.0.1:port hands to one subscription (QoS 0, clean
    session) to each device's exact status topic, `<prefix>/<id>/status` (RabbitMQ 3.10 serves
    retained messages to exact topics only, not to `drowse fleet`'s `<prefix>/+/status`): device
    id -> status. Collected until nothing came for `quiet` seconds."""
    out: dict[str, dict] = {}
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        if _connect(s, f"e2e-sub-{os.getpid()}-{time.monotonic_ns() % 10**9}") != 0:
            return out
        s.sendall(_packet(0x82, struct.pack("!H", 1) + b"".join(_utf8(f"{prefix}/{d}/status") + b"\0" for d in device_ids)))
        s.settimeout(quiet)
        try:
            while True:
                head, body = _read_packet(s)
                if head >> 4 == 3 and head & 1:
                    topic, payload = _publish_parts(head, body)
                    out[topic.split("/")[-2]] = json.loads(payload)
        except (OSError, ConnectionError):  # the quiet time passed (socket.timeout is an OSError)
            pass
    return out
