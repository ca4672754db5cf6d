"""Files root opens for itself (`[mqtt] password_file`): never through a symlink, never a FIFO,
only a regular file of root's or drowsed's own user that no one else may write; refused at
start and by `--check-config` with one clear line, and a file every user may read is warned
about (docs/configuration.md, [mqtt])."""

from __future__ import annotations

import os
import time

import pytest

from test_config import check_config, start_fails


def with_password_file(make_drowse, broker, path):
    d = make_drowse(broker=broker)
    d.set_mqtt(username="dev", password_file=str(path))
    return d


def refused_everywhere(d, words: str) -> None:
    rc, out, err = check_config(d)
    assert rc == 78, (rc, out, err)
    assert "password_file" in err and words in err, err
    rc, err = start_fails(d)
    assert rc == 78, (rc, err)
    assert "password_file" in err and words in err, err


def test_a_symlinked_password_file_is_refused_not_followed(make_drowse, broker, workdir):
    secret = workdir / "secret"
    secret.write_text("root:*:20228:0:99999:7:::\n")
    os.chmod(secret, 0o600)
    link = workdir / "pw"
    link.symlink_to(secret)
    d = with_password_file(make_drowse, broker, link)
    refused_everywhere(d, "symbolic link")
    # Nothing of the target reached the broker: drowsed never connected.
    assert "root:*" not in broker.log_text()


def test_a_fifo_password_file_is_refused_without_blocking(make_drowse, broker, workdir):
    fifo = workdir / "pw.fifo"
    os.mkfifo(fifo, 0o600)
    d = with_password_file(make_drowse, broker, fifo)
    t = time.monotonic()
    refused_everywhere(d, "FIFO")  # check_config and start_fails fail the test on a hang
    assert time.monotonic() - t < 20


def test_a_password_file_others_may_write_is_refused(make_drowse, broker, workdir):
    pw = workdir / "pw"
    pw.write_text("s3cret\n")
    os.chmod(pw, 0o666)
    d = with_password_file(make_drowse, broker, pw)
    refused_everywhere(d, "written by others")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a file of another user")
def test_a_password_file_of_another_user_is_refused(make_drowse, broker, workdir):
    pw = workdir / "pw"
    pw.write_text("s3cret\n")
    os.chmod(pw, 0o600)
    os.chown(pw, 65534, 65534)
    d = with_password_file(make_drowse, broker, pw)
    refused_everywhere(d, "owned by uid 65534")


def test_a_world_readable_password_file_is_used_with_a_warning(make_drowse, broker, workdir):
    pw = workdir / "pw"
    pw.write_text("s3cret\n")
    os.chmod(pw, 0o644)
    d = with_password_file(make_drowse, broker, pw)
    rc, out, err = check_config(d)
    assert rc == 0, (rc, out, err)
    assert "password_file may be read by every user" in err, err
    os.chmod(pw, 0o600)
    rc, out, err = check_config(d)
    assert rc == 0 and "warning" not in err, (rc, out, err)
