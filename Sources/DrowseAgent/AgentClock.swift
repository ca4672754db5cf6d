import DrowseCore
import DrowseSystem
import NIOCore
import NIOPosix
import Synchronization

/// Time as the agent sees it: its timeline (docs/design.md, "Time on a board without a real-time
/// clock") and one-shot wakes. The daemon runs on `SystemClock`; a test drives the agent on a
/// `ManualClock`, moving the boot clock and setting the wall clock as it pleases.
package protocol AgentClock: Sendable {
    var timeline: Timeline { get }
    /// Runs `body` once, `seconds` from now on the timeline (negatives at once).
    func wake(after seconds: Double, _ body: @escaping @Sendable () -> Void) -> WakeTimer
}

/// A wake set by an `AgentClock`; `cancel` before it fires and it never does.
package struct WakeTimer: Sendable {
    private let cancelBody: @Sendable () -> Void

    package init(cancel: @escaping @Sendable () -> Void) { cancelBody = cancel }

    package func cancel() { cancelBody() }
}

/// The system's clocks, and wakes on NIO's event loop (a timerfd in its epoll set).
///
/// Not `Task.sleep`: on Linux that goes through libdispatch, and the first libdispatch worker
/// thread starts a 1 Hz pool-monitor timer that then wakes the process every second for
/// the rest of its life. drowsed runs Swift concurrency on NIO's event loops instead (see
/// `drowsed`'s entry point), so timers must come from there too.
package struct SystemClock: AgentClock {
    package let timeline: Timeline

    package init(timeline: Timeline = .process) { self.timeline = timeline }

    /// Any Double is accepted: NaN and delays beyond `TimeLimits.maxTimerDelay` (ten years) wait
    /// that long, so a deadline computed from a bad stored value cannot trap or spin.
    package func wake(after seconds: Double, _ body: @escaping @Sendable () -> Void) -> WakeTimer {
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        let scheduled = loop.scheduleTask(in: Self.amount(seconds)) { body() }
        return WakeTimer { scheduled.cancel() }
    }

    /// The delay as NIO takes it, rounded up to whole milliseconds.
    static func amount(_ seconds: Double) -> TimeAmount {
        .milliseconds(Int64(saturating: TimeLimits.timerDelay(seconds) * 1000, rounding: .up))
    }
}

/// A clock a test moves: the boot clock only by `advance` (firing the wakes that come due, in
/// order), the wall clock also by `setWall`/`step` (a time sync), which fires nothing.
package final class ManualClock: AgentClock {
    private struct State {
        var wall: Double
        var boot: Double
        var nextID = 0
        var wakes: [(id: Int, at: Double, body: @Sendable () -> Void)] = []
    }

    private final class Box: Sendable {
        let state: Mutex<State>
        init(_ s: State) { state = Mutex(s) }
    }

    private let box: Box
    package let timeline: Timeline

    package init(wall: Double = 1_800_000_000, boot: Double = 1000) {
        let box = Box(State(wall: wall, boot: boot))
        self.box = box
        timeline = Timeline { box.state.withLock { ($0.wall, $0.boot) } }
    }

    package func wake(after seconds: Double, _ body: @escaping @Sendable () -> Void) -> WakeTimer {
        let id: Int = box.state.withLock { s in
            s.nextID += 1
            s.wakes.append((s.nextID, s.boot + TimeLimits.timerDelay(seconds), body))
            return s.nextID
        }
        return WakeTimer { [box] in box.state.withLock { $0.wakes.removeAll { $0.id == id } } }
    }

    /// Wakes waiting, and when the first one comes due (boot clock time).
    package var pendingWakes: (count: Int, first: Double?) {
        box.state.withLock { s in (s.wakes.count, s.wakes.map(\.at).min()) }
    }

    /// Moves both clocks forward by `seconds`, firing each wake that comes due at its time.
    package func advance(by seconds: Double) {
        let end = box.state.withLock { $0.boot + seconds }
        while true {
            let due: (@Sendable () -> Void)? = box.state.withLock { s in
                guard let i = s.wakes.indices.min(by: { s.wakes[$0].at < s.wakes[$1].at }), s.wakes[i].at <= end else { return nil }
                let w = s.wakes.remove(at: i)
                s.wall += w.at - s.boot
                s.boot = w.at
                return w.body
            }
            guard let due else { break }
            due()
        }
        box.state.withLock { s in
            s.wall += end - s.boot
            s.boot = end
        }
    }

    /// Moves both clocks by `seconds` without firing anything (a test that fires its service's
    /// wakes by hand).
    package func jump(by seconds: Double) {
        box.state.withLock { s in
            s.wall += seconds
            s.boot += seconds
        }
    }

    /// Sets the wall clock `seconds` forward (negative: back), as a time sync does; the boot
    /// clock does not move and no wake fires.
    package func step(by seconds: Double) {
        box.state.withLock { $0.wall += seconds }
    }
}
