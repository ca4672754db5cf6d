import DrowseCore
import NIOCore
import NIOPosix

/// A one-shot timer on NIO's event loop (a timerfd in its epoll set).
///
/// Not `Task.sleep`: on Linux that goes through libdispatch, and the first libdispatch worker
/// thread starts a 1 Hz pool-monitor timer that then wakes the process every second for
/// the rest of its life. drowsed runs Swift concurrency on NIO's event loops instead (see
/// `drowsed`'s entry point), so timers must come from there too.
package struct WakeTimer: Sendable {
    private let scheduled: Scheduled<Void>

    /// Runs `body` once, `seconds` from now. Any Double is accepted: negatives fire at once,
    /// NaN and delays beyond `TimeLimits.maxTimerDelay` (ten years) wait that long, so a
    /// deadline computed from a bad stored value cannot trap or spin.
    package static func after(_ seconds: Double, _ body: @escaping @Sendable () -> Void) -> WakeTimer {
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        return WakeTimer(scheduled: loop.scheduleTask(in: amount(seconds)) { body() })
    }

    /// The delay as NIO takes it, rounded up to whole milliseconds.
    static func amount(_ seconds: Double) -> TimeAmount {
        .milliseconds(Int64(saturating: TimeLimits.timerDelay(seconds) * 1000, rounding: .up))
    }

    package func cancel() { scheduled.cancel() }
}
