@testable import DrowseAgent
import DrowseCore

/// A handler queue that only records what the parts queued.
@DaemonActor final class RecordingRunQueue: RunQueue {
    var runs: [QueuedRun] = []
    var stopping = false
    var startsAtOnce = false
    func enqueue(_ run: QueuedRun, owner: any RunOwner) { runs.append(run) }
}

/// Downloads a notification pushes, refused (no transfers part in the test).
@DaemonActor final class NoDownloads: DownloadPusher {
    func pushDownload(_ request: TransferRequest) throws(TransferService.Refusal) -> Transfer { throw .store("transfers are not running") }
}

/// No fetch window planned.
@DaemonActor final class NoWindows: NextWindowSource {
    var nextWindowAt: Double? { nil }
}

/// Conditions a test sets.
@DaemonActor final class FixedConditions: ConditionsReading, SchedulerConditionsSource {
    var current = Conditions()
    var scheduler = FetchScheduler.Conditions(online: true, radioTail: 10)
    var forScheduler: FetchScheduler.Conditions { scheduler }
    func readForScheduler() -> FetchScheduler.Conditions { scheduler }
}

extension ManualClock {
    /// The clock's time; set it to move the clock without firing anything (a rig fires its
    /// service's wakes by hand).
    var now: Double {
        get { timeline.now() }
        set { jump(by: newValue - timeline.now()) }
    }
}

/// The apps the fetch scheduler starts with, as a test lists them.
@DaemonActor final class FixedIntervals: FetchIntervals {
    var fetchIntervals: [(id: String, interval: Double?)]
    init(_ apps: [(id: String, interval: Double?)] = []) { fetchIntervals = apps }
}
