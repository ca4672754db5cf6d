import DrowseCore
import DrowseStore
import DrowseSystem
import Logging

/// Where the board's conditions come from: `ConditionsProbe` (sysfs, /proc, nmcli), or a double.
package protocol ConditionsReader {
    func read(now: Double) -> Conditions
}

extension ConditionsProbe: ConditionsReader {}

/// Where the conditions part keeps what it saw: the store, or nothing (a test's).
package protocol ConditionsKeeper: AnyObject {
    func saveClockSkew(_ skew: Double) throws(StoreError)
    func recordConditions(_ c: Conditions, at: Double) throws(StoreError)
}

extension Store: ConditionsKeeper {}

/// Keeps nothing: a conditions part without a store (a test's).
package final class NothingKept: ConditionsKeeper {
    package init() {}
    package func saveClockSkew(_ skew: Double) throws(StoreError) {}
    package func recordConditions(_ c: Conditions, at: Double) throws(StoreError) {}
}

/// The board's power and network as a part of the daemon: it owns the last reading, the policy
/// that judges it, and the kernel watch (`ConditionsMonitor`: netlink, uevents, and the wall
/// clock's steps), and posts what the rest of the daemon needs to know as `DaemonEvent`s. It
/// never polls: it reads when the kernel reports a change, at each fetch window and on
/// `drowse conditions --refresh`.
@DaemonActor package final class ConditionsService: DaemonPart, ConditionsReading, SchedulerConditionsSource {
    package private(set) var current: Conditions
    let reader: ConditionsReader
    package let policy: ConditionsPolicy
    /// `[radio] model`: a named model, or "auto" for the current network's kind.
    let radioModel: RadioModelSetting
    /// `[radio] tail` in seconds, in place of the model's; nil: the model's.
    let radioTail: Double?
    let logger: Logger
    let events: DaemonEvents
    /// Where a step of the wall clock is noted (for the next start's `alignTimeline`) and each
    /// change of the conditions is kept (`drowse timeline`).
    let store: ConditionsKeeper
    let timeline: Timeline?
    /// The kernel's watch, on a thread of its own from `start`; what it reports reaches `serve`
    /// through `changes`, in its order.
    let monitor: ConditionsMonitor
    let changes: AsyncStream<ConditionsMonitor.Change>

    package nonisolated var partName: String { "conditions" }

    package init(reader: ConditionsReader, policy: ConditionsPolicy, radioModel: RadioModelSetting, radioTail: Double? = nil, now: Double,
                 timeline: Timeline? = nil, store: ConditionsKeeper = NothingKept(), logger: Logger, events: DaemonEvents = DaemonEvents()) {
        self.reader = reader
        self.store = store
        let (changes, reported) = AsyncStream<ConditionsMonitor.Change>.makeStream()
        self.changes = changes
        monitor = ConditionsMonitor(logger: logger, onChange: { reported.yield($0) }, onEnd: { reported.finish() })
        self.timeline = timeline
        self.policy = policy
        self.radioModel = radioModel
        self.radioTail = radioTail
        self.logger = logger
        self.events = events
        current = reader.read(now: now)
    }

    /// Start-up: the first reading is kept and the kernel watch starts.
    package func start() {
        keep(current, at: timeline?.now() ?? current.readAt)
        monitor.start()
    }

    /// What the kernel reports, in its order, until the watch's thread ends.
    package func serve() async -> Served {
        for await change in changes { kernelReported(change) }
        return .ended
    }

    /// Shutdown: the watch's thread ends, and with it `serve`.
    package func stop() async {
        monitor.stop()
    }

    func kernelReported(_ change: ConditionsMonitor.Change) {
        if case .clock = change { return clockStepped() }
        logger.debug("conditions: the kernel reports a \(change) change")
        refresh()
    }

    /// Reads power and network afresh and tells the daemon: waiting work may start, work that
    /// may not go on pauses.
    package func refresh() {
        read(now: timeline?.now() ?? current.readAt)
        events.post(.conditionsChanged)
    }

    /// The wall clock was set (a time sync, `date -s`). drowsed's timeline runs on the boot
    /// clock, so nothing planned moves: windows, deadlines, retries, budgets and allowances keep
    /// their waits. What changes: the skew that names timeline times in wall time (the API, the
    /// fleet status, DROWSE_DEADLINE), the time of day habits are read in, the publishers'
    /// expirations, and the store's note of the skew (for the next start's `alignTimeline`).
    /// docs/design.md, "Time on a board without a real-time clock".
    package func clockStepped() {
        guard let timeline else { return }
        let step = timeline.resync()
        guard abs(step) >= 0.001 else { return }
        logger.notice("the wall clock was set \(step > 0 ? "forward" : "back") by \(format3(abs(step))) s; planned times keep their waits")
        do { try store.saveClockSkew(timeline.skew) } catch { logger.error("store: \(error)") }
        events.post(.clockStepped(step: step))
    }

    /// Reads the conditions afresh; true when they differ from the last reading (its time aside),
    /// which is then logged once. Every reading is posted (`conditionsRead`).
    @discardableResult
    package func read(now: Double) -> Bool {
        let old = current
        current = reader.read(now: now)
        events.post(.conditionsRead(current))
        guard current != old.withReadAt(current.readAt) else { return false }
        keep(current, at: now)
        let c = current
        logger.info("conditions: \(c.powerSource.rawValue) power, network \(c.network.rawValue)\(c.interface.map { " (\($0))" } ?? "")\(c.metered ? ", metered" : "")")
        return true
    }

    /// A change (or the first reading) goes into the store's short history of conditions.
    func keep(_ c: Conditions, at now: Double) {
        do { try store.recordConditions(c, at: now) } catch { logger.error("store: conditions not kept: \(error)") }
    }

    /// The radio the scheduler reckons with: `[radio] model`, or the current network's kind.
    package var radio: RadioModel {
        var m = radioModel.model(network: current.network)
        if let radioTail { m.tailSeconds = radioTail }
        return m
    }

    /// What the fetch scheduler needs to know of the board now.
    package var forScheduler: FetchScheduler.Conditions {
        FetchScheduler.Conditions(online: current.network != .none, lowBattery: policy.batteryLow(current), radioTail: radio.tailSeconds)
    }

    /// Read afresh at a window boundary.
    package func readForScheduler() -> FetchScheduler.Conditions {
        read(now: timeline?.now() ?? current.readAt)
        return forScheduler
    }
}
