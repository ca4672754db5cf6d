#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CDrowseSys
import Synchronization

/// Drowse's own time (docs/design.md, "Time on a board without a real-time clock").
///
/// Every time drowsed plans or records (fetch windows, handler deadlines, retries, notification
/// budgets and rollout delays, background-task allowances, the runs it keeps) is a point on this
/// timeline: seconds on CLOCK_BOOTTIME, which runs forward at the pace of real time (suspend
/// included) and is never set, named in Unix time as the wall clock stood when the timeline
/// began. A step of the wall clock (the first time sync of a board that booted with its clock
/// far behind, or an operator's `date -s`) is not time passing: nothing planned comes due early
/// and nothing waits longer. What the step changes is `skew`, how far the wall clock now stands
/// from the timeline: times shown to people are converted with it (`wall`), and so are the
/// absolute times that come from outside (`fromWall`: a notification's `expiration`).
package final class Timeline: Sendable {
    /// The process's timeline: one per drowsed.
    package static let process = Timeline()

    /// One reading of the two clocks the timeline is made of.
    package typealias Reading = @Sendable () -> (wall: Double, boot: Double)

    /// Wall clock minus boot clock when the timeline began: timeline time t is boot time t − origin.
    package let origin: Double
    private let read: Reading
    private let skewState: Mutex<Double>

    /// `read`: the system's CLOCK_REALTIME and CLOCK_BOOTTIME; a test passes a manual pair.
    package init(read: @escaping Reading = { (WallClock.now(), WallClock.boot()) }) {
        self.read = read
        let r = read()
        origin = r.wall - r.boot
        skewState = Mutex(0)
    }

    /// Drowse's now: boot time named in the wall time of the timeline's start.
    package func now() -> Double { read().boot + origin }

    /// How far the wall clock stands ahead of the timeline (0 until the clock is first stepped).
    package var skew: Double { skewState.withLock { $0 } }

    /// A timeline time as the wall clock names it now (what `drowse` shows and handlers see).
    package func wall(_ t: Double) -> Double { t + skew }
    package func wall(_ t: Double?) -> Double? { t.map { $0 + skew } }

    /// A wall-clock time from outside (a publisher's expiration) as a timeline time.
    package func fromWall(_ w: Double) -> Double { w - skew }

    /// Reads the wall clock again after it was set. Returns the step: how far the wall clock moved
    /// against the timeline since the last reading (positive: set forward).
    @discardableResult
    package func resync() -> Double {
        let r = read()
        let skew = r.wall - r.boot - origin
        return skewState.withLock { old in
            let step = skew - old
            old = skew
            return step
        }
    }

    /// This boot's id (`/proc/sys/kernel/random/boot_id`): the boot clock is comparable only within one boot.
    package static func bootID() -> String? {
        guard let text = try? FileSystem.readText("/proc/sys/kernel/random/boot_id", limit: 64) else { return nil }
        let id = String(text.filter { $0.isHexDigit || $0 == "-" })
        return id.isEmpty ? nil : id
    }
}
