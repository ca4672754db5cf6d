#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one place where drowsed judges the return code of a libc call it does not turn into an
/// error of its own (libcurl's go through `CurlCheck`, libmosquitto's through `MosquittoError`,
/// SQLite's through `StoreError`). No call's result is thrown away: a failure either throws a
/// `SystemError` naming the call, or is handed back for the caller to log, and EINTR is retried.
package enum CCheck {
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

    /// poll(2) that never spins: after an error other than EINTR it waits out the timeout, or 100 ms
    /// without one (a broken poll in a loop would otherwise burn a core), and reports nothing ready.
    @discardableResult
    package static func poll(_ fds: inout [pollfd], timeoutMs: Int32) -> Int {
        let rc = Int(Glibc.poll(&fds, nfds_t(fds.count), timeoutMs))
        if rc < 0 {
            // Wait out the timeout (or 100 ms when there is none) rather than retry at once.
            if errno != EINTR { usleep(timeoutMs > 0 ? UInt32(timeoutMs) * 1000 : 100_000) }
            for i in fds.indices { fds[i].revents = 0 }
            return 0
        }
        return rc
    }
}
