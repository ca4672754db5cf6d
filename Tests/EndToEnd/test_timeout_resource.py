"""--timeout-resource fails a transfer that cannot finish in time, running or waiting."""

import time

from drowse_e2e import wait_until


def test_a_download_that_cannot_finish_in_time_fails(nginx, make_drowse):
    d = make_drowse()
    d.add_app("dl", fetch=d.recorder("dl"))
    d.start()
    url, _, _ = nginx.add_file("big.bin", 40 * 1024 * 1024, slow=True)  # ~10 s at 4 MiB/s
    dest = d.base / "big.bin"
    started = time.time()
    tid = d.download(url, "dl", "--to", str(dest), "--timeout-resource", "2s")
    wait_until(lambda: d.transfer(tid)["state"] == "failed", 8, what="the transfer to time out")
    took = time.time() - started
    t = d.transfer(tid)
    assert "timed out" in t["reason"], t
    assert 1.9 <= took <= 6, f"failed after {took:.1f} s"
    assert not dest.exists()
    assert not list(d.base.glob(".big.bin.*")), "the partial file was left behind"
    # A transfer given enough time completes.
    url2, sha2, _ = nginx.add_file("small.bin", 256 * 1024)
    tid2 = d.download(url2, "dl", "--to", str(d.base / "small.bin"), "--timeout-resource", "1m")
    wait_until(lambda: d.transfer(tid2)["state"] == "completed", 10, what="the small transfer")
