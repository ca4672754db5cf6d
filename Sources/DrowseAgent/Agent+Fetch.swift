import DrowseCore
import DrowseStore
import DrowseSystem

/// The agent's side of fetch scheduling: it builds the `FetchService` over the daemon's real
/// parts (the store, the handler queue, the conditions probe, NIO timers) and routes the API's
/// calls to it. Every decision about fetch windows is `FetchScheduler`'s.
extension Agent {
    func interval(of app: AppDefinition) -> Duration? {
        switch app.fetchInterval {
        case .never: nil
        case .minimum: config.scheduler.minimumInterval
        case .every(let d): d
        }
    }

    /// What the scheduler needs to know of the board now.
    var schedulerConditions: FetchScheduler.Conditions { conditionsService.forScheduler }

    /// The fetch service over the real store, handler queue, probe and timers. Its closures run
    /// on this actor's executor (the service is only called from here).
    func makeFetchService() -> FetchService {
        let host = FetchHost(
            now: { self.now() },
            enqueueFetch: { app, trigger, done in self.enqueueHandler(.fetch(app: app, trigger: trigger, done: done)) },
            windowOpened: {
                // Notifications held back by their rate budget or waiting for their rollout delay ride
                // this window, and so does the keepalive.
                self.flushDeferred()
                self.windowOpenedForStatus()
                self.mqtt?.rideWindow()
            },
            readConditions: {
                self.conditionsService.read(now: self.now())
                return self.schedulerConditions
            },
            setWakeTimer: { at in
                self.windowTimer?.cancel()
                self.windowTimer = nil
                guard let at else { return }
                self.windowTimer = self.clock.wake(after: max(0, at - self.now())) { [weak self] in
                    Task { await self?.fetchTimerFired() }
                }
            })
        let service = FetchService(scheduler: initialScheduler, store: store, host: host, trace: trace, logger: logger)
        service.metrics = metrics
        return service
    }

    /// Starts the scheduler with the apps as the store remembers them.
    func startScheduler() {
        fetch.start(apps: apps.values.map { ($0.id, interval(of: $0)?.seconds) }, conditions: schedulerConditions)
    }

    func fetchTimerFired() {
        windowTimer = nil
        fetch.windowTimerFired()
    }

    /// Something is using the network now (a handler, a transfer): the radio stays awake for its
    /// tail, and due fetches may ride along.
    func radioBusy() {
        fetch.radioUsed()
    }

    /// `drowse fetch ID`: run now and wait for the result.
    package func fetchNow(_ id: String, caller: Caller) async throws(APIError) -> HandlerOutcome {
        let app = try app(id, for: caller)
        guard app.fetchCommand != nil || app.isResident else { throw APIError(409, "no_fetch_command", "app '\(id)' has no fetch command") }
        guard !stopping else { throw APIError(409, "busy", "drowsed is stopping") }
        let run = try fetch.fetchNow(id)
        return await run.outcome()
    }

    package func used(_ id: String, caller: Caller) throws(APIError) {
        _ = try app(id, for: caller)
        try fetch.used(id)
    }
}
