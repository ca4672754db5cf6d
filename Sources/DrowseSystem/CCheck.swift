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

    /// poll(2), retried on EINTR; any other error is thrown, for the caller to stop waiting (a
    /// loop that polled again at once would burn a core).
    @discardableResult
    package static func poll(_ fds: inout [pollfd], timeoutMs: Int32) throws(SystemError) -> Int {
        try posix("poll") { Int(Glibc.poll(&fds, nfds_t(fds.count), timeoutMs)) }
    }
}
