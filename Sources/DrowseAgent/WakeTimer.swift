import NIOCore
import NIOPosix

/// A one-shot timer on NIO's event loop (a timerfd in its epoll set).
///
/// Not `Task.sleep`: on Linux that goes through libdispatch, and the first libdispatch worker
/// thread starts a 1 Hz pool-monitor timer that then wakes the process every second for
/// the rest of its life. drowsed runs Swift concurrency on NIO's event loops instead (see
/// `drowsed`'s entry point), so timers must come from there too.
public struct WakeTimer: Sendable {
    private let scheduled: Scheduled<Void>

    /// Runs `body` once, `seconds` from now.
    public static func after(_ seconds: Double, _ body: @escaping @Sendable () -> Void) -> WakeTimer {
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        let ms = Int64((max(0, seconds) * 1000).rounded(.up))
        return WakeTimer(scheduled: loop.scheduleTask(in: .milliseconds(ms)) { body() })
    }

    public func cancel() { scheduled.cancel() }
}
