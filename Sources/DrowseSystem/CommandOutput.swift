#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// Runs a short helper command and returns its standard output (at most 64 KiB), or nil if it
/// could not start, failed, or outlived `timeout`. For rare look-ups such as nmcli, on events.
package func commandOutput(_ argv: [String], timeout: Double = 2) -> String? {
    let r = runCommand(argv, timeout: timeout, mergeErrors: false)
    guard r.status == 0 else { return nil }
    return r.output
}

/// How a command run by `runCommand` ended.
package struct CommandResult: Sendable, Equatable {
    /// The shell's convention: the exit status, 128 + a signal; nil when it could not start or
    /// outlived its time (then it was killed).
    package var status: Int32?
    /// What it wrote (standard output, and standard error when merged), at most 64 KiB.
    package var output: String

    /// The last line of the output, for a one-line reason.
    package var lastLine: String {
        output.split(whereSeparator: { $0 == "\n" }).last.map(String.init) ?? ""
    }
}

/// Runs `argv` (an absolute path first) in a process group of its own with `environment`,
/// waits at most `timeout` seconds (then kills the group), and returns its status and output.
package func runCommand(_ argv: [String], environment: [String] = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"],
                        timeout: Double, mergeErrors: Bool = true) -> CommandResult {
    guard let path = argv.first, access(path, X_OK) == 0 else { return CommandResult(status: nil, output: "\(argv.first ?? "''"): not an executable") }
    var out: [Int32] = [0, 0]
    guard drowse_pipe(&out) == 0 else { return CommandResult(status: nil, output: "pipe failed") }
    guard let devnull = try? Sys.open("/dev/null", O_RDWR | O_CLOEXEC) else {
        Sys.close(out[0], ignoringErrors: .afterError)
        Sys.close(out[1], ignoringErrors: .afterError)
        return CommandResult(status: nil, output: "/dev/null cannot be opened")
    }
    defer { Sys.close(devnull, ignoringErrors: .nothingToFlush) }
    var pid: pid_t = 0
    let rc = withCStrings(argv) { a in
        withCStrings(environment) { e in
            return drowse_spawn(path, a, e, nil, 0, 0, 0, nil, 0, devnull, out[1], mergeErrors ? out[1] : devnull, -1, nil, &pid)
        }
    }
    Sys.close(out[1], ignoringErrors: .nothingToFlush)
    guard rc == 0 else {
        Sys.close(out[0], ignoringErrors: .afterError)
        return CommandResult(status: nil, output: "\(path): \(String(cString: strerror(rc)))")
    }
    var data: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    let end = WallClock.monotonic() + timeout
    var timedOut = false
    while true {
        let left = end - WallClock.monotonic()
        if left <= 0 { timedOut = true; break }
        // A poll that fails cannot wait: stop reading (before, it polled again at once, a spin).
        guard let ready = try? Sys.poll(out[0], events: Int16(POLLIN), timeoutMs: Int32(min(left, 3600) * 1000) + 1) else { timedOut = true; break }
        if ready == 0 { continue }
        // `try?` makes a failure nil, as is "nothing now": either way the reading ends.
        guard let n = try? Sys.read(out[0], into: &buf), n > 0 else { break }
        data += buf[0..<n]
        // Keep the end: the last lines say why a command failed.
        if data.count > 65536 { data.removeFirst(data.count - 65536) }
    }
    Sys.close(out[0], ignoringErrors: .nothingToFlush)
    if timedOut { Sys.killpgOwn(pid, SIGKILL) }
    let raw = (try? Sys.waitForExit(pid)) ?? -1  // ECHILD: reaped elsewhere, its status unknown
    drowse_forget_child(pid)  // reaped: out of the registry of children drowse_spawn started
    let text = String(decoding: data, as: UTF8.self)
    guard !timedOut, raw >= 0 else { return CommandResult(status: nil, output: text + (timedOut ? "\n(killed after \(Int(timeout)) s)" : "")) }
    let status = raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    return CommandResult(status: status, output: text)
}
