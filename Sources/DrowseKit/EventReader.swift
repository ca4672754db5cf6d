#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import DrowseCore
import DrowsePOSIX
import Synchronization

/// Keeps one event stream open on its own thread: connects, reads (blocked in recv), and
/// reconnects with a capped backoff when the connection ends, until cancelled.
final class EventReader: Sendable {
    let socket: String
    let target: String
    private let state = Mutex<(fd: Int32, cancelled: Bool)>((-1, false))
    private let wake = EventFD()
    /// A connection that delivered an event or lasted this long resets the backoff.
    static let healthyAfter = 5.0

    init(socket: String, target: String) {
        self.socket = socket
        self.target = target
    }

    func cancel() {
        state.withLock { s in
            s.cancelled = true
            // Ends the reader's blocked recv. A failure here can only mean the connection is
            // already down, which ends the recv as well.
            if s.fd >= 0, let e = Sys.noted("shutdown", { Int(shutdown(s.fd, Int32(SHUT_RDWR))) }) {
                assert(e.errno != EBADF, "shutdown of the event stream: \(e)")
            }
        }
        wake.signal()
    }

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    func run(deliver: (DrowseEvent) -> Void, finish: (Error?) -> Void) {
        var backoff = Backoff(base: 0.1, cap: 5)
        while !isCancelled {
            let started = WallClock.monotonic()
            switch connectOnce(deliver: deliver) {
            case .refused(let error):
                finish(error)
                return
            case .ended(let delivered):
                if delivered || WallClock.monotonic() - started >= Self.healthyAfter { backoff.reset() }
            }
            if isCancelled { break }
            do {
                // Woken early only by `cancel()`, checked at the top of the loop.
                if try wake.sleep(backoff.next(unit: Double.random(in: 0..<1))) { wake.drain() }
            } catch {
                finish(DrowseError.transport("cannot wait to reconnect: \(error)"))
                return
            }
        }
        finish(nil)
    }

    enum Outcome {
        /// The connection ended (or never started); `delivered`: it carried at least one event.
        case ended(delivered: Bool)
        /// drowsed answered with a 4xx: retrying will not help.
        case refused(DrowseError)
    }

    private func connectOnce(deliver: (DrowseEvent) -> Void) -> Outcome {
        let fd: Int32
        do { fd = try UnixHTTP.connect(socket) } catch { return .ended(delivered: false) }
        let go = state.withLock { s -> Bool in
            guard !s.cancelled else { return false }
            s.fd = fd
            return true
        }
        defer {
            state.withLock { $0.fd = -1 }
            Sys.close(fd, ignoringErrors: .nothingToFlush)
        }
        guard go else { return .ended(delivered: false) }
        let request = UnixHTTP.requestBytes(method: "GET", target: target, body: nil, accept: "application/x-ndjson")
        do { try UnixHTTP.sendAll(fd, request) } catch { return .ended(delivered: false) }
        var parser = EventStreamParser()
        var delivered = false
        var buf = [UInt8](repeating: 0, count: 16384)
        while true {
            let n: Int
            do { n = try UnixHTTP.receive(fd, into: &buf) } catch { break }
            if n == 0 {
                try? parser.closed()
                break
            }
            let lines: [EventLine]
            do { lines = try parser.feed(buf[0..<n]) } catch { break }
            for line in lines {
                if case .event(let e) = line {
                    delivered = true
                    deliver(e)
                }
            }
            if parser.http.isComplete { break }
        }
        if let status = parser.status, status != 200 {
            if (400..<500).contains(status) && status != 408 && status != 429 {
                return .refused(DrowseError.answer(status: status, body: parser.errorBody))
            }
        }
        return .ended(delivered: delivered)
    }
}
