#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `errno`, where a member of the same name would hide it.
private func currentErrno() -> Int32 { errno }

/// A failed system call with what it was doing.
package struct SystemError: Error, CustomStringConvertible, Sendable {
    package var what: String
    package var errno: Int32
    package init(_ what: String, errno: Int32) {
        self.what = what
        self.errno = errno
    }
    /// The error the last failed call left in `errno`, read before `what` is built (building a
    /// string may set errno).
    package static func last(_ what: @autoclosure () -> String) -> SystemError {
        let e = currentErrno()
        return SystemError(what(), errno: e)
    }
    package var description: String { "\(what): \(String(cString: strerror(self.errno)))" }
    /// Disk full or quota exceeded: worth pausing for, not failing.
    package var isNoSpace: Bool { errno == ENOSPC || errno == EDQUOT }
}
