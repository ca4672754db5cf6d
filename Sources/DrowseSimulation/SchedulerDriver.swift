import DrowseCore

/// The simulator's driver of `FetchScheduler`: feeds it events and keeps what its actions ask
/// of the clock (the one timer). `Simulator` runs scenarios through it; `TraceReplay` runs a
/// trace recorded by `drowsed` through it.
package struct SchedulerDriver: Sendable {
    package private(set) var scheduler: FetchScheduler
    /// When the scheduler wants `timerFired` next.
    package private(set) var timerAt: Double?

    package init(_ scheduler: FetchScheduler) {
        self.scheduler = scheduler
    }

    package mutating func feed(_ event: FetchScheduler.Event) -> [FetchScheduler.Action] {
        if case .timerFired = event { timerAt = nil }
        let actions = scheduler.handle(event)
        for action in actions {
            switch action {
            case .setTimer(let at): timerAt = at
            case .cancelTimer: timerAt = nil
            default: break
            }
        }
        return actions
    }
}
