#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import Logging

/// A libmosquitto call that did not return `MOSQ_ERR_SUCCESS`, in words. Every return code of
/// a libmosquitto call goes through here (`check`, `init?(rc:call:)` or `Logger.mosquitto`);
/// each call site decides what a failure means: refuse to start, drop the connection, or
/// only log it.
package struct MosquittoError: Error, CustomStringConvertible, Equatable, Sendable {
    /// The function that failed, e.g. "mosquitto_connect".
    package let call: String
    package let rc: Int32
    /// `mosquitto_strerror(rc)`, or `strerror(errno)` when the library says "see errno".
    package let detail: String

    /// nil when `rc` is `MOSQ_ERR_SUCCESS`. Call it right after the call: for
    /// `MOSQ_ERR_ERRNO` it reads `errno`.
    package init?(rc: Int32, call: String) {
        guard rc != MOSQ_ERR_SUCCESS.rawValue else { return nil }
        let savedErrno = errno
        self.call = call
        self.rc = rc
        if rc == MOSQ_ERR_ERRNO.rawValue {
            detail = String(cString: strerror(savedErrno))
        } else {
            detail = String(cString: mosquitto_strerror(rc))
        }
    }

    /// Throws when `rc` is not `MOSQ_ERR_SUCCESS`.
    package static func check(_ rc: Int32, _ call: String) throws(MosquittoError) {
        if let e = MosquittoError(rc: rc, call: call) { throw e }
    }

    /// For a call whose failure loses nothing (the goodbye after the work is done): whether it
    /// went.
    @discardableResult
    package static func tolerated(_ rc: Int32, _ call: String) -> Bool { MosquittoError(rc: rc, call: call) == nil }

    package var description: String { "\(call): \(detail)" }
}

extension Logger {
    /// Logs a failed libmosquitto call at `level` ("mqtt: <call>: <why>[ (<context>)]"); true
    /// when the call succeeded. For calls whose failure the caller can live with.
    @discardableResult
    package func mosquitto(_ rc: Int32, _ call: String, level: Logger.Level, _ context: String = "") -> Bool {
        guard let e = MosquittoError(rc: rc, call: call) else { return true }
        log(level: level, "mqtt: \(e)\(context.isEmpty ? "" : " (\(context))")")
        return false
    }
}
