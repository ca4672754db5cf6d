#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys
import Logging
import Synchronization

/// rtnetlink messages, as far as the conditions monitor needs them. Pure: bytes in, values out.
package enum NetlinkRoute {
    package static let familyIPv4: UInt8 = 2
    package static let familyIPv6: UInt8 = 10
    /// RTNLGRP_IPV6_IFADDR (RTMGRP_IPV6_IFADDR is 1 << (9 - 1)), for NETLINK_ADD_MEMBERSHIP.
    package static let groupIPv6Addresses: Int32 = 9
    static let solNetlink: Int32 = 270
    static let addMembership: Int32 = 1
    /// The sequence number of our address dump; the kernel's own announcements carry 0.
    static let dumpSequence: UInt32 = 0x6472_7773

    static let newLink: UInt16 = 16, delLink: UInt16 = 17
    static let newAddr: UInt16 = 20, delAddr: UInt16 = 21, getAddr: UInt16 = 22
    static let newRoute: UInt16 = 24, delRoute: UInt16 = 25
    static let ifaFlagDADFailed: UInt32 = 0x08
    static let ifaFlagTentative: UInt32 = 0x40

    package struct Address: Hashable, Sendable, CustomStringConvertible {
        package var family: UInt8
        package var interface: UInt32
        package var prefixLength: UInt8
        package var bytes: [UInt8]

        package var description: String {
            if family == NetlinkRoute.familyIPv4, bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") + "/\(prefixLength)" }
            var groups: [String] = []
            var i = 0
            while i + 1 < bytes.count { groups.append(String(UInt16(bytes[i]) << 8 | UInt16(bytes[i + 1]), radix: 16)); i += 2 }
            return groups.joined(separator: ":") + "/\(prefixLength)"
        }
    }

    package enum Message: Equatable, Sendable, CustomStringConvertible {
        case link(interface: Int32, removed: Bool)
        /// `usable`: neither tentative (duplicate address detection still running) nor failed.
        case address(Address, removed: Bool, usable: Bool)
        case route(family: UInt8, removed: Bool)
        /// A reply to our own address dump: what is there already, not a change.
        case existingAddress(Address, usable: Bool)

        package var description: String {
            switch self {
            case .link(let i, let removed): return "link \(i) \(removed ? "removed" : "changed")"
            case .address(let a, let removed, let usable):
                return "\(a.family == NetlinkRoute.familyIPv6 ? "IPv6" : "IPv4") address \(a) on interface \(a.interface) \(removed ? "removed" : usable ? "added" : "added (tentative)")"
            case .route(let f, let removed): return "\(f == NetlinkRoute.familyIPv6 ? "IPv6" : "IPv4") route \(removed ? "removed" : "added")"
            case .existingAddress(let a, _): return "existing address \(a)"
            }
        }
    }

    /// The messages in one datagram; truncated or unknown ones are skipped.
    package static func messages(in data: ArraySlice<UInt8>) -> [Message] {
        let bytes = Array(data)
        var out: [Message] = []
        var offset = 0
        while offset + 16 <= bytes.count {
            let length = Int(load(UInt32.self, bytes, offset))
            guard length >= 16, offset + length <= bytes.count else { break }
            let type = load(UInt16.self, bytes, offset + 4)
            let sequence = load(UInt32.self, bytes, offset + 8)
            let body = offset + 16
            let end = offset + length
            switch type {
            case newLink, delLink:
                if end - body >= 16 { out.append(.link(interface: Int32(bitPattern: load(UInt32.self, bytes, body + 4)), removed: type == delLink)) }
            case newAddr, delAddr:
                if let (address, usable) = parseAddress(bytes, body, end) {
                    if sequence == dumpSequence, type == newAddr {
                        out.append(.existingAddress(address, usable: usable))
                    } else {
                        out.append(.address(address, removed: type == delAddr, usable: usable))
                    }
                }
            case newRoute, delRoute:
                if end - body >= 12 { out.append(.route(family: bytes[body], removed: type == delRoute)) }
            default:
                break  // NOOP, ERROR, DONE, OVERRUN and what we did not ask for.
            }
            offset += (length + 3) & ~3
        }
        return out
    }

    /// struct ifaddrmsg (8 bytes) and its attributes: IFA_ADDRESS 1, IFA_LOCAL 2, IFA_FLAGS 8.
    static func parseAddress(_ b: [UInt8], _ start: Int, _ end: Int) -> (Address, Bool)? {
        guard end - start >= 8 else { return nil }
        let family = b[start], prefixLength = b[start + 1]
        var flags = UInt32(b[start + 2])
        let interface = load(UInt32.self, b, start + 4)
        var address: [UInt8]?, local: [UInt8]?
        var a = start + 8
        while a + 4 <= end {
            let len = Int(load(UInt16.self, b, a)), type = load(UInt16.self, b, a + 2) & 0x3FFF
            guard len >= 4, a + len <= end else { break }
            let payload = Array(b[(a + 4)..<(a + len)])
            switch type {
            case 1: address = payload
            case 2: local = payload
            case 8 where payload.count == 4: flags = load(UInt32.self, payload, 0)
            default: break
            }
            a += (len + 3) & ~3
        }
        // IPv4 puts the interface's own address in IFA_LOCAL (IFA_ADDRESS is the peer on point-to-point links).
        guard let bytes = local ?? address, family == familyIPv4 || family == familyIPv6 else { return nil }
        let usable = flags & (ifaFlagTentative | ifaFlagDADFailed) == 0
        return (Address(family: family, interface: interface, prefixLength: prefixLength, bytes: bytes), usable)
    }

    static func load<T: FixedWidthInteger>(_: T.Type, _ b: [UInt8], _ offset: Int) -> T {
        b.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: T.self) }
    }

    /// Asks the kernel for every address (RTM_GETADDR, dump); the replies carry `sequence`.
    static func requestAddressDump(_ fd: Int32, sequence: UInt32) -> Bool {
        var req = [UInt8](repeating: 0, count: 24)
        func put<T: FixedWidthInteger>(_ v: T, _ at: Int) { withUnsafeBytes(of: v) { for (i, x) in $0.enumerated() { req[at + i] = x } } }
        put(UInt32(24), 0)
        put(getAddr, 4)
        put(UInt16(0x301), 6)  // NLM_F_REQUEST | NLM_F_DUMP
        put(sequence, 8)
        // ifaddrmsg: family AF_UNSPEC, the rest zero. Unaddressed, a netlink datagram goes to the kernel.
        return send(fd, req, req.count, 0) == req.count
    }
}
