import Foundation
import Logging
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import DrowseSystem

/// rtnetlink bytes as the kernel lays them out (host byte order, 4-byte alignment).
private struct NetlinkBuilder {
    var bytes: [UInt8] = []

    static func le<T: FixedWidthInteger>(_ v: T) -> [UInt8] { withUnsafeBytes(of: v) { Array($0) } }

    static func attribute(_ type: UInt16, _ payload: [UInt8]) -> [UInt8] {
        var a = le(UInt16(4 + payload.count)) + le(type) + payload
        while a.count % 4 != 0 { a.append(0) }
        return a
    }

    mutating func message(type: UInt16, sequence: UInt32 = 0, body: [UInt8]) {
        bytes += Self.le(UInt32(16 + body.count)) + Self.le(type) + Self.le(UInt16(0)) + Self.le(sequence) + Self.le(UInt32(0)) + body
        while bytes.count % 4 != 0 { bytes.append(0) }
    }

    /// RTM_NEWADDR (20) or RTM_DELADDR (21) for `address` on interface `index`.
    mutating func address(_ type: UInt16, family: UInt8, prefix: UInt8, index: UInt32, address: [UInt8], flags: UInt32 = 0,
                          sequence: UInt32 = 0, local: Bool = false) {
        var body: [UInt8] = [family, prefix, UInt8(truncatingIfNeeded: flags), 0] + Self.le(index)
        body += Self.attribute(local ? 2 : 1, address)
        body += Self.attribute(8, Self.le(flags))
        message(type: type, sequence: sequence, body: body)
    }
}

private let fd00_1: [UInt8] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]

@Suite("ConditionsMonitor: netlink messages")
struct NetlinkRouteMessageTests {
    @Test("RTM_NEWADDR and RTM_DELADDR for AF_INET6 are read: address, prefix, interface, tentative")
    func ipv6Address() {
        var b = NetlinkBuilder()
        b.address(20, family: 10, prefix: 64, index: 3, address: fd00_1, flags: 0x40)  // tentative
        b.address(20, family: 10, prefix: 64, index: 3, address: fd00_1)
        b.address(21, family: 10, prefix: 64, index: 3, address: fd00_1)
        let a = NetlinkRoute.Address(family: 10, interface: 3, prefixLength: 64, bytes: fd00_1)
        #expect(NetlinkRoute.messages(in: b.bytes[...]) == [
            .address(a, removed: false, usable: false),
            .address(a, removed: false, usable: true),
            .address(a, removed: true, usable: true),
        ])
        #expect(a.description == "fd00:0:0:0:0:0:0:1/64")
    }

    @Test("IPv4 addresses are keyed by IFA_LOCAL; links and routes are read; junk is skipped")
    func otherMessages() {
        var b = NetlinkBuilder()
        b.address(20, family: 2, prefix: 24, index: 2, address: [10, 0, 0, 2], local: true)
        b.message(type: 16, body: [0, 0, 1, 0] + NetlinkBuilder.le(Int32(7)) + [UInt8](repeating: 0, count: 8))  // RTM_NEWLINK, ifindex 7
        b.message(type: 24, body: [10] + [UInt8](repeating: 0, count: 11))  // RTM_NEWROUTE, AF_INET6
        b.message(type: 3, body: [0, 0, 0, 0])  // NLMSG_DONE
        b.address(20, family: 10, prefix: 64, index: 3, address: fd00_1, sequence: NetlinkRoute.dumpSequence)
        var truncated = b.bytes
        truncated += NetlinkBuilder.le(UInt32(200)) + NetlinkBuilder.le(UInt16(20))  // claims more than there is
        let messages = NetlinkRoute.messages(in: truncated[...])
        #expect(messages == [
            .address(NetlinkRoute.Address(family: 2, interface: 2, prefixLength: 24, bytes: [10, 0, 0, 2]), removed: false, usable: true),
            .link(interface: 7, removed: false),
            .route(family: 10, removed: false),
            .existingAddress(NetlinkRoute.Address(family: 10, interface: 3, prefixLength: 64, bytes: fd00_1), usable: true),
        ])
        #expect(NetlinkRoute.messages(in: [1, 2, 3][...]).isEmpty)
    }

    @Test("an address repeated to refresh its lifetimes is not a change; appearing, usable, gone are")
    func addressBook() {
        let a = NetlinkRoute.Address(family: 10, interface: 3, prefixLength: 64, bytes: fd00_1)
        var book = NetlinkAddressBook()
        let seen = [
            book.isChange(.existingAddress(a, usable: true)),
            book.isChange(.address(a, removed: false, usable: true)),  // a router advertisement refreshing it
            book.isChange(.address(a, removed: true, usable: true)),
            book.isChange(.address(a, removed: false, usable: false)),  // a new, tentative address
            book.isChange(.address(a, removed: false, usable: false)),
            book.isChange(.address(a, removed: false, usable: true)),  // duplicate address detection finished
            book.isChange(.link(interface: 3, removed: false)),
            book.isChange(.route(family: 10, removed: true)),
        ]
        #expect(seen == [false, false, true, true, false, true, true, true])
        #expect(book.known == [a: true])
    }
}

/// Runs a command; true when it exits 0. posix_spawn with a cleared signal mask.
private func run(_ argv: [String]) -> Bool {
    var pid: pid_t = 0
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    var attr = posix_spawnattr_t()
    posix_spawnattr_init(&attr)
    defer { posix_spawnattr_destroy(&attr) }
    var none = sigset_t()
    sigemptyset(&none)
    posix_spawnattr_setsigmask(&attr, &none)
    posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
    let cargs = argv.map { strdup($0) } + [nil]
    defer { for a in cargs { free(a) } }
    guard posix_spawnp(&pid, argv[0], &actions, &attr, cargs, environ) == 0 else { return false }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0, errno == EINTR {}
    return status == 0
}

/// A network namespace of its own with a veth pair (or a dummy link) left down, so adding an
/// IPv6 address there brings only the address message: no route appears for a down link.
private final class TestNamespace {
    let name = "drowse-v6-\(getpid())"
    let link = "dv6a"

    init?() {
        guard geteuid() == 0, run(["ip", "netns", "add", name]) else { return nil }
        guard run(["ip", "-n", name, "link", "add", link, "type", "dummy"])
            || run(["ip", "-n", name, "link", "add", link, "type", "veth", "peer", "name", "dv6b"])
        else {
            _ = run(["ip", "netns", "del", name])
            return nil
        }
    }

    func ip(_ args: String...) -> Bool { run(["ip", "-n", name] + args) }

    deinit { _ = run(["ip", "netns", "del", name]) }

    /// Whether a test namespace can be made here (root, iproute2, netns and veth or dummy links).
    static let usable: Bool = TestNamespace() != nil

    /// Starts `monitor` with its thread inside this namespace: a thread enters it with setns(2)
    /// and starts the monitor, whose thread inherits the namespace.
    func start(_ monitor: ConditionsMonitor) throws {
        typealias SetNS = @convention(c) (Int32, Int32) -> Int32
        guard let sym = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "setns") else { throw POSIXError(.ENOSYS) }
        let setns = unsafeBitCast(sym, to: SetNS.self)
        let fd = open("/run/netns/\(name)", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let result = Atomic<Int32>(-1)
        let done = Atomic<Bool>(false)
        OSThread.detach(name: "netns") {
            let rc = setns(fd, 0x4000_0000)  // CLONE_NEWNET
            if rc == 0 { monitor.start() }
            result.store(rc == 0 ? 0 : errno, ordering: .relaxed)
            done.store(true, ordering: .releasing)
        }
        while !done.load(ordering: .acquiring) { usleep(1000) }
        close(fd)
        let rc = result.load(ordering: .relaxed)
        guard rc == 0 else { throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO) }
    }
}

@Suite("ConditionsMonitor: IPv6 addresses", .serialized,
       .enabled(if: TestNamespace.usable, "needs root and `ip` able to make a network namespace and a link"))
struct ConditionsMonitorIPv6Tests {
    final class Changes: Sendable {
        let seen = Mutex<[ConditionsMonitor.Change]>([])
        func clear() { seen.withLock { $0.removeAll() } }
        var network: Int { seen.withLock { $0.filter { $0 == .network }.count } }
    }

    func waitFor(_ seconds: Double, _ condition: () -> Bool) async throws -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while !condition() {
            if Date() > end { return false }
            try await Task.sleep(for: .milliseconds(20))
        }
        return true
    }

    @Test("an IPv6 address added or removed is a network change (no link or route message comes with it); a lifetime refresh is not")
    func ipv6AddressChange() async throws {
        let ns = try #require(TestNamespace())
        let changes = Changes()
        let monitor = ConditionsMonitor(logger: Logger(label: "test")) { c in changes.seen.withLock { $0.append(c) } }
        // An address that is there before the monitor starts (usable at once: no duplicate
        // address detection), known to the monitor from its address dump.
        try #require(ns.ip("-6", "addr", "add", "fd00::2/64", "dev", ns.link, "nodad", "valid_lft", "3000", "preferred_lft", "2000"))
        try ns.start(monitor)
        defer { monitor.stop() }
        // Let the start-up (the address dump) settle; the namespace is otherwise quiet.
        try await Task.sleep(for: .milliseconds(400))
        changes.clear()

        // The kernel repeats RTM_NEWADDR when lifetimes are refreshed (as every router
        // advertisement does): not a change.
        try #require(ns.ip("-6", "addr", "change", "fd00::2/64", "dev", ns.link, "nodad", "valid_lft", "3600", "preferred_lft", "2400"))
        try await Task.sleep(for: .milliseconds(600))
        #expect(changes.network == 0, "a lifetime refresh was reported as a change")

        try #require(ns.ip("-6", "addr", "add", "fd00::1/64", "dev", ns.link))
        #expect(try await waitFor(3) { changes.network > 0 }, "adding fd00::1 was not reported")

        try await Task.sleep(for: .milliseconds(300))
        changes.clear()
        try #require(ns.ip("-6", "addr", "del", "fd00::1/64", "dev", ns.link))
        #expect(try await waitFor(3) { changes.network > 0 }, "removing fd00::1 was not reported")
    }

    @Test("as it begins the watch reports network and power once: a change before it is not lost")
    func firstReport() async throws {
        // The daemon reads the conditions before the watch begins; at boot a DHCP lease can
        // arrive in between (an address and a route the address dump then lists as known).
        // In a namespace where nothing happens, the monitor must still say "read again".
        let ns = try #require(TestNamespace())
        try #require(ns.ip("-6", "addr", "add", "fd00::3/64", "dev", ns.link, "nodad"))
        let changes = Changes()
        let monitor = ConditionsMonitor(logger: Logger(label: "test")) { c in changes.seen.withLock { $0.append(c) } }
        try ns.start(monitor)
        defer { monitor.stop() }
        #expect(try await waitFor(3) { changes.network == 1 }, "no first network report")
        try await Task.sleep(for: .milliseconds(500))
        let seen = changes.seen.withLock { $0 }
        #expect(seen.filter { $0 == .network }.count == 1 && seen.filter { $0 == .power }.count == 1, "\(seen)")
        #expect(!seen.contains(.clock), "\(seen)")
    }
}
