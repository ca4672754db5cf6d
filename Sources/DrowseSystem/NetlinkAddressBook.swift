#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys
import Logging
import Synchronization

/// Which rtnetlink messages are changes to the network: every link and route message, and an
/// address message only when an address appears, goes, or changes whether it is usable — not
/// when the kernel repeats it to refresh its lifetimes.
package struct NetlinkAddressBook: Sendable {
    /// Known addresses and whether each is usable.
    package private(set) var known: [NetlinkRoute.Address: Bool] = [:]

    package init() {}

    package mutating func isChange(_ message: NetlinkRoute.Message) -> Bool {
        switch message {
        case .link, .route:
            return true
        case .existingAddress(let a, let usable):
            known[a] = usable
            return false
        case .address(let a, let removed, let usable):
            if removed {
                known.removeValue(forKey: a)
                return true
            }
            return known.updateValue(usable, forKey: a) != usable
        }
    }
}
