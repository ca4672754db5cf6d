#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CDrowseSys

/// A plain OS thread for work that blocks in poll(2): the C libraries' loops and handler
/// supervision. Blocking there keeps Swift's cooperative pool free and the process asleep.
package enum OSThread {
    private final class Box {
        let body: @Sendable () -> Void
        let name: String
        init(_ name: String, _ body: @escaping @Sendable () -> Void) {
            self.body = body
            self.name = String(name.prefix(15))
        }
    }

    package static func detach(name: String, _ body: @escaping @Sendable () -> Void) {
        let arg = Unmanaged.passRetained(Box(name, body)).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            drowse_set_thread_name(box.name)
            box.body()
            return nil
        }, arg)
        precondition(rc == 0, "pthread_create failed: \(rc)")
        pthread_detach(tid)
    }
}

/// An eventfd used to wake a thread blocked in poll(2), or (`blocking`) in `wait()`.
package final class EventFD: Sendable {
    package let fd: Int32

    /// `blocking`: for a thread that waits on nothing else; `wait()` then sleeps in read(2).
    package init(blocking: Bool = false) {
        fd = blocking ? drowse_eventfd_blocking() : drowse_eventfd()
        precondition(fd >= 0, "eventfd failed: \(errno)")
    }

    deinit { close(fd) }

    package func signal() {
        var one: UInt64 = 1
        // EAGAIN only when the counter is full: a wake-up is pending anyway.
        _ = CCheck.noted("eventfd write") { write(fd, &one, 8) }
    }

    /// Blocks until signalled, and clears the signals (an eventfd made with `blocking: true`).
    package func wait() {
        var v: UInt64 = 0
        // Only EINTR can interrupt a blocking eventfd read of 8 bytes; CCheck retries it.
        _ = CCheck.noted("eventfd wait") { read(fd, &v, 8) }
    }

    /// Clears pending signals (call after poll reports the fd readable).
    package func drain() {
        var v: UInt64 = 0
        // EAGAIN when nothing was pending: nothing to clear.
        _ = CCheck.noted("eventfd read") { read(fd, &v, 8) }
    }
}

/// Wall-clock time as Unix seconds; the daemon's one source of "now".
package enum WallClock {
    package static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// CLOCK_BOOTTIME: monotonic, and counts time suspended (the base of `Timeline`).
    package static func boot() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_BOOTTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    package static func monotonic() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

/// Seconds east of UTC in the local time zone now (for "time of day" in usage learning).
package func localUTCOffset() -> Int {
    var t = time(nil)
    var tmv = tm()
    localtime_r(&t, &tmv)
    return tmv.tm_gmtoff
}
