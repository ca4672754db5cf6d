#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem

/// A notification or fetch run waiting for a handler slot.
enum QueuedRun: Sendable {
    /// Recorded, and `pending` in the store until its handler ends: a crash while it waits
    /// loses nothing (it is queued again on start).
    case notification(app: String, seq: Int64, payload: [UInt8])
    /// `done` gets the outcome (for `drowse fetch`, which waits).
    case fetch(app: String, trigger: String, done: HandlerRun)
    /// A finished session for the app's events handler; undelivered in the store until it ends.
    case transfers(app: String, key: String, stdin: [UInt8], batch: [Transfer])
}

extension Agent {
    /// Queues a run; it starts now if one of the `max_concurrent_handlers` slots is free.
    /// Why a cap: every running handler costs a process, pipes, a pidfd and a supervising thread;
    /// a flood of notifications once ran out of descriptors and dropped runs.
    func enqueueHandler(_ run: QueuedRun) {
        handlerQueue.submit(run)
        pumpHandlers()
    }

    /// Starts what the queue allows.
    func pumpHandlers() {
        guard !stopping else { return }
        while let item = handlerQueue.next() {
            switch startQueued(item) {
            case .started:
                handlerQueue.didStart()
            case .nothingToRun:
                handlerQueue.ended()
            case .shortage(let err):
                let delay = handlerQueue.failedToStart(item)
                logger.warning("""
                    a handler could not start (\(String(cString: strerror(err)))); \(handlerQueue.waitingCount) run(s) wait \
                    for \(delay.map { "a retry in \($0) s" } ?? "a running handler to end")
                    """)
                if let delay {
                    handlerRetryTimer?.cancel()
                    handlerRetryTimer = clock.wake(after: delay) { Task { await self.retryHandlers() } }
                }
                return
            }
        }
    }

    func retryHandlers() {
        handlerRetryTimer = nil
        handlerQueue.retry()
        pumpHandlers()
    }

    /// A started run ended: its slot is free.
    func handlerEnded() {
        handlerQueue.ended()
        pumpHandlers()
    }

    enum QueuedStart { case started, nothingToRun, shortage(Int32) }

    private func startQueued(_ item: QueuedRun) -> QueuedStart {
        switch item {
        case .notification(let appID, let seq, let payload):
            // It may have been collapsed by a newer one, or its app removed, while it waited.
            guard let app = apps[appID], (try? store.notificationState(seq)) == "pending" else {
                notificationRunEnded(seq)
                return .nothingToRun
            }
            guard app.command(for: .notification) != nil || app.isResident else {
                logger.warning("notification dropped: the app has no notification or fetch command", metadata: ["app.id": "\(appID)"])
                try? store.markNotification(seq, state: "dropped", at: now())
                notificationRunEnded(seq)
                return .nothingToRun
            }
            let started = startHandler(app, event: .notification, stdin: payload, trigger: "notification", notification: seq)
            if let err = started.run.resourceShortage { unstarted(started); return .shortage(err) }
            // The handler started first; then the bookkeeping: a notification woke the radio, so
            // due fetches may ride along.
            radioBusy()
            Task {
                // Its end counts against the app's daily budget and keeps the radio awake (the scheduler hears it).
                _ = await self.finishHandler(started)
                self.notificationRunEnded(seq)
                self.handlerEnded()
            }
            return .started
        case .fetch(let appID, let trigger, let done):
            guard let app = apps[appID] else {
                fetch.abandoned(appID)
                done.finish(HandlerOutcome(ending: .launchFailed("app '\(appID)' is gone"), startedAt: now(), endedAt: now()))
                return .nothingToRun
            }
            let stdin = Array(JSON.object([("event", "fetch"), ("app", .string(app.id)), ("reason", .string(trigger))]).serialized.utf8)
            let started = startHandler(app, event: .fetch, stdin: stdin, trigger: trigger)
            if let err = started.run.resourceShortage { unstarted(started); return .shortage(err) }
            radioBusy()
            Task {
                let outcome = await self.finishHandler(started)
                done.finish(outcome)
                self.handlerEnded()
            }
            return .started
        case .transfers(let appID, let key, let stdin, let batch):
            guard let app = apps[appID] else {
                sessionNotDelivered(key: key)
                return .nothingToRun
            }
            let started = startHandler(app, event: .transfers, stdin: stdin, trigger: "transfers")
            if let err = started.run.resourceShortage { unstarted(started); return .shortage(err) }
            Task {
                _ = await self.finishHandler(started)
                self.sessionDelivered(key: key, batch: batch)
                self.handlerEnded()
            }
            return .started
        }
    }

    /// `startHandler` counted a run whose process never started (no descriptors, no memory):
    /// nothing ran, so nothing is recorded; the run stays queued and is tried again.
    private func unstarted(_ started: StartedHandler) {
        guard started.counted else { return }
        handlerRuns[started.app.id]?[ObjectIdentifier(started.run)] = nil
        if handlerRuns[started.app.id]?.isEmpty == true { handlerRuns[started.app.id] = nil }
        if let leaf = started.leaf { suspension.leafEnded(leaf) }
        lifecycle.handlerEnded(started.app.id)
        runningHandlers -= 1
        if runningHandlers == 0 {
            for c in handlersIdle { c.resume() }
            handlersIdle.removeAll()
        }
    }

    /// Shutdown begins: queued runs do not start. Notifications stay `pending` in the store and
    /// run after the restart; a waiting `drowse fetch` is told.
    func stopQueuedHandlers() {
        stopping = true
        handlerRetryTimer?.cancel()
        handlerRetryTimer = nil
        for item in handlerQueue.removeAllWaiting() {
            guard case .fetch(let appID, _, let done) = item else { continue }
            fetch.abandoned(appID)
            done.finish(HandlerOutcome(ending: .launchFailed("drowsed is stopping"), startedAt: now(), endedAt: now()))
        }
    }
}
