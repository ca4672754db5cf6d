#if canImport(Glibc)
import Glibc
#endif
import CCurl
import DrowseCore
import DrowseSystem
import Logging
import Synchronization

extension StringProtocol {
    func trimmingCharacters() -> String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
