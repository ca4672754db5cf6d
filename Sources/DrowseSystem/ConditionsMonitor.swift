#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys
import Logging
import Synchronization

/// Tells when the network or the power supply changed, from the kernel's own events: a
/// netlink socket for links, IPv4 and IPv6 addresses and routes, and the uevent socket for
/// power_supply. One thread blocked in poll(2); no timers, except a short settle delay after an
/// event so that a burst (a link coming up brings several messages) gives one callback.
///
/// Address messages are compared with the addresses already known (read once at start): the
/// kernel repeats RTM_NEWADDR whenever an address's lifetimes are refreshed, which for an IPv6
/// address configured from router advertisements is every advertisement, and those must not
/// wake the daemon. An address that appears, goes, or becomes usable (its duplicate address
/// detection finished) is a change.
///
/// The same thread waits on a `ClockStepWatch`: a step of the wall clock is reported at once
/// (`.clock`), with no settle delay, so that drowsed converts times with the new skew.
package final class ConditionsMonitor: Sendable {
    package enum Change: Sendable { case network, power, clock }

    private let onChange: @Sendable (Change) -> Void
    private let logger: Logger
    private let wake = EventFD()
    private let stopping = Atomic<Bool>(false)

    package init(logger: Logger, onChange: @escaping @Sendable (Change) -> Void) {
        self.logger = logger
        self.onChange = onChange
    }

    package func start() {
        let me = Unmanaged.passRetained(self)
        OSThread.detach(name: "conditions") {
            me.takeUnretainedValue().run()
            me.release()
        }
    }

    /// Ends the thread and closes its sockets.
    package func stop() {
        stopping.store(true, ordering: .relaxed)
        wake.signal()
    }

    private func run() {
        let route = drowse_netlink_route_socket()
        let uevent = drowse_netlink_uevent_socket()
        defer {
            if route >= 0 { Sys.close(route, ignoringErrors: .nothingToFlush) }
            if uevent >= 0 { Sys.close(uevent, ignoringErrors: .nothingToFlush) }
        }
        if route < 0 { logger.warning("conditions: no netlink route socket (\(String(cString: strerror(errno)))): network changes are seen at window boundaries only") }
        if uevent < 0 { logger.info("conditions: no uevent socket: power changes are seen at window boundaries or on `drowse conditions --refresh`") }
        var clockFailure = ""
        var clock = ClockStepWatch(failure: &clockFailure)
        if clock == nil { logger.warning("conditions: cannot follow steps of the wall clock (\(clockFailure)): times shown may be off after a time sync until drowsed restarts") }
        var addresses = NetlinkAddressBook()
        if route >= 0 {
            // The socket helper joins links, IPv4 addresses and routes, and IPv6 routes; IPv6
            // addresses are joined here.
            var group = NetlinkRoute.groupIPv6Addresses
            if setsockopt(route, NetlinkRoute.solNetlink, NetlinkRoute.addMembership, &group, socklen_t(MemoryLayout<Int32>.size)) != 0 {
                logger.warning("conditions: cannot follow IPv6 address changes (\(String(cString: strerror(errno)))): they are seen at window boundaries only")
            }
            if !NetlinkRoute.requestAddressDump(route, sequence: NetlinkRoute.dumpSequence) {
                logger.info("conditions: cannot list the current addresses (\(String(cString: strerror(errno)))): the first message about each counts as a change")
            }
        }
        var buf = [UInt8](repeating: 0, count: 65536)
        var pending: Set<Int> = []  // 0 network, 1 power
        while !stopping.load(ordering: .relaxed) {
            var fds = [pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0)]
            if route >= 0 { fds.append(pollfd(fd: route, events: Int16(POLLIN), revents: 0)) }
            if uevent >= 0 { fds.append(pollfd(fd: uevent, events: Int16(POLLIN), revents: 0)) }
            if let clock { fds.append(pollfd(fd: clock.fd, events: Int16(POLLIN), revents: 0)) }
            // Settle for 150 ms after an event; otherwise sleep until the kernel says something.
            let n = poll(&fds, nfds_t(fds.count), pending.isEmpty ? -1 : 150)
            if n < 0 { if errno == EINTR { continue }; logger.error("conditions: poll: \(errno)"); return }
            if n == 0 {
                if pending.contains(0) { onChange(.network) }
                if pending.contains(1) { onChange(.power) }
                pending.removeAll()
                continue
            }
            for p in fds where p.revents != 0 {
                if p.fd == wake.fd { wake.drain(); continue }
                if let watch = clock, p.fd == watch.fd {
                    switch watch.consume() {
                    case .stepped: onChange(.clock)
                    case .nothing: break
                    case .failed(let why):
                        // Not polled again: a timer that cannot be re-armed would stay readable.
                        logger.warning("conditions: stopped following steps of the wall clock: \(why)")
                        clock = nil
                    }
                    continue
                }
                while true {
                    let r = buf.withUnsafeMutableBytes { recv(p.fd, $0.baseAddress, $0.count, 0) }
                    if r < 0, errno == ENOBUFS, p.fd == route {
                        // The kernel dropped messages: something changed, and what is known may be stale.
                        logger.debug("conditions: netlink overrun")
                        pending.insert(0)
                        continue
                    }
                    if r <= 0 { break }
                    if p.fd == route {
                        for message in NetlinkRoute.messages(in: buf[0..<r]) where addresses.isChange(message) {
                            logger.debug("conditions: netlink: \(message)")
                            pending.insert(0)
                        }
                    } else if String(decoding: buf[0..<r], as: UTF8.self).contains("SUBSYSTEM=power_supply") {
                        pending.insert(1)
                    }
                }
            }
        }
    }
}

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
