#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CDrowseSys

/// An eventfd used to wake a thread blocked in poll(2), or (`blocking`) in `wait()`.
package final class EventFD: Sendable {
    package let fd: Int32

    /// `blocking`: for a thread that waits on nothing else; `wait()` then sleeps in read(2).
    package init(blocking: Bool = false) {
        fd = blocking ? drowse_eventfd_blocking() : drowse_eventfd()
        let saved = errno
        precondition(fd >= 0, "eventfd failed: \(saved)")
    }

    deinit { Sys.close(fd, ignoringErrors: .nothingToFlush) }

    package func signal() { Self.signal(fd) }

    /// Blocks until signalled, and clears the signals (an eventfd made with `blocking: true`).
    package func wait() { Self.read(fd) }

    /// Clears pending signals (call after poll reports the fd readable).
    package func drain() { Self.read(fd) }

    /// Adds one to the counter of the eventfd `fd` (a descriptor made by `drowse_eventfd`).
    /// EAGAIN only when the counter is full: a wake-up is pending anyway. Nothing else can fail
    /// on an open eventfd; anything else is a broken invariant (a closed descriptor) and stops.
    package static func signal(_ fd: Int32, adding value: UInt64 = 1) {
        var v = value
        // nil: EAGAIN, the counter is full.
        do { _ = try Sys.write(fd, &v, count: 8, "eventfd write") } catch { preconditionFailure("eventfd \(fd): \(error)") }
    }

    /// Reads (and so clears) the counter of `fd`: blocks until signalled on a blocking eventfd;
    /// 0 on a non-blocking one with nothing pending (EAGAIN). EINTR is retried.
    @discardableResult
    package static func read(_ fd: Int32) -> UInt64 {
        var v: UInt64 = 0
        do {
            guard try Sys.read(fd, into: &v, count: 8, "eventfd read") != nil else { return 0 }
        } catch {
            preconditionFailure("eventfd \(fd): \(error)")
        }
        return v
    }
}

extension EventFD {
    /// Sleeps in poll(2) up to `seconds` (monotonic); true when signalled meanwhile (the signal
    /// stays pending until `drain()`). A poll that fails (ENOMEM) is thrown rather than retried.
    package func sleep(_ seconds: Double) throws(SystemError) -> Bool {
        let end = WallClock.monotonic() + seconds
        while true {
            let left = end - WallClock.monotonic()
            if left <= 0 { return false }
            if try Sys.poll(fd, events: Int16(POLLIN), timeoutMs: Int32(min(left * 1000, 3_600_000).rounded(.up))) != 0 { return true }
        }
    }
}
