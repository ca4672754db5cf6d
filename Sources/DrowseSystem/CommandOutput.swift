#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// Runs a short helper command and returns its standard output (at most 64 KiB), or nil if it
/// could not start, failed, or outlived `timeout`. For rare look-ups such as nmcli, on events.
package func commandOutput(_ argv: [String], timeout: Double = 2) -> String? {
    guard let path = argv.first, access(path, X_OK) == 0 else { return nil }
    var out: [Int32] = [0, 0]
    guard drowse_pipe(&out) == 0 else { return nil }
    let devnull = open("/dev/null", O_RDWR | O_CLOEXEC)
    defer { close(devnull) }
    var pid: pid_t = 0
    let rc = withCStrings(argv) { a in
        withCStrings(["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"]) { e in
            drowse_spawn(path, a, e, nil, 0, 0, 0, nil, 0, devnull, out[1], devnull, -1, nil, &pid)
        }
    }
    close(out[1])
    guard rc == 0 else { close(out[0]); return nil }
    var data: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    let end = WallClock.monotonic() + timeout
    var timedOut = false
    while data.count < 65536 {
        var p = pollfd(fd: out[0], events: Int16(POLLIN), revents: 0)
        let left = end - WallClock.monotonic()
        if left <= 0 { timedOut = true; break }
        if poll(&p, 1, Int32(left * 1000) + 1) <= 0 { continue }
        let n = buf.withUnsafeMutableBytes { read(out[0], $0.baseAddress, $0.count) }
        if n <= 0 { break }
        data += buf[0..<n]
    }
    close(out[0])
    if timedOut { killpg(pid, SIGKILL) }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    drowse_forget_child(pid)  // reaped: out of the registry of children drowse_spawn started
    guard !timedOut, status == 0 else { return nil }
    return String(decoding: data, as: UTF8.self)
}
