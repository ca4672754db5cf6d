"""MQTT over TLS with client certificates and a per-device ACL (docs/contract.md: `[mqtt]` url = "mqtts://...",
ca_file, cert_file, key_file; deploy/mosquitto/ shows the same broker setup).

The certificates are made here with the `openssl` command: a CA, a broker certificate for
localhost / 127.0.0.1, client certificates for the devices "dev-a" and "dev-b" and for the
provider, and a second, unrelated CA. mosquitto requires a client certificate and takes its CN as
the user name, so the ACL's `pattern read drowse/%u/...` lets each device read only its own topics.
The broker's listener mirrors deploy/mosquitto/mosquitto.conf and uses its acl file as is.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from drowse_e2e import DROWSE, MOSQUITTO, REPO, Broker, wait_until

OPENSSL = shutil.which("openssl")

# The ACL shipped in deploy/mosquitto/ (so the example is tested): the provider (CN=provider) may
# publish notifications to every device; each device (CN = its device_id) may only read
# drowse/%u/apps/+/notify and write drowse/%u/status.
ACL_FILE = REPO / "deploy" / "mosquitto" / "acl"


# ----------------------------------------------------------------------------- certificates

def openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"openssl {' '.join(args)} failed:\n{r.stderr}"


def make_ca(d: Path, name: str, cn: str) -> None:
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={cn}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=d)


def make_cert(d: Path, ca: str, name: str, cn: str, server: bool, san: str = "DNS:localhost,IP:127.0.0.1") -> None:
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    ext = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    if server:
        ext += ["extendedKeyUsage=serverAuth", f"subjectAltName={san}"]
    else:
        ext += ["extendedKeyUsage=clientAuth"]
    (d / f"{name}.ext").write_text("\n".join(ext) + "\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def certs():
    if OPENSSL is None:
        pytest.skip("openssl is not installed")
    d = Path(tempfile.mkdtemp(prefix="drowse-certs-", dir="/tmp"))
    make_ca(d, "ca", "Drowse e2e CA")
    make_ca(d, "other-ca", "Unrelated CA")
    make_cert(d, "ca", "broker", "localhost", server=True)
    # Signed by the right CA, but for another host name.
    make_cert(d, "ca", "broker-elsewhere", "broker.elsewhere.example", server=True, san="DNS:broker.elsewhere.example")
    for who in ("dev-a", "dev-b", "provider"):
        make_cert(d, "ca", who, who, server=False)
    for p in d.iterdir():
        p.chmod(0o644)  # mosquitto may drop privileges; these are throwaway test keys
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ----------------------------------------------------------------------------- broker

class TLSBroker(Broker):
    """mosquitto with one TLS listener on 127.0.0.1 that requires a client certificate, takes its CN
    as the user name and applies the per-device ACL."""

    def __init__(self, workdir: Path, certs: Path, server_cert: str = "broker"):
        super().__init__(workdir)
        self.certs = certs
        self.server_cert = server_cert
        self.acl = self.dir / "acl"
        self.acl.write_text(ACL_FILE.read_text())

    @property
    def url(self) -> str:
        return f"mqtts://localhost:{self.port}"

    def listener_lines(self) -> list[str]:
        c = self.certs
        return [
            "per_listener_settings false",
            f"listener {self.port} 127.0.0.1",
            f"cafile {c / 'ca.crt'}",
            f"certfile {c / (self.server_cert + '.crt')}",
            f"keyfile {c / (self.server_cert + '.key')}",
            "require_certificate true",
            "use_identity_as_username true",
            f"acl_file {self.acl}",
        ]

    def push(self, device: str, app: str, *args: str) -> subprocess.CompletedProcess:
        """`drowse push` over TLS as the provider (its own certificate)."""
        c = self.certs
        argv = [str(DROWSE), "push", "--broker", self.url, "--cafile", str(c / "ca.crt"),
                "--cert", str(c / "provider.crt"), "--key", str(c / "provider.key"),
                "--device", device, "--app", app, "--silent", *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"`drowse push` over TLS exited {r.returncode}: {r.stderr}"
        return r


@pytest.fixture
def tls_broker(workdir, certs):
    if not Path(MOSQUITTO).exists():
        pytest.skip("mosquitto is not installed")
    b = TLSBroker(workdir / "mqtts", certs)
    b.start()
    yield b
    if b.proc is not None:
        b.stop()


def tls_drowse(make_drowse, broker: TLSBroker, device: str, cert: str, ca: str = "ca"):
    c = broker.certs
    d = make_drowse(broker=broker, handler_deadline="5s")
    d.device_id = device
    d.set_mqtt(url=broker.url, ca_file=str(c / f"{ca}.crt"), cert_file=str(c / f"{cert}.crt"),
               key_file=str(c / f"{cert}.key"))
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    return d


# ----------------------------------------------------------------------------- tests

def test_tls_with_client_certificate_connects_and_delivers(tls_broker, make_drowse):
    d = tls_drowse(make_drowse, tls_broker, "dev-a", cert="dev-a")
    d.wait_mqtt_connected(True)
    tls_broker.wait_subscribed("drowse/dev-a/apps/news/notify")
    assert "dev-a" in tls_broker.log_text()  # the broker saw the certificate's CN as the user

    tls_broker.push("dev-a", "news", "--id", "tls-1", "-d", "content-id=7")
    [run] = d.wait_runs("news", 1, timeout=15)
    assert run.json()["content-id"] == 7 and run.json()["id"] == "tls-1"
    assert d.status()["mqtt"]["connected"] is True


def assert_never_connects(d, tls_broker, seconds: float = 6, push: bool = True) -> None:
    """For `seconds`: never connected, the local API answers, a notification pushed meanwhile never runs."""
    deadline = time.monotonic() + seconds
    pushed = False
    while time.monotonic() < deadline:
        st = d.status()  # the local API keeps answering
        assert st["mqtt"]["configured"] is True
        assert st["mqtt"]["connected"] is False, st
        if push and not pushed and time.monotonic() > deadline - 4:
            tls_broker.push("dev-a", "news", "--id", "never")  # the provider's own TLS works
            pushed = True
        time.sleep(0.25)
    assert d.runs("news") == []
    log = tls_broker.log_text()
    assert "drowse-dev-a" not in log, "the daemon got an MQTT session although it cannot trust the broker"
    assert d.proc.poll() is None, d.exit_note()
    assert d.json("apps")[0]["id"] == "news"


def test_tls_with_an_untrusted_broker_certificate_never_connects(tls_broker, make_drowse):
    d = tls_drowse(make_drowse, tls_broker, "dev-a", cert="dev-a", ca="other-ca")
    assert_never_connects(d, tls_broker)
    assert "unknown ca" in tls_broker.log_text()  # the daemon rejected the broker's certificate chain


def test_tls_broker_certificate_for_another_host_name_is_refused(workdir, certs, make_drowse, request):
    if not Path(MOSQUITTO).exists():
        pytest.skip("mosquitto is not installed")
    b = TLSBroker(workdir / "mqtts-elsewhere", certs, server_cert="broker-elsewhere")
    request.node._extra_brokers = [b]
    b.start()
    try:
        d = tls_drowse(make_drowse, b, "dev-a", cert="dev-a")  # trusted CA, but the name is not localhost
        # (`drowse push` verifies the name too, so nothing is pushed here.)
        assert_never_connects(d, b, seconds=4, push=False)
        assert "New connection from" in b.log_text()  # it did try
    finally:
        b.stop()


def test_device_using_another_devices_certificate_gets_nothing_of_that_device(tls_broker, make_drowse):
    # Device dev-a's daemon, but with dev-b's certificate: the broker knows it as user "dev-b".
    d = tls_drowse(make_drowse, tls_broker, "dev-a", cert="dev-b")
    d.wait_mqtt_connected(True)  # TLS itself is fine: same CA
    wait_until(lambda: "Sending SUBACK to drowse-dev-a" in tls_broker.log_text(), 15,
               what="the broker to answer the daemon's SUBSCRIBE")
    # mosquitto 2.0 with an acl_file accepts the SUBSCRIBE itself and applies `pattern read` to each
    # message it would deliver; its retained status (a `pattern write` for dev-b only) is denied.
    wait_until(lambda: "Denied PUBLISH from drowse-dev-a" in tls_broker.log_text(), 10,
               what="the ACL to deny user dev-b's status publish to drowse/dev-a/status")

    tls_broker.push("dev-a", "news", "--id", "for-dev-a")  # returns once the broker has it (QoS 1)
    time.sleep(1)  # the broker routes it on receipt; a delivered one would have run by now
    assert d.runs("news") == [], "a notification for dev-a reached a daemon holding dev-b's certificate"
    assert "Sending PUBLISH to drowse-dev-a" not in tls_broker.log_text()
    assert d.status()["mqtt"]["connected"] is True
