#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys
import Logging

/// Tells when the network or the power supply changed, from the kernel's own events: a
/// netlink socket for links and routes, and the uevent socket for power_supply. One thread
/// blocked in poll(2); no timers, except a short settle delay after an event so that a burst
/// (a link coming up brings several messages) gives one callback.
public final class ConditionsMonitor: Sendable {
    public enum Change: Sendable { case network, power }

    private let onChange: @Sendable (Change) -> Void
    private let logger: Logger
    private let wake = EventFD()

    public init(logger: Logger, onChange: @escaping @Sendable (Change) -> Void) {
        self.logger = logger
        self.onChange = onChange
    }

    public func start() {
        let me = Unmanaged.passRetained(self)
        OSThread.detach(name: "conditions") {
            me.takeUnretainedValue().run()
            me.release()
        }
    }

    private func run() {
        let route = drowse_netlink_route_socket()
        let uevent = drowse_netlink_uevent_socket()
        if route < 0 { logger.warning("conditions: no netlink route socket (\(String(cString: strerror(errno)))): network changes are seen at window boundaries only") }
        if uevent < 0 { logger.info("conditions: no uevent socket: power changes are seen at window boundaries or on `drowse conditions --refresh`") }
        var buf = [UInt8](repeating: 0, count: 65536)
        var pending: Set<Int> = []  // 0 network, 1 power
        while true {
            var fds = [pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0)]
            if route >= 0 { fds.append(pollfd(fd: route, events: Int16(POLLIN), revents: 0)) }
            if uevent >= 0 { fds.append(pollfd(fd: uevent, events: Int16(POLLIN), revents: 0)) }
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
                while true {
                    let r = buf.withUnsafeMutableBytes { recv(p.fd, $0.baseAddress, $0.count, 0) }
                    if r <= 0 { break }
                    if p.fd == route {
                        pending.insert(0)
                    } else if String(decoding: buf[0..<r], as: UTF8.self).contains("SUBSYSTEM=power_supply") {
                        pending.insert(1)
                    }
                }
            }
        }
    }
}
