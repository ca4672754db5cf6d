#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem

/// drowsed's side of the fetch scheduler: it feeds `FetchScheduler` what happens (with the time)
/// and carries out its actions — starts handlers, sets the one wake timer, writes the store,
/// logs. Every decision about fetch windows is the scheduler's (and `drowse simulate` runs the
/// same scheduler).
extension Agent {
    func interval(of app: AppDefinition) -> Duration? {
        switch app.fetchInterval {
        case .never: nil
        case .minimum: config.scheduler.minimumInterval
        case .every(let d): d
        }
    }

    /// What the scheduler needs to know of the board now.
    var schedulerConditions: FetchScheduler.Conditions {
        FetchScheduler.Conditions(online: conditions.network != .none, lowBattery: policy.batteryLow(conditions), radioTail: radio.tailSeconds)
    }

    /// Starts the scheduler with the apps as the store remembers them.
    func startScheduler() {
        let t = now()
        let list = apps.values.sorted { $0.id < $1.id }.compactMap { app -> FetchScheduler.App? in
            try? store.schedulerApp(app.id, interval: interval(of: app)?.seconds, now: t)
        }
        schedule(.started(apps: list, conditions: schedulerConditions, now: t))
    }

    /// Feeds one event to the scheduler and carries out its actions. Returns the manual fetch
    /// it started, if any (for `drowse fetch`, which waits for it).
    @discardableResult
    func schedule(_ event: FetchScheduler.Event) -> (run: HandlerRun?, refused: String?) {
        let actions = scheduler.handle(event)
        trace?.write(event, actions)
        return perform(actions)
    }

    @discardableResult
    func perform(_ actions: [FetchScheduler.Action]) -> (run: HandlerRun?, refused: String?) {
        var manual: HandlerRun?
        var refused: String?
        for action in actions {
            switch action {
            case let .startFetch(ids, trigger):
                if trigger == .scheduled {
                    logger.info("fetch window opens", metadata: ["apps": "\(ids)"])
                    // Notifications held back by their rate budget ride this window, and so does the keepalive.
                    flushDeferred()
                    mqtt?.rideWindow()
                }
                for id in ids {
                    let done = HandlerRun()
                    if trigger == .manual { manual = done }
                    enqueueHandler(.fetch(app: id, trigger: trigger.rawValue, done: done))
                }
            case let .refuseFetch(_, reason):
                refused = reason
            case let .setTimer(at):
                windowTimer?.cancel()
                let delay = max(0, at - now())
                logger.debug("next fetch window in \(DurationText.format(.milliseconds(Int64(saturating: delay * 1000, rounding: .up))))",
                             metadata: ["apps": "\(scheduler.planned?.apps ?? [])"])
                windowTimer = WakeTimer.after(delay) { [weak self] in
                    Task { await self?.windowTimerFired() }
                }
            case .cancelTimer:
                windowTimer?.cancel()
                windowTimer = nil
            case .save:
                // Written with the run, in finishHandler's one transaction.
                break
            case let .explain(app, reason):
                logger.info("fetch plan: \(reason)", metadata: ["app.id": "\(app)"])
            }
        }
        return (manual, refused)
    }

    func windowTimerFired() {
        windowTimer = nil
        let t = now()
        // Fresh conditions at each window boundary (no polling in between).
        conditions = probe.read(now: t)
        if schedulerConditions != scheduler.conditions { schedule(.conditionsChanged(schedulerConditions, now: t)) }
        schedule(.timerFired(now: t))
    }

    /// Something is using the network now (a handler, a transfer): the radio stays awake for its
    /// tail, and due fetches may ride along.
    func radioBusy() {
        schedule(.radioUsed(now: now()))
    }

    /// `drowse fetch ID`: run now and wait for the result.
    package func fetchNow(_ id: String, caller: Caller) async throws(APIError) -> HandlerOutcome {
        let app = try app(id, for: caller)
        guard app.fetchCommand != nil else { throw APIError(409, "no_fetch_command", "app '\(id)' has no fetch command") }
        guard !stopping else { throw APIError(409, "busy", "drowsed is stopping") }
        let (run, refused) = schedule(.fetchRequested(app: id, now: now()))
        guard let run else { throw APIError(409, "busy", refused ?? "a fetch of '\(id)' is already running") }
        return await run.outcome()
    }

    package func used(_ id: String, caller: Caller) throws(APIError) {
        _ = try app(id, for: caller)
        let t = now()
        do { try store.recordUse(app: id, at: t) } catch { throw .internal("\(error)") }
        schedule(.used(app: id, now: t))
    }
}

/// `drowsed --scheduler-trace FILE`: every event fed to the fetch scheduler and the actions it
/// returned, one JSON line each, after a first line with the scheduler's settings.
/// `drowse simulate --replay FILE` replays it.
final class SchedulerTrace: @unchecked Sendable {
    let fd: Int32

    init(path: String, header: JSON) throws(SystemError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw SystemError("scheduler trace \(path)", errno: errno) }
        self.fd = fd
        line(header.serialized)
    }

    deinit { close(fd) }

    func write(_ event: FetchScheduler.Event, _ actions: [FetchScheduler.Action]) {
        line(JSON.object([("event", event.json), ("actions", .array(actions.map(\.json)))]).serialized)
    }

    private func line(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            off += n
        }
    }
}
