#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A failed system call with what it was doing.
package struct SystemError: Error, CustomStringConvertible, Sendable {
    package var what: String
    package var errno: Int32
    package init(_ what: String, errno: Int32) {
        self.what = what
        self.errno = errno
    }
    package var description: String { "\(what): \(String(cString: strerror(errno)))" }
    /// Disk full or quota exceeded: worth pausing for, not failing.
    package var isNoSpace: Bool { errno == ENOSPC || errno == EDQUOT }
}
