import DrowseCore

/// The simulator's driver of `FetchScheduler`: feeds it events and keeps what its actions ask
/// of the clock (the one timer). `Simulator` runs scenarios through it; `TraceReplay` runs a
/// trace recorded by `drowsed` through it.
public struct SchedulerDriver: Sendable {
    public private(set) var scheduler: FetchScheduler
    /// When the scheduler wants `timerFired` next.
    public private(set) var timerAt: Double?

    public init(_ scheduler: FetchScheduler) {
        self.scheduler = scheduler
    }

    public mutating func feed(_ event: FetchScheduler.Event) -> [FetchScheduler.Action] {
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
