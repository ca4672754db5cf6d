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
///
/// Once its sockets listen, the monitor reports network and power once: what changed between
/// the daemon's first reading and the start of the watch is read then, not lost.
package final class ConditionsMonitor: Sendable {
    package enum Change: Sendable { case network, power, clock }

    private let onChange: @Sendable (Change) -> Void
    private let onEnd: @Sendable () -> Void
    private let logger: Logger
    private let wake = EventFD()
    private let stopping = Atomic<Bool>(false)

    /// `onEnd`: the thread ended (after `stop`, or on its own).
    package init(logger: Logger, onChange: @escaping @Sendable (Change) -> Void, onEnd: @escaping @Sendable () -> Void = {}) {
        self.logger = logger
        self.onChange = onChange
        self.onEnd = onEnd
    }

    package func start() {
        let me = Unmanaged.passRetained(self)
        OSThread.detach(name: "conditions") {
            let monitor = me.takeUnretainedValue()
            monitor.run()
            monitor.onEnd()
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
        if route < 0 { let saved = errno; logger.warning("conditions: no netlink route socket (\(String(cString: strerror(saved)))): network changes are seen at window boundaries only") }
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
                let saved = errno
                logger.warning("conditions: cannot follow IPv6 address changes (\(String(cString: strerror(saved)))): they are seen at window boundaries only")
            }
            if !NetlinkRoute.requestAddressDump(route, sequence: NetlinkRoute.dumpSequence) {
                let saved = errno
                logger.info("conditions: cannot list the current addresses (\(String(cString: strerror(saved)))): the first message about each counts as a change")
            }
        }
        var buf = [UInt8](repeating: 0, count: 65536)
        // The daemon's first reading was taken before this watch began: a change in between (a
        // DHCP lease arriving while drowsed starts at boot) would otherwise wait for the next
        // event, which may never come. So the watch reports network and power once as it
        // begins, after the settle delay (the address dump's answers are not changes). Not the
        // clock: a resync moves the skew by its read jitter, and times shown would move by it.
        var pending: Set<Int> = [0, 1]  // 0 network, 1 power
        while !stopping.load(ordering: .relaxed) {
            var fds = [pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0)]
            if route >= 0 { fds.append(pollfd(fd: route, events: Int16(POLLIN), revents: 0)) }
            if uevent >= 0 { fds.append(pollfd(fd: uevent, events: Int16(POLLIN), revents: 0)) }
            if let clock { fds.append(pollfd(fd: clock.fd, events: Int16(POLLIN), revents: 0)) }
            // Settle for 150 ms after an event; otherwise sleep until the kernel says something.
            let n = poll(&fds, nfds_t(fds.count), pending.isEmpty ? -1 : 150)
            if n < 0 { if errno == EINTR { continue }; let saved = errno; logger.error("conditions: poll: \(saved)"); return }
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
