"""Downloads verify TLS: a server whose certificate does not chain to a trusted CA is refused,
never downloaded from."""

import shutil
import subprocess
import textwrap

import pytest

from drowse_e2e import NGINX, free_port, port_open, wait_until, write_random_file

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")


@pytest.fixture
def https_nginx(workdir):
    d = workdir / "tls-nginx"
    (d / "www").mkdir(parents=True)
    (d / "tmp").mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True)
    port = free_port()
    (d / "nginx.conf").write_text(textwrap.dedent(f"""\
        user root; daemon off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;
        events {{ worker_connections 32; }}
        http {{
            access_log {d}/access.log;
            client_body_temp_path {d}/tmp/b; proxy_temp_path {d}/tmp/p; fastcgi_temp_path {d}/tmp/f;
            uwsgi_temp_path {d}/tmp/u; scgi_temp_path {d}/tmp/s;
            server {{ listen 127.0.0.1:{port} ssl; root {d}/www;
                     ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem; }}
        }}
        """))
    proc = subprocess.Popen([NGINX, "-p", str(d), "-c", str(d / "nginx.conf")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: port_open(port), 10, what="nginx with TLS")
    yield d, port
    proc.terminate()
    proc.wait(5)


def test_an_untrusted_certificate_is_refused(https_nginx, make_drowse):
    d_nginx, port = https_nginx
    write_random_file(d_nginx / "www" / "f.bin", 100_000)
    d = make_drowse()
    d.add_app("dl", fetch=d.recorder("dl"))
    d.start()
    dest = d.base / "f.bin"
    tid = d.download(f"https://127.0.0.1:{port}/f.bin", "dl", "--to", str(dest))
    wait_until(lambda: d.transfer(tid)["state"] == "failed", 10, what="the transfer to fail")
    t = d.transfer(tid)
    assert "TLS" in t["reason"] or "certificate" in t["reason"].lower(), t
    assert not dest.exists()
    # The handshake failed: not a byte of the file was served.
    assert "GET /f.bin" not in (d_nginx / "access.log").read_text()
