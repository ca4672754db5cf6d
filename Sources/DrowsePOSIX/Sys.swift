#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one place where Drowse judges the return code of a libc call it does not turn into an
/// error of its own (libcurl's go through `CurlCheck`, libmosquitto's through `MosquittoError`,
/// SQLite's through `StoreError`), as swift-nio's `syscall` wrapper does. No call's result is
/// thrown away: a failure either throws a `SystemError` naming the call, or is handed back for
/// the caller to log, and EINTR is retried (except by `close`, see there). Where ignoring a
/// failure is right, a helper here says why in its name (`close(_:ignoringErrors:)`).
///
/// `UncheckedCallsTests` (DrowseSystemTests) fails on a libc call whose result is discarded
/// anywhere in Sources/.
package enum Sys {
    /// A call that returns -1 and sets errno on failure; retried on EINTR.
    @discardableResult
    package static func posix(_ name: @autoclosure () -> String, _ call: () -> Int) throws(SystemError) -> Int {
        while true {
            let rc = call()
            if rc >= 0 { return rc }
            let e = errno
            if e == EINTR { continue }
            throw SystemError(name(), errno: e)
        }
    }

    /// The same, for a call whose failure the caller can only note: the error, or nil.
    package static func noted(_ name: @autoclosure () -> String, _ call: () -> Int) -> SystemError? {
        do { try posix(name(), call) } catch { return error }
        return nil
    }

    /// poll(2), retried on EINTR; any other error is thrown, for the caller to stop waiting (a
    /// loop that polled again at once would burn a core).
    @discardableResult
    package static func poll(_ fds: inout [pollfd], timeoutMs: Int32) throws(SystemError) -> Int {
        try posix("poll") { Int(Glibc.poll(&fds, nfds_t(fds.count), timeoutMs)) }
    }

    /// poll(2) on one descriptor; the events it reported.
    package static func poll(_ fd: Int32, events: Int16, timeoutMs: Int32) throws(SystemError) -> Int16 {
        var fds = [pollfd(fd: fd, events: events, revents: 0)]
        try poll(&fds, timeoutMs: timeoutMs)
        return fds[0].revents
    }

    // MARK: files

    /// open(2), retried on EINTR: the descriptor, or a `SystemError` naming `what` (by default
    /// "open PATH").
    package static func open(_ path: String, _ flags: Int32, mode: mode_t = 0, _ what: @autoclosure () -> String = "") throws(SystemError) -> Int32 {
        // The name is built only on failure, after `posix` has read errno.
        Int32(try posix({ let w = what(); return w.isEmpty ? "open \(path)" : w }()) { Int(Glibc.open(path, flags, mode)) })
    }

    /// read(2) into `buffer` (at most `limit` bytes of it), retried on EINTR: the bytes read, 0 at
    /// the end of the file; nil when a non-blocking descriptor has nothing now (EAGAIN).
    package static func read(_ fd: Int32, into buffer: inout [UInt8], limit: Int = .max,
                             _ what: @autoclosure () -> String = "read") throws(SystemError) -> Int? {
        try unlessWouldBlock(what()) { buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, min($0.count, limit)) } }
    }

    /// read(2) of at most `count` bytes to `buffer`, as `read(_:into:limit:_:)`.
    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawPointer, count: Int,
                             _ what: @autoclosure () -> String = "read") throws(SystemError) -> Int? {
        try unlessWouldBlock(what()) { Glibc.read(fd, buffer, count) }
    }

    /// write(2) of `bytes` from `offset` on, retried on EINTR: the bytes written (maybe fewer);
    /// nil when a non-blocking descriptor takes nothing now (EAGAIN).
    package static func write(_ fd: Int32, _ bytes: [UInt8], from offset: Int = 0,
                              _ what: @autoclosure () -> String = "write") throws(SystemError) -> Int? {
        guard offset < bytes.count else { return 0 }
        return try unlessWouldBlock(what()) { bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, bytes.count - offset) } }
    }

    /// write(2) of `count` bytes at `bytes`, as `write(_:_:from:_:)`.
    package static func write(_ fd: Int32, _ bytes: UnsafeRawPointer, count: Int,
                              _ what: @autoclosure () -> String = "write") throws(SystemError) -> Int? {
        try unlessWouldBlock(what()) { Glibc.write(fd, bytes, count) }
    }

    private static func unlessWouldBlock(_ name: @autoclosure () -> String, _ call: () -> Int) throws(SystemError) -> Int? {
        do { return try posix(name(), call) } catch {
            if error.errno == EAGAIN || error.errno == EWOULDBLOCK { return nil }
            throw error
        }
    }

    /// mkdir(2). Returns whether it made the folder: false when one was there already.
    @discardableResult
    package static func mkdir(_ path: String, _ mode: mode_t) throws(SystemError) -> Bool {
        guard Glibc.mkdir(path, mode) != 0 else { return true }
        let e = errno
        if e == EEXIST { return false }
        throw SystemError("mkdir \(path)", errno: e)
    }

    /// rename(2).
    package static func rename(_ from: String, to: String) throws(SystemError) {
        try posix("rename \(from) to \(to)") { Int(Glibc.rename(from, to)) }
    }

    // MARK: close

    /// close(2) of a descriptor whose close can report lost data (a file written through it).
    /// Never retried: on Linux the descriptor is released even when close fails with EINTR (a
    /// retry could close a number another thread has just been given), so EINTR counts as done.
    package static func close(_ fd: Int32, _ what: @autoclosure () -> String = "close") throws(SystemError) {
        guard Glibc.close(fd) != 0 else { return }
        let e = errno
        if e == EINTR { return }
        throw SystemError(what(), errno: e)
    }

    /// Why a close's failure is not worth reporting.
    package enum CloseIgnoring {
        /// Nothing was written through it that close could fail to flush: a file opened for
        /// reading, a folder, a socket, a pipe or an eventfd (what was sent went out with write(2)),
        /// a kernel file (cgroupfs, procfs) whose writes took effect in write(2).
        case nothingToFlush
        /// A failure path: the error that matters is already being reported.
        case afterError
        /// A part file of a transfer: what counts was fdatasynced before its offset was
        /// committed, and the bytes after that offset are cut off when the transfer resumes.
        case beyondCommit
        /// A debugging aid whose losses are accepted (the scheduler trace: a replay reports the gap).
        case bestEffort
    }

    /// close(2) whose failure carries no news (see `CloseIgnoring`). EBADF still does (a double
    /// close, which could close someone else's descriptor): it stops a debug build.
    package static func close(_ fd: Int32, ignoringErrors why: CloseIgnoring) {
        guard Glibc.close(fd) != 0 else { return }
        assert(errno != EBADF, "close(\(fd)): not an open descriptor (closed twice?)")
    }

    // MARK: files

    package static func fsync(_ fd: Int32, _ what: @autoclosure () -> String = "fsync") throws(SystemError) {
        try posix(what()) { Int(Glibc.fsync(fd)) }
    }

    package static func chmod(_ path: String, _ mode: mode_t) throws(SystemError) {
        try posix("chmod \(path)") { Int(Glibc.chmod(path, mode)) }
    }

    package static func fchmod(_ fd: Int32, _ mode: mode_t, _ what: @autoclosure () -> String = "fchmod") throws(SystemError) {
        try posix(what()) { Int(Glibc.fchmod(fd, mode)) }
    }

    /// unlink(2); false when there was nothing to remove (ENOENT is an outcome, not a failure).
    @discardableResult
    package static func unlink(_ path: String) throws(SystemError) -> Bool {
        do { try posix("unlink \(path)") { Int(Glibc.unlink(path)) } } catch {
            if error.errno == ENOENT { return false }
            throw error
        }
        return true
    }

    /// unlinkat(2) relative to a folder's descriptor; false when there was nothing to remove.
    @discardableResult
    package static func unlinkat(_ dirFD: Int32, _ name: String, flags: Int32 = 0, _ what: @autoclosure () -> String) throws(SystemError) -> Bool {
        do { try posix(what()) { Int(Glibc.unlinkat(dirFD, name, flags)) } } catch {
            if error.errno == ENOENT { return false }
            throw error
        }
        return true
    }

    /// Adds `flags` (e.g. O_NONBLOCK) to a descriptor's status flags.
    package static func addStatusFlags(_ fd: Int32, _ flags: Int32, _ what: @autoclosure () -> String = "fcntl(F_SETFL)") throws(SystemError) {
        let now = try posix(what()) { Int(fcntl(fd, F_GETFL)) }
        try posix(what()) { Int(fcntl(fd, F_SETFL, Int32(now) | flags)) }
    }

    /// Sets FD_CLOEXEC on a descriptor.
    package static func setCloseOnExec(_ fd: Int32) throws(SystemError) {
        try posix("fcntl(FD_CLOEXEC)") { Int(fcntl(fd, F_SETFD, FD_CLOEXEC)) }
    }

    // MARK: signals

    /// kill(2); false when the process is gone already (ESRCH is an expected outcome: it may
    /// have exited and been reaped since it was looked up).
    @discardableResult
    package static func kill(_ pid: pid_t, _ signal: Int32) throws(SystemError) -> Bool {
        try delivered("kill(\(pid), \(signal))") { Glibc.kill(pid, signal) }
    }

    /// killpg(2); false when the group has no process left (ESRCH).
    @discardableResult
    package static func killpg(_ group: pid_t, _ signal: Int32) throws(SystemError) -> Bool {
        try delivered("killpg(\(group), \(signal))") { Glibc.killpg(group, signal) }
    }

    private static func delivered(_ what: @autoclosure () -> String, _ call: () -> Int32) throws(SystemError) -> Bool {
        do { try posix(what()) { Int(call()) } } catch {
            if error.errno == ESRCH { return false }
            throw error
        }
        return true
    }

    /// A signal to a process drowsed started, adopted, or holds in an app's cgroup, where there
    /// is no one to tell of a failure and nothing else to do. ESRCH: it is gone already, which is
    /// the point. EPERM: a set-uid program among them while drowsed is not root; the cgroup kill
    /// or the next round of leftovers catches it. EINVAL (a bad signal number) is a bug and stops
    /// a debug build. Where a log is at hand, use `kill` and log what it throws.
    package static func killOwn(_ pid: pid_t, _ signal: Int32) {
        guard Glibc.kill(pid, signal) != 0 else { return }
        assert(errno != EINVAL, "kill(\(pid), \(signal)): invalid signal")
    }

    /// `killOwn` for a process group.
    package static func killpgOwn(_ group: pid_t, _ signal: Int32) {
        guard Glibc.killpg(group, signal) != 0 else { return }
        assert(errno != EINVAL, "killpg(\(group), \(signal)): invalid signal")
    }

    /// Installs `handler` for `signal` (no flags, nothing blocked while it runs).
    package static func setSignalHandler(_ signal: Int32, _ handler: @convention(c) (Int32) -> Void) throws(SystemError) {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = handler
        try posix("sigemptyset") { Int(sigemptyset(&action.sa_mask)) }
        try posix("sigaction(\(signal))") { Int(sigaction(signal, &action, nil)) }
    }

    /// Ignores `signal` (SIG_IGN).
    package static func ignoreSignal(_ signal: Int32) throws(SystemError) {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = SIG_IGN
        try posix("sigemptyset") { Int(sigemptyset(&action.sa_mask)) }
        try posix("sigaction(\(signal), SIG_IGN)") { Int(sigaction(signal, &action, nil)) }
    }

    // MARK: sockets and the environment

    /// SO_RCVTIMEO: a blocking recv on `fd` fails with EAGAIN after `seconds` without data.
    package static func setReceiveTimeout(_ fd: Int32, seconds: Double) throws(SystemError) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1e6))
        try posix("setsockopt(SO_RCVTIMEO)") {
            Int(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size)))
        }
    }

    /// shutdown(2); ENOTCONN (the peer is gone already) is an outcome, not a failure.
    package static func shutdown(_ fd: Int32, _ how: Int32) throws(SystemError) {
        do { try posix("shutdown") { Int(Glibc.shutdown(fd, how)) } } catch {
            if error.errno == ENOTCONN { return }
            throw error
        }
    }

    package static func setenv(_ name: String, _ value: String) throws(SystemError) {
        try posix("setenv \(name)") { Int(Glibc.setenv(name, value, 1)) }
    }

    /// waitpid(2) until the child has ended; its status.
    package static func waitForExit(_ pid: pid_t) throws(SystemError) -> Int32 {
        var status: Int32 = 0
        try posix("waitpid(\(pid))") { Int(waitpid(pid, &status, 0)) }
        return status
    }

    /// Sleeps `seconds` (a signal's interruption resumes the rest). nanosleep(2) fails otherwise
    /// only for a bad argument, which a finite duration of 0 or more cannot be.
    package static func sleep(seconds: Double) {
        guard seconds > 0, seconds.isFinite else { return }
        var ts = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
        var rest = timespec()
        while nanosleep(&ts, &rest) != 0 {
            guard errno == EINTR else { return }
            ts = rest
        }
    }
}

/// The former name of `Sys`, kept for code written against it.
@available(*, deprecated, renamed: "Sys")
package typealias CCheck = Sys
