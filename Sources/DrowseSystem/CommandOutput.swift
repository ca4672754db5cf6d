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
    guard let devnull = try? Sys.open("/dev/null", O_RDWR | O_CLOEXEC) else {
        Sys.close(out[0], ignoringErrors: .afterError)
        Sys.close(out[1], ignoringErrors: .afterError)
        return nil
    }
    defer { Sys.close(devnull, ignoringErrors: .nothingToFlush) }
    var pid: pid_t = 0
    let rc = withCStrings(argv) { a in
        withCStrings(["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"]) { e in
            return drowse_spawn(path, a, e, nil, 0, 0, 0, nil, 0, devnull, out[1], devnull, -1, nil, &pid)
        }
    }
    Sys.close(out[1], ignoringErrors: .nothingToFlush)
    guard rc == 0 else { Sys.close(out[0], ignoringErrors: .afterError); return nil }
    var data: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    let end = WallClock.monotonic() + timeout
    var timedOut = false
    while data.count < 65536 {
        let left = end - WallClock.monotonic()
        if left <= 0 { timedOut = true; break }
        // A poll that fails cannot wait: stop reading (before, it polled again at once, a spin).
        guard let ready = try? Sys.poll(out[0], events: Int16(POLLIN), timeoutMs: Int32(left * 1000) + 1) else { timedOut = true; break }
        if ready == 0 { continue }
        // `try?` makes a failure nil, as is "nothing now": either way the reading ends.
        guard let n = try? Sys.read(out[0], into: &buf), n > 0 else { break }
        data += buf[0..<n]
    }
    Sys.close(out[0], ignoringErrors: .nothingToFlush)
    if timedOut { Sys.killpgOwn(pid, SIGKILL) }
    let status = (try? Sys.waitForExit(pid)) ?? -1  // ECHILD: reaped elsewhere, its status unknown
    drowse_forget_child(pid)  // reaped: out of the registry of children drowse_spawn started
    guard !timedOut, status == 0 else { return nil }
    return String(decoding: data, as: UTF8.self)
}
