import DrowseCore
import DrowseStore
import DrowseSystem

extension Agent {
    func interval(of app: AppDefinition) -> Duration? {
        switch app.fetchInterval {
        case .never: nil
        case .minimum: config.scheduler.minimumInterval
        case .every(let d): d
        }
    }

    /// The planner's view of every app not fetching right now.
    func plannerInputs() -> [FetchPlanner.AppInput] {
        let t = now()
        return apps.values.sorted { $0.id < $1.id }.compactMap { app in
            guard !runningFetches.contains(app.id), let rec = try? store.app(app.id, now: t) else { return nil }
            let uses = UsageModel(uses: (try? store.uses(app: app.id)) ?? [], utcOffset: Double(localUTCOffset()))
            return FetchPlanner.AppInput(
                id: app.id, interval: interval(of: app), lastFetch: rec.lastFetch,
                consecutiveFailures: rec.consecutiveFailures, registeredAt: rec.registeredAt,
                consecutiveNoData: rec.consecutiveNoData, lastTimedOut: rec.lastTimedOut,
                runtimeToday: (try? store.runtime(app: app.id, since: t - 86400)) ?? 0,
                predictedUse: uses.nextUse(after: t))
        }
    }

    /// Sets the one timer for the next window. Called whenever the plan may have changed.
    func replan() {
        windowTimer?.cancel()
        windowTimer = nil
        let t = now()
        // Offline, nothing is attempted; the link's return (a netlink event) re-plans.
        guard conditions.network != .none, let window = planner.nextWindow(plannerInputs(), now: t) else {
            plannedWindow = nil
            return
        }
        plannedWindow = window
        let delay = max(0, window.at - t)
        logger.debug("next fetch window in \(DurationText.format(.milliseconds(Int64(delay * 1000))))", metadata: ["apps": "\(window.apps)"])
        windowTimer = WakeTimer.after(delay) { [weak self] in
            Task { await self?.openWindow() }
        }
    }

    /// Runs every app that is eligible now, together.
    func openWindow() {
        let t = now()
        let inputs = plannerInputs()
        let due = inputs.filter { app in
            guard let e = planner.eligibleAt(app) else { return false }
            return e <= t + 0.001
        }
        if due.isEmpty { replan(); return }
        guard conditions.network != .none else { replan(); return }
        // Fresh conditions at each window boundary (no polling in between).
        conditions = probe.read(now: t)
        planner.lowBattery = policy.batteryLow(conditions)
        logger.info("fetch window opens", metadata: ["apps": "\(due.map(\.id))"])
        // Notifications held back by their rate budget ride this window, and so does the keepalive.
        flushDeferred()
        mqtt?.rideWindow()
        for input in due {
            guard let app = apps[input.id] else { continue }
            startFetch(app, trigger: "scheduled")
        }
        replan()
    }

    /// Starts a fetch (or queues it for a handler slot) unless one is already running or queued
    /// for this app.
    @discardableResult
    func startFetch(_ app: AppDefinition, trigger: String) -> Task<HandlerOutcome, Never>? {
        guard !runningFetches.contains(app.id), !stopping else { return nil }
        // Counted as fetching from now: a queued fetch is not planned a second time.
        runningFetches.insert(app.id)
        let done = HandlerRun()
        enqueueHandler(.fetch(app: app.id, trigger: trigger, done: done))
        return Task { await done.outcome() }
    }

    func fetchEnded(_ id: String) {
        runningFetches.remove(id)
        radioBusy(until: now())
        replan()
    }

    /// `drowse fetch ID`: run now and wait for the result.
    public func fetchNow(_ id: String, caller: Caller) async throws(APIError) -> HandlerOutcome {
        let app = try app(id, for: caller)
        guard app.fetchCommand != nil else { throw APIError(409, "no_fetch_command", "app '\(id)' has no fetch command") }
        guard let task = startFetch(app, trigger: "manual") else {
            throw APIError(409, "busy", "a fetch of '\(id)' is already running")
        }
        return await task.value
    }

    public func used(_ id: String, caller: Caller) throws(APIError) {
        _ = try app(id, for: caller)
        do { try store.recordUse(app: id, at: now()) } catch { throw .internal("\(error)") }
    }
}
