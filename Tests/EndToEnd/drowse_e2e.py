"""Helpers for Drowse's end-to-end tests: real drowsed/drowse binaries, a real mosquitto broker
and a real nginx, all on 127.0.0.1 with free ports and private temp dirs.

Only the standard library is used here; conftest.py turns these into pytest fixtures.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("DROWSE_BIN_DIR", str(REPO / ".build" / "debug")))
DROWSED = BIN_DIR / "drowsed"
DROWSE = BIN_DIR / "drowse"
# drowse is one multi-call program, the daemon when run as `drowsed`: SwiftPM builds only
# `drowse`, and the name `drowsed` is a link beside it (deploy/common.sh's link_drowsed).
if DROWSE.is_file() and not os.path.lexists(DROWSED):
    os.symlink("drowse", DROWSED)
MOSQUITTO = shutil.which("mosquitto", path="/usr/sbin:/usr/bin:/sbin:/bin") or "/usr/sbin/mosquitto"
MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
NGINX = shutil.which("nginx", path="/usr/sbin:/usr/bin:/sbin:/bin") or "/usr/sbin/nginx"

DEVICE_ID = "e2e-dev"


# ----------------------------------------------------------------------------- small helpers

def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Polls `pred` until it returns something truthy (which is returned) or `timeout` passes."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # a predicate that raises counts as "not yet"
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_random_file(path: Path, size: int) -> str:
    """Writes `size` random bytes to `path`, returns their sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 1 << 20))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    return h.hexdigest()


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie (PID 1 in a container may never reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        state = stat.rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False


def ctx_switches(pid: int) -> dict[str, int]:
    """Context switches per thread (voluntary + involuntary), by thread id: a thread that wakes
    adds one each time, so a 100 Hz timer adds about 100 a second and a sleeping one none."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[task.name] = sum(int(line.split()[1]) for line in (task / "status").read_text().splitlines()
                                 if "ctxt_switches" in line)
        except FileNotFoundError:
            pass
    return out


def stray_pids(marker: str, zombies: bool = False) -> list[int]:
    """The processes (not this one; zombies too if asked) whose command line or environment
    mentions `marker` (a test's temp dir): drowsed, its handlers, and their children (which
    inherit DROWSE_SOCKET in their environment)."""
    me = os.getpid()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker not in cmdline and marker not in (entry / "environ").read_bytes().decode(errors="replace"):
                continue
        except OSError:
            continue
        if zombies or pid_alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def kill_strays(marker: str) -> None:
    """SIGKILLs every process (and its process group) whose command line or environment mentions
    `marker` (our temp dir), so that handlers orphaned by a killed daemon never outlive a test."""
    my_pgid = os.getpgid(0)
    for pid in stray_pids(marker, zombies=True):
        try:
            pgid = os.getpgid(pid)
            if pgid not in (my_pgid, 0, 1):
                os.killpg(pgid, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def stop_process(proc: subprocess.Popen | None, sig=signal.SIGTERM, timeout: float = 10.0) -> int | None:
    """Sends `sig`, waits up to `timeout`, then SIGKILLs. Returns the exit status."""
    if proc is None:
        return None
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode


def make_tempdir(prefix: str) -> Path:
    # Short paths: the daemon's Unix socket lives in here (sun_path is 108 bytes).
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, 0o755)  # handlers may run as another user and must reach their scripts
    return d


# ----------------------------------------------------------------------------- mosquitto

class Broker:
    """A real mosquitto on 127.0.0.1:<port>, with its own config, log and persistence dir."""

    def __init__(self, workdir: Path, port: int | None = None, persistence: bool = True):
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.persistence = persistence
        self.conf = self.dir / "mosquitto.conf"
        self.log = self.dir / "mosquitto.log"
        self.out = self.dir / "mosquitto.out"
        self.proc: subprocess.Popen | None = None
        self.extra_lines: list[str] = []  # appended to mosquitto.conf, e.g. a bridge (bridge_to)

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def listener_lines(self) -> list[str]:
        """The listener part of mosquitto.conf (subclasses add TLS, ACLs, ...)."""
        return [f"listener {self.port} 127.0.0.1", "allow_anonymous true"]

    def config_lines(self) -> list[str]:
        return [
            *self.listener_lines(),
            "user root" if os.geteuid() == 0 else "",
            f"persistence {'true' if self.persistence else 'false'}",
            f"persistence_location {self.dir}/",
            "autosave_interval 1",
            f"log_dest file {self.log}",
            "log_type all",
            "log_timestamp true",
            *self.extra_lines,
        ]

    def bridge_to(self, central: "Broker", prefix: str = "drowse", name: str = "edge") -> None:
        """Makes this broker an edge bridged to `central`, as deploy/mosquitto/bridge.conf does:
        notifications (device and group topics) come in, statuses go out, QoS 1, cleansession false.
        Takes effect at the next start()."""
        self.extra_lines = [
            f"connection {name}-to-central",
            f"address 127.0.0.1:{central.port}",
            f"remote_clientid bridge-{name}",
            "cleansession false",
            "try_private true",
            "restart_timeout 1 5",
            f"topic {prefix}/+/apps/+/notify in 1",
            f"topic {prefix}/groups/+/apps/+/notify in 1",
            f"topic {prefix}/+/status out 1",
        ]

    def bridge_subscribed(self, central: "Broker", prefix: str = "drowse") -> bool:
        """Whether this edge's bridge subscribed on `central` (its notify filters are in the log)."""
        filters = central.subscription_filters()
        return f"{prefix}/groups/+/apps/+/notify" in filters and f"{prefix}/+/apps/+/notify" in filters

    def start(self, timeout: float = 10.0) -> None:
        self.conf.write_text("\n".join(l for l in self.config_lines() if l) + "\n")
        out = open(self.out, "ab")
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        wait_until(lambda: self.proc.poll() is not None or port_open(self.port), timeout, what="mosquitto to listen")
        if self.proc.poll() is not None:
            raise RuntimeError(f"mosquitto exited with {self.proc.returncode}:\n{self.out.read_text(errors='replace')}")

    def stop(self, sig=signal.SIGTERM) -> None:
        stop_process(self.proc, sig)
        self.proc = None
        wait_until(lambda: not port_open(self.port), 10, what="mosquitto port to close")

    def pause(self) -> None:
        """SIGSTOP: the broker keeps its sockets open (the kernel still ACKs TCP) but answers nothing,
        like a hung broker or a link that went dead without a FIN or RST."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def subscription_filters(self) -> list[str]:
        # With log_type subscribe mosquitto logs "<time>: <client id> <qos> <topic filter>" per subscription.
        return re.findall(r"^\d+: \S+ \d (\S+)$", self.log_text(), re.M)

    def subscription_count(self, topic: str) -> int:
        """How many SUBSCRIBEs (by any client) had a filter matching `topic` (wildcards included)."""
        return sum(1 for f in self.subscription_filters() if topic_matches(f, topic))

    def wait_subscribed(self, topic: str, timeout: float = 20.0, count: int = 1) -> None:
        wait_until(lambda: self.subscription_count(topic) >= count, timeout,
                   what=f"a subscription to {topic} on the broker")

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        args = [MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(self.port), "-q", str(qos), "-t", topic, "-s"]
        if retain:
            args.append("-r")
        subprocess.run(args, input=payload, check=True, timeout=15, capture_output=True)


    def publish_many(self, topic: str, payloads: list[bytes], qos: int = 1) -> None:
        """Publishes each payload (one line each, no newlines inside) in order over one connection."""
        assert all(b"\n" not in p for p in payloads)
        args = [MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(self.port), "-q", str(qos), "-t", topic, "-l"]
        subprocess.run(args, input=b"\n".join(payloads) + b"\n", check=True, timeout=15, capture_output=True)


def topic_matches(filt: str, topic: str) -> bool:
    """MQTT topic filter matching ('+' one level, '#' the rest)."""
    fp, tp = filt.split("/"), topic.split("/")
    for i, f in enumerate(fp):
        if f == "#":
            return True
        if i >= len(tp) or (f != "+" and f != tp[i]):
            return False
    return len(fp) == len(tp)


def notify_topic(app: str, device: str = DEVICE_ID, prefix: str = "drowse") -> str:
    return f"{prefix}/{device}/apps/{app}/notify"


# ----------------------------------------------------------------------------- nginx

class Nginx:
    """A real nginx on 127.0.0.1:<port> serving `www/` with:
    - /files/...   plain static files
    - /slow/...    static files with `limit_rate 4m` (per connection; `slow_rate` changes it, e.g. "7m")
    - /redirect-to-file   302 to file:///etc/passwd
    - /redirect-to-files/NAME 302 to /files/NAME (a harmless http redirect)
    Access log lines are JSON with method, uri, args, status, range, if_range, body_bytes, ua, and
    msec (when the line was written, i.e. the request's end) and request_time: the request began at
    msec - request_time (`request_start()`)."""

    def __init__(self, workdir: Path, port: int | None = None, slow_rate: str = "4m"):
        self.dir = workdir
        self.slow_rate = slow_rate
        self.dir.mkdir(parents=True, exist_ok=True)
        self.www = self.dir / "www"
        (self.www / "files").mkdir(parents=True, exist_ok=True)
        (self.www / "slow").mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").mkdir(exist_ok=True)
        self.port = port or free_port()
        self.conf = self.dir / "nginx.conf"
        self.access_log = self.dir / "access.log"
        self.error_log = self.dir / "error.log"
        self.proc: subprocess.Popen | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self, timeout: float = 10.0) -> None:
        d = self.dir
        user = "user root;" if os.geteuid() == 0 else ""
        self.conf.write_text(textwrap.dedent(f"""\
            {user}
            daemon off;
            master_process on;
            worker_processes 1;
            pid {d}/nginx.pid;
            error_log {self.error_log} info;
            events {{ worker_connections 128; }}
            http {{
                log_format e2e escape=json '{{"method":"$request_method","uri":"$uri","status":$status,'
                                           '"range":"$http_range","if_range":"$http_if_range",'
                                           '"body_bytes":$body_bytes_sent,"ua":"$http_user_agent",'
                                           '"args":"$args","msec":$msec,"request_time":$request_time}}';
                access_log {self.access_log} e2e;
                client_body_temp_path {d}/tmp/body;
                proxy_temp_path {d}/tmp/proxy;
                fastcgi_temp_path {d}/tmp/fastcgi;
                uwsgi_temp_path {d}/tmp/uwsgi;
                scgi_temp_path {d}/tmp/scgi;
                default_type application/octet-stream;
                types {{ }}
                server {{
                    listen 127.0.0.1:{self.port};
                    server_name localhost;
                    root {self.www};
                    location /files/ {{ }}
                    location /slow/ {{ limit_rate {self.slow_rate}; }}
                    location = /redirect-to-file {{ return 302 file:///etc/passwd; }}
                    location /unavailable/ {{ add_header Retry-After 600 always; return 503; }}
                    location /redirect-to-files/ {{
                        rewrite ^/redirect-to-files/(.*)$ /files/$1 redirect;
                    }}
                }}
            }}
            """))
        out = open(d / "nginx.out", "ab")
        self.proc = subprocess.Popen([NGINX, "-p", str(d), "-c", str(self.conf), "-e", str(self.error_log)],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()
        wait_until(lambda: self.proc.poll() is not None or port_open(self.port), timeout, what="nginx to listen")
        if self.proc.poll() is not None:
            raise RuntimeError(f"nginx exited with {self.proc.returncode}:\n"
                               f"{(d / 'nginx.out').read_text(errors='replace')}\n{self.error_log.read_text(errors='replace')}")

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGTERM)
        self.proc = None

    def add_file(self, name: str, size: int, slow: bool = False) -> tuple[str, str, Path]:
        """Creates a random file; returns (url, sha256, path)."""
        sub = "slow" if slow else "files"
        path = self.www / sub / name
        digest = write_random_file(path, size)
        os.chmod(path, 0o644)
        return self.url(f"/{sub}/{name}"), digest, path

    def access_entries(self) -> list[dict]:
        try:
            text = self.access_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    @staticmethod
    def request_start(entry: dict) -> float:
        """When a logged request began (Unix time, millisecond resolution)."""
        return float(entry["msec"]) - float(entry["request_time"])

    def body_bytes(self, uri: str) -> int:
        """Sum of $body_bytes_sent over every logged request for `uri` (interrupted ones included)."""
        return sum(int(e.get("body_bytes") or 0) for e in self.access_entries() if e.get("uri") == uri)


# ----------------------------------------------------------------------------- drowse

RECORD_SH = r"""#!/bin/sh
# record.sh OUTDIR [EXIT]: records one handler run into OUTDIR/run.<time>.<pid>/ and exits with
# EXIT, or with the number in OUTDIR/exit_code when that file exists.
out="$1"
code="${2:-0}"
[ -f "$out/exit_code" ] && code="$(cat "$out/exit_code")"
start="$(date +%s.%N)"
d="$out/run.$start.$$"
mkdir -p "$d.tmp"
echo "$start" > "$d.tmp/start"
cat > "$d.tmp/stdin"
env > "$d.tmp/env"
id -u > "$d.tmp/uid"
id -g > "$d.tmp/gid"
id -G > "$d.tmp/groups"
pwd > "$d.tmp/cwd"
echo "$$" > "$d.tmp/pid"
mv "$d.tmp" "$d"
exit "$code"
"""


class Run:
    """One recorded handler run."""

    def __init__(self, path: Path):
        self.path = path
        self.start = float((path / "start").read_text().strip())
        self.stdin = (path / "stdin").read_bytes()
        self.env = {}
        for line in (path / "env").read_text(errors="replace").splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                self.env[k] = v
        self.uid = int((path / "uid").read_text().strip())
        self.gid = int((path / "gid").read_text().strip())
        self.groups = [int(g) for g in (path / "groups").read_text().split()]
        self.cwd = (path / "cwd").read_text().strip()

    def json(self):
        return json.loads(self.stdin)

    def __repr__(self):
        return f"Run({self.path.name}, event={self.env.get('DROWSE_EVENT')}, stdin={self.stdin[:200]!r})"


class Drowse:
    """One drowsed instance with its own config, state, apps dir and socket in a temp dir."""

    def __init__(self, base: Path, broker: Broker | None = None, device_id: str = DEVICE_ID,
                 handler_deadline: str | None = "2s", extra_config: str = ""):
        self.base = base
        self.broker = broker
        self.device_id = device_id
        self.handler_deadline = handler_deadline
        self.extra_config = extra_config
        self.config = base / "drowse.toml"
        self.state_dir = base / "state"
        self.apps_dir = base / "apps.d"
        self.socket = base / "drowse.sock"
        self.bin = base / "bin"
        self.out = base / "out"
        self.stderr_log = base / "drowsed.stderr"
        for d in (self.apps_dir, self.bin, self.out):
            d.mkdir(parents=True, exist_ok=True)
        self.record_sh = self.bin / "record.sh"
        self.write_script("record.sh", RECORD_SH)
        self.proc: subprocess.Popen | None = None
        self.exit_statuses: list[int | None] = []
        self.daemon_env: dict[str, str] = {}  # extra environment for drowsed itself
        self.daemon_args: list[str] = []  # extra drowsed arguments, e.g. ["--scheduler-trace", path]
        self.prefix: list[str] = []  # e.g. ["ip", "netns", "exec", NS] to run drowsed in a network namespace
        # [mqtt] keys over the defaults (url = the broker's, keepalive = "10s"); see set_mqtt().
        self.mqtt_options: dict[str, str] = {}
        # Each instance's apps get their own cgroup subtree (relative to the cgroup2 mount), so
        # that one test's leftovers are never adopted by the next test's drowsed.
        self.cgroup = f"drowse-e2e-{os.getpid()}-{next(_instances)}"
        # [lifecycle] keys (see set_lifecycle()). Memory pressure is off unless a test turns it on:
        # another test's (or the host's) memory stall must not end this test's apps.
        self.lifecycle: dict[str, str] = {"cgroup": self.cgroup, "memory_pressure": "off"}
        self.write_config()

    # ---- files

    def write_config(self) -> None:
        parts = [
            f'device_id = "{self.device_id}"',
            f'state_dir = "{self.state_dir}"',
            f'apps_dir = "{self.apps_dir}"',
            f'socket = "{self.socket}"',
        ]
        if self.broker is not None or self.mqtt_options:
            opts = {"url": self.broker.url if self.broker is not None else None, "keepalive": "10s", **self.mqtt_options}
            parts += ["", "[mqtt]"] + [f"{k} = {json.dumps(v)}" for k, v in opts.items() if v is not None]
        if self.handler_deadline:
            parts += ["", "[scheduler]", f'handler_deadline = "{self.handler_deadline}"']
        parts += ["", "[lifecycle]"] + [f"{k} = {json.dumps(v)}" for k, v in self.lifecycle.items()]
        if self.extra_config:
            parts += ["", textwrap.dedent(self.extra_config).strip()]
        self.config.write_text("\n".join(parts) + "\n")

    def set_lifecycle(self, **options: str) -> None:
        """Sets [lifecycle] keys (suspend_after="1s", cgroup="off", ...) and rewrites the config."""
        self.lifecycle.update(options)
        self.write_config()

    def set_mqtt(self, **options: str | None) -> None:
        """Overrides or adds [mqtt] keys (e.g. keepalive="5s", url="mqtts://localhost:8883",
        ca_file=...; None removes a key) and rewrites the config file."""
        self.mqtt_options.update(options)
        self.write_config()

    def write_script(self, name: str, text: str) -> Path:
        p = self.bin / name
        p.write_text(textwrap.dedent(text).lstrip())
        os.chmod(p, 0o755)
        return p

    def out_dir(self, app: str) -> Path:
        d = self.out / app
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o777)
        return d

    def recorder(self, app: str, code: int = 0, name: str | None = None) -> list[str]:
        """argv of a handler that records each run into out/<name or app>/."""
        return [str(self.record_sh), str(self.out_dir(name or app)), str(code)]

    def add_app(self, app: str, fetch: list[str] | None = None, minimum_interval: str | None = None,
                notification: list[str] | None = None, events: list[str] | None = None,
                user: str | None = None, working_directory: str | None = None, raw: str | None = None) -> Path:
        path = self.apps_dir / f"{app}.toml"
        if raw is not None:
            path.write_text(raw)
            return path
        lines = [f'id = "{app}"']
        if user:
            lines.append(f'user = "{user}"')
        if working_directory:
            lines.append(f'working_directory = "{working_directory}"')
        if fetch is not None or minimum_interval is not None:
            lines.append("[fetch]")
            if fetch is not None:
                lines.append(f"command = {json.dumps(fetch)}")
            if minimum_interval is not None:
                lines.append(f'minimum_interval = "{minimum_interval}"')
        if notification is not None:
            lines += ["[notification]", f"command = {json.dumps(notification)}"]
        if events is not None:
            lines += ["[transfers]", f"events_command = {json.dumps(events)}"]
        path.write_text("\n".join(lines) + "\n")
        return path

    def runs(self, app: str) -> list[Run]:
        d = self.out / app
        if not d.is_dir():
            return []
        runs = [Run(p) for p in d.iterdir() if p.is_dir() and p.name.startswith("run.") and not p.name.endswith(".tmp")]
        return sorted(runs, key=lambda r: r.start)

    def wait_runs(self, app: str, n: int = 1, timeout: float = 15.0) -> list[Run]:
        return wait_until(lambda: (lambda rs: rs if len(rs) >= n else None)(self.runs(app)), timeout,
                          what=f"{n} handler run(s) of {app}")

    # ---- daemon

    def start(self, wait: bool = True, timeout: float = 20.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "drowsed already running"
        with open(self.stderr_log, "ab") as log:
            log.write(f"\n===== drowsed start {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen([*self.prefix, str(DROWSED), "--config", str(self.config), *self.daemon_args], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(self.base),
                                         env={**self.env(), "DROWSE_E2E_DIR": str(self.base), **self.daemon_env})
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 20.0) -> dict:
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"drowsed exited with {self.proc.returncode} while starting:\n{self.stderr_text()}")
            r = self.cli("status", "--json", timeout=5)
            return json.loads(r.stdout) if r.returncode == 0 else None

        try:
            return wait_until(ready, timeout, interval=0.1, what="drowsed to answer `drowse status --json`")
        except TimeoutError as e:
            raise AssertionError(f"{e}\n--- drowsed stderr ---\n{self.stderr_text()}") from None

    def stop(self, sig=signal.SIGTERM, timeout: float = 15.0) -> int | None:
        rc = stop_process(self.proc, sig, timeout)
        self.exit_statuses.append(rc)
        self.proc = None
        return rc

    def restart(self, sig=signal.SIGTERM) -> int | None:
        rc = self.stop(sig)
        self.start()
        return rc

    def memory(self) -> dict:
        """The running drowsed's memory in kB from /proc/PID/smaps_rollup: {"rss": ..., "pss": ...}."""
        assert self.proc is not None and self.proc.poll() is None, "drowsed is not running"
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                out[key.lower()] = int(rest.split()[0])
        return out

    def env(self) -> dict:
        env = dict(os.environ)
        env.pop("DROWSE_SOCKET", None)
        env.pop("DROWSE_CONFIG", None)
        env.pop("NOTIFY_SOCKET", None)
        return env

    def exit_note(self) -> str:
        """Says whether the running daemon died on its own (e.g. a crash or SIGPIPE), for failure reports."""
        notes = [f"earlier stops returned: {self.exit_statuses}"] if self.exit_statuses else []
        if self.proc is not None and self.proc.poll() is not None:
            rc = self.proc.returncode
            how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"status {rc}"
            notes.append(f"drowsed (pid {self.proc.pid}) exited on its own with {how}")
        elif self.proc is not None:
            notes.append(f"drowsed (pid {self.proc.pid}) was still running")
        return "\n".join(notes)

    def stderr_text(self) -> str:
        try:
            return self.stderr_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ---- CLI

    def cli(self, *args: str, timeout: float = 30.0, input: bytes | None = None) -> subprocess.CompletedProcess:
        # The socket is passed through DROWSE_SOCKET (docs/contract.md: `--socket PATH`, env DROWSE_SOCKET) so that
        # the same call works whatever the subcommand; test_cli.py checks the `--socket` option itself.
        return subprocess.run([str(DROWSE), *args], capture_output=True, text=True, timeout=timeout,
                              env={**self.env(), "DROWSE_SOCKET": str(self.socket)}, input=input)

    def cli_with_socket_option(self, *args: str, before_subcommand: bool = True,
                               timeout: float = 30.0) -> subprocess.CompletedProcess:
        argv = [str(DROWSE), "--socket", str(self.socket), *args] if before_subcommand else \
            [str(DROWSE), *args, "--socket", str(self.socket)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env())

    def cli_ok(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        r = self.cli(*args, timeout=timeout)
        assert r.returncode == 0, f"`drowse {' '.join(args)}` exited {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
        return r

    def json(self, *args: str, timeout: float = 30.0):
        r = self.cli_ok(*args, "--json", timeout=timeout)
        try:
            return json.loads(r.stdout)
        except ValueError as e:
            raise AssertionError(f"`drowse {' '.join(args)} --json` printed no JSON: {r.stdout!r}") from e

    def status(self) -> dict:
        return self.json("status")

    def wait_idle(self, timeout: float = 10.0) -> dict:
        """Waits until no handler runs or waits in the queue. After the runs a test waited for,
        this is the outcome that ends a negative check: whatever the daemon started meanwhile
        (a second run, a redelivered notification already received) has run by then."""
        return wait_until(lambda: (lambda st: st if st["running_handlers"] == 0 and st["queued_handlers"] == 0 else None)(self.status()),
                          timeout, what="no handler running or queued")

    def apps(self) -> list[dict]:
        return self.json("apps")

    def app(self, app_id: str) -> dict:
        return self.json("apps", "show", app_id)

    def app_entry(self, app_id: str) -> dict:
        entries = [a for a in self.apps() if a.get("id") == app_id]
        assert len(entries) == 1, f"`drowse apps --json` has {len(entries)} entries for {app_id}: {self.apps()}"
        return entries[0]

    def transfer(self, tid: str) -> dict:
        return self.json("transfer", "show", tid)

    def download(self, url: str, app: str, *extra: str) -> str:
        r = self.cli_ok("transfer", "download", url, "--app", app, *extra)
        lines = [l.strip() for l in r.stdout.splitlines() if l.strip()]
        assert len(lines) == 1, f"`drowse transfer download` should print the id alone: {r.stdout!r}"
        return lines[0]

    def wait_mqtt_connected(self, connected: bool = True, timeout: float = 20.0) -> None:
        def check():
            r = self.cli("status", "--json", timeout=5)
            return r.returncode == 0 and json.loads(r.stdout).get("mqtt", {}).get("connected") is connected
        wait_until(check, timeout, interval=0.1, what=f"drowse status mqtt.connected == {connected}")

    def push(self, app: str, *args: str, silent: bool = True) -> subprocess.CompletedProcess:
        assert self.broker is not None
        argv = [str(DROWSE), "push", "--broker", self.broker.url, "--device", self.device_id, "--app", app]
        if silent:
            argv.append("--silent")
        argv += list(args)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=self.env())
        assert r.returncode == 0, f"`drowse push` exited {r.returncode}: {r.stderr}"
        return r

    def push_group(self, group: str, app: str, *args: str, broker: "Broker | None" = None) -> subprocess.CompletedProcess:
        """`drowse push --group GROUP` to `broker` (default: this instance's)."""
        b = broker or self.broker
        assert b is not None
        argv = [str(DROWSE), "push", "--broker", b.url, "--group", group, "--app", app, "--silent", *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=self.env())
        assert r.returncode == 0, f"`drowse push --group` exited {r.returncode}: {r.stderr}"
        return r

    def push_payload_bytes(self, app: str, *args: str) -> bytes:
        """The payload `drowse push` would publish (--dry-run), e.g. a signed JWS."""
        assert self.broker is not None
        argv = [str(DROWSE), "push", "--broker", self.broker.url, "--device", self.device_id, "--app", app,
                "--silent", "--dry-run", *args]
        r = subprocess.run(argv, capture_output=True, timeout=30, env=self.env())
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def cleanup(self) -> None:
        if self.proc is not None:
            pgid = self.proc.pid  # drowsed leads its own session and process group
            self.stop(signal.SIGKILL, timeout=5)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        kill_strays(str(self.base))
        remove_cgroup_tree(self.cgroup)


_instances = itertools.count(1)


def cgroup2_mount() -> Path | None:
    """Where the cgroup2 file system is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on
    hybrid systems), from /proc/self/mountinfo."""
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ")[0] == "cgroup2":
                return Path(left.split(" ")[4].replace("\\040", " "))
    except OSError:
        pass
    return None


def cgroup_unusable() -> str | None:
    """Why the tests' drowsed cannot have app cgroups here, or None when it can. Each test's
    drowsed makes its subtree at the top of the cgroup2 mount ([lifecycle] cgroup =
    "drowse-e2e-…", relative to the mount), which takes root (or a tree delegated there): a
    cgroup2 mount that exists is not enough. Probed by making and removing a cgroup there."""
    mount = cgroup2_mount()
    if mount is None:
        return "no cgroup2 file system"
    probe = mount / f"drowse-e2e-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError as e:
        return f"cannot make a cgroup in {mount} ({e.strerror}): needs root, or a cgroup tree delegated there"
    try:
        probe.rmdir()
    except OSError:
        pass
    return None


def netns_unusable() -> str | None:
    """Why the tests cannot make a network namespace here (`ip netns add`), or None."""
    if shutil.which("ip") is None:
        return "no ip (iproute2) to make a network namespace"
    if os.geteuid() != 0:
        return "needs root to make a network namespace (ip netns add)"
    return None


def remove_cgroup_tree(relative: str) -> None:
    """Kills whatever is left in a test's cgroup subtree and removes it, leaves first."""
    mount = cgroup2_mount()
    if mount is None:
        return
    top = mount / relative
    if not top.is_dir():
        return
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [top]:
        try:
            (d / "cgroup.freeze").write_text("0")
        except OSError:
            pass
        try:
            (d / "cgroup.kill").write_text("1")
        except OSError:
            pass
    deadline = time.monotonic() + 5
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [top]:
        while True:
            try:
                d.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)


def binaries_present() -> bool:
    return DROWSED.is_file() and os.access(DROWSED, os.X_OK) and DROWSE.is_file() and os.access(DROWSE, os.X_OK)
