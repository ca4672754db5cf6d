/// The life of every background transfer (docs/contract.md, "Transfers"), decided in one place: when it
/// runs, waits for the board's conditions, pauses, is tried again after a backoff, runs out of
/// its `--timeout-resource`, is cancelled, completes or fails, how many an app may have
/// unfinished, and when a finished session goes to the app's events handler.
///
/// Pure, in the style of async-http-client's `HTTPConnectionPool.StateMachine`: the agent feeds
/// it events, each with the time it happened, and carries out the actions it returns, in order.
/// It reads no clock, touches no file, starts no timer and talks to no engine itself.
///
/// It holds every transfer that is unfinished, or finished but not yet handed to its app; the
/// store holds all of them. Everything the store learns about a held transfer comes through here
/// (committed progress, an upload's resource), so a `persist` of the whole row never rewinds it.
package struct TransferLifecycle: Sendable {
    package enum LogLevel: Sendable, Equatable { case info, warning }

    package enum Action: Sendable, Equatable {
        /// Save the whole row.
        case persist(Transfer)
        /// Record durable progress (the store refuses it for a finished row).
        case commitProgress(id: String, bytesDone: Int64, bytesTotal: Int64?, etag: String?, lastModified: String?)
        /// Record an upload's server-side resource (url) or the protocol `auto` settled on.
        case recordUploadResource(id: String, url: String?, protocolName: String)
        /// Start an attempt from the transfer's committed offset.
        case startEngine(Transfer)
        /// Stop the running attempt; what it committed stays, and so does an upload's resource.
        case stopEngine(id: String)
        /// End an upload: its attempt, and its server-side resource if it has one.
        case cancelUpload(Transfer)
        case setRetryTimer(id: String, at: Double)
        case cancelRetryTimer(id: String)
        /// One timer for the earliest `--timeout-resource` deadline; a new one replaces the old.
        case setTimeoutTimer(at: Double)
        case cancelTimeoutTimer
        /// Remove a download's partial file.
        case removePartFile(Transfer)
        /// Remove a delivered file that had no `--to` (it was in the app's inbox).
        case removeFile(path: String)
        /// Hand the finished transfers of a session to the app's events handler; report the
        /// end with `sessionDelivered` (or `sessionNotDelivered`).
        case deliverSession(app: String, session: String, batch: [Transfer])
        /// The network was used until then (the radio stays awake; due fetches may ride along).
        case radioBusy(until: Double)
        case log(LogLevel, String, metadata: [String: String])
    }

    /// How an attempt the engine ran ended.
    package enum AttemptOutcome: Sendable, Equatable {
        /// Verified and at `path`.
        case completed(bytes: Int64, path: String)
        /// `transient`: trying again may help; `noSpace`: the disk is full.
        /// `retryAfter`: the server's `Retry-After` on a 429 or 503.
        case failed(reason: String, transient: Bool, noSpace: Bool, retryAfter: RetryAfter? = nil)
    }

    /// What an app has for finished sessions.
    package struct AppEvents: Sendable, Equatable {
        /// It has an events handler; without one a finished session counts as delivered at once.
        package var hasCommand: Bool
        /// Its handler may be launched for transfer events; if not, sessions wait undelivered.
        package var launches: Bool

        package init(hasCommand: Bool, launches: Bool) {
            self.hasCommand = hasCommand
            self.launches = launches
        }
    }

    /// What start-up found of a download whose partial file is gone but whose final file exists
    /// (a crash between the rename and the store update): its size, and its SHA-256 when the
    /// transfer asks for one and the size matches (see `wantsDigest`).
    package struct FinalFile: Sendable, Equatable {
        package var path: String
        package var size: Int64
        package var sha256: String?

        package init(path: String, size: Int64, sha256: String?) {
            self.path = path
            self.size = size
            self.sha256 = sha256
        }
    }

    struct Entry: Sendable {
        var transfer: Transfer
        /// Arrival order: decisions over many transfers go oldest first, as the store lists them.
        var seq: Int
        var retry: TransferRetry?
        /// A retry timer is set for then.
        var retryAt: Double?
        /// Live download progress (display, and what a failed attempt moved).
        var live: (done: Int64, total: Int64?)?
        /// Upload bytes handed to the network, not yet confirmed.
        var sent: Int64?
    }

    package let policy: ConditionsPolicy
    /// The board's conditions as last read; every decision to start uses these.
    package var conditions: Conditions
    /// `[transfers] max_per_app`: unfinished transfers one app may have.
    package let maxPerApp: Int
    /// Per app id; an app not listed (removed) keeps its sessions undelivered.
    package var apps: [String: AppEvents] = [:]
    /// Jitter for retry backoff.
    var random: SplitMix64
    var entries: [String: Entry] = [:]
    var nextSeq = 0
    /// Sessions handed to a handler, with the transfers handed.
    var delivering: [SessionKey: [String]] = [:]
    /// The deadline the timeout timer is set for.
    var timeoutTimerAt: Double?

    package init(policy: ConditionsPolicy, conditions: Conditions, maxPerApp: Int, seed: UInt64) {
        self.policy = policy
        self.conditions = conditions
        self.maxPerApp = maxPerApp
        random = SplitMix64(seed: seed)
    }

    // MARK: queries

    /// A held transfer as it is now (unfinished, or finished and not yet delivered).
    package func transfer(_ id: String) -> Transfer? { entries[id]?.transfer }

    /// Ids of the app's unfinished transfers, oldest first.
    package func unfinished(app: String) -> [String] {
        ordered.filter { $0.transfer.app == app && !$0.transfer.state.isFinished }.map(\.transfer.id)
    }

    /// nil when the app may queue another transfer; otherwise how many unfinished it has
    /// (a cap per app, so one app or a flood of push-to-transfer notifications cannot fill
    /// the store and the engine for everyone).
    package func refusal(app: String) -> Int? {
        let n = entries.values.lazy.filter { $0.transfer.app == app && !$0.transfer.state.isFinished }.count
        return n < maxPerApp ? nil : n
    }

    /// Whether start-up should hash a final file of `size` bytes found for `t`: only when the
    /// size alone does not already rule it out and the transfer has a digest to compare.
    package static func wantsDigest(_ t: Transfer, size: Int64) -> Bool {
        t.sha256 != nil && t.bytesTotal == size
    }

    /// A transfer as shown: the newest held state, with live progress while it runs. Uploads
    /// show in `bytes_done` what went out (libcurl's upload progress), in `bytes_confirmed` what
    /// the server confirmed (the offset a resume starts from), and as location their resource.
    package func shown(_ stored: Transfer) -> Transfer {
        let e = entries[stored.id]
        var t = e?.transfer ?? stored
        if t.kind == .upload {
            t.bytesConfirmed = t.bytesDone
            if t.state == .running {
                t.bytesSent = max(e?.sent ?? 0, t.bytesDone)
                t.bytesDone = t.bytesSent!
            }
            if t.location == nil { t.location = t.uploadURL }
        }
        if t.state == .running, t.kind == .download, let live = e?.live {
            t.bytesDone = max(t.bytesDone, live.done)
            t.bytesTotal = live.total ?? t.bytesTotal
        }
        return t
    }

    var ordered: [Entry] { entries.values.sorted { $0.seq < $1.seq } }

    // MARK: events

    /// Start-up: every stored row, oldest first. Unfinished ones run again from their committed
    /// offset (or wait); a download whose verified file is already at its final path
    /// (`finalFiles`, by id) is completed; finished sessions not yet delivered are delivered.
    package mutating func restored(_ rows: [Transfer], finalFiles: [String: FinalFile] = [:], apps: [String: AppEvents],
                                  now: Double) -> [Action] {
        self.apps = apps
        var actions: [Action] = []
        var sessions: [SessionKey] = []
        func note(_ t: Transfer) {
            let k = SessionKey(app: t.app, session: t.session)
            if !sessions.contains(k) { sessions.append(k) }
        }
        for var t in rows {
            if t.state.isFinished {
                guard !t.delivered else { continue }
                hold(t)
                note(t)
                continue
            }
            if t.kind == .download, let f = finalFiles[t.id], t.bytesTotal == f.size, t.sha256 == nil || f.sha256 == t.sha256 {
                t.state = .completed
                t.location = f.path
                t.bytesDone = f.size
                t.finishedAt = now
                hold(t)
                actions.append(.persist(t))
                note(t)
                continue
            }
            hold(t)
            if t.state == .waiting, let at = t.nextRetryAt, at > now {
                // A retry was planned (a server's Retry-After, or the backoff): a restart does not
                // bring it forward. Bounded, in case the clock went back meanwhile.
                let due = min(at, now + RetryAfter.maxDelay)
                entries[t.id]?.retryAt = due
                actions += [.log(.info, "transfer retries at its planned time, in \(Int(saturating: due - now, rounding: .up))s",
                                 metadata: Self.meta(t)),
                            .setRetryTimer(id: t.id, at: due)]
                continue
            }
            actions.append(.log(.info, "resuming transfer from byte \(t.bytesDone)", metadata: Self.meta(t)))
            actions += begin(t.id, now: now)
        }
        for k in sessions { actions += checkSession(k) }
        actions += rearmTimeout()
        return actions
    }

    /// A new transfer, already saved (the caller checked `refusal(app:)` first).
    package mutating func submitted(_ t: Transfer, now: Double) -> [Action] {
        hold(t)
        var actions: [Action] = [.log(.info, "transfer queued", metadata: Self.meta(t).merging(["url": t.url]) { a, _ in a })]
        actions += begin(t.id, now: now)
        actions += rearmTimeout()
        return actions
    }

    /// Power or network changed: pause what may not go on (keeping its progress), start what
    /// was waiting and now may. Transfers counting down to a retry keep their timer.
    package mutating func conditionsChanged(_ c: Conditions, now: Double) -> [Action] {
        conditions = c
        var actions: [Action] = []
        for e in ordered where !e.transfer.state.isFinished {
            var t = e.transfer
            let blocker = policy.blocker(t.requirements, conditions)
            switch (t.state, blocker) {
            case (.running, let b?):
                entries[t.id]?.live = nil
                t.state = .paused
                t.reason = "paused: " + b
                entries[t.id]?.transfer = t
                actions += [.stopEngine(id: t.id), .persist(t), .log(.info, "transfer paused: \(b)", metadata: ["transfer.id": t.id])]
            case (.waiting, let b?), (.paused, let b?):
                guard e.retryAt == nil else { continue }
                let reason = (t.state == .paused ? "paused: " : "waiting: ") + b
                guard t.reason != reason else { continue }
                t.reason = reason
                entries[t.id]?.transfer = t
                actions.append(.persist(t))
            case (.waiting, nil), (.paused, nil):
                guard e.retryAt == nil else { continue }
                actions.append(.log(.info, "transfer resumes: conditions allow it", metadata: ["transfer.id": t.id]))
                actions += begin(t.id, now: now)
            default:
                break
            }
        }
        actions += rearmTimeout()
        return actions
    }

    /// The engine committed progress to disk (fdatasync'ed).
    package mutating func progressCommitted(id: String, bytesDone: Int64, bytesTotal: Int64?, etag: String?,
                                           lastModified: String?) -> [Action] {
        if var e = entries[id] {
            e.live = (bytesDone, bytesTotal)
            // An upload resumed below what the last attempt had sent: its live count starts over.
            if let sent = e.sent, bytesDone < sent { e.sent = nil }
            // A late commit never rewinds a finished transfer.
            if !e.transfer.state.isFinished {
                e.transfer.bytesDone = bytesDone
                e.transfer.bytesTotal = bytesTotal
                e.transfer.etag = etag
                e.transfer.lastModified = lastModified
            }
            entries[id] = e
        }
        return [.commitProgress(id: id, bytesDone: bytesDone, bytesTotal: bytesTotal, etag: etag, lastModified: lastModified)]
    }

    /// Live download progress, not yet durable: display only.
    package mutating func progressed(id: String, bytesDone: Int64, bytesTotal: Int64?) {
        entries[id]?.live = (bytesDone, bytesTotal)
    }

    /// Upload bytes handed to the network: display only.
    package mutating func sent(id: String, bytes: Int64) {
        entries[id]?.sent = bytes
    }

    /// An upload's server-side resource exists (url), or `auto` settled on a protocol (url nil).
    package mutating func uploadResourceKnown(id: String, url: String?, protocolName: String) -> [Action] {
        if let url { entries[id]?.transfer.uploadURL = url }
        entries[id]?.transfer.uploadProtocol = protocolName
        return [.recordUploadResource(id: id, url: url, protocolName: protocolName)]
    }

    /// An attempt ended. A transient failure is tried again after a backoff (`TransferRetry`:
    /// at once after a megabyte of progress, from the first step after less; a full disk pauses
    /// on its own backoff) unless the transfer's deadline has passed.
    package mutating func attemptEnded(id: String, _ outcome: AttemptOutcome, now: Double) -> [Action] {
        guard var e = entries[id] else { return [] }
        // What this attempt moved: committed bytes (the engine commits before it reports a
        // failure), or for an upload what it had sent.
        let moved = max(e.sent ?? 0, e.live?.done ?? 0)
        e.live = nil
        e.sent = nil
        entries[id] = e
        var t = e.transfer
        switch outcome {
        case let .completed(bytes, path):
            e.retry = nil
            entries[id] = e
            guard !t.state.isFinished else { return [] }
            t.state = .completed
            t.bytesDone = bytes
            t.bytesTotal = bytes
            // The file already belongs to whoever asked for it (made as them) or, in the inbox,
            // to the app's user: nothing to hand over here.
            if t.kind == .download { t.location = path }
            t.reason = nil
            t.finishedAt = now
            entries[id]?.transfer = t
            var actions: [Action] = [
                .persist(t), .log(.info, "transfer completed (\(bytes) bytes)", metadata: Self.meta(t)), .radioBusy(until: now),
            ]
            actions += checkSession(SessionKey(app: t.app, session: t.session))
            actions += rearmTimeout()
            return actions
        case let .failed(reason, transient, noSpace, retryAfter):
            // Only a running transfer has an attempt: a failure reported after conditions paused
            // it (the engine ended the attempt before it saw the stop) changes nothing.
            guard t.state == .running else { return [] }
            guard transient && now < (t.timeoutAt ?? .infinity) else {
                var actions = fail(id, reason: transient ? "timed out after: \(reason)" : reason, now: now)
                actions += rearmTimeout()
                return actions
            }
            var retry = e.retry ?? TransferRetry(attempts: t.attempts, retries: t.retries)
            let delay = retry.attemptFailed(bytes: max(moved, t.bytesDone), noSpace: noSpace, now: now, unit: random.unit(), retryAfter: retryAfter)
            t.retries = retry.retries
            t.nextRetryAt = retry.nextRetryAt
            t.state = noSpace ? .paused : .waiting
            t.reason = noSpace ? "paused: disk full (\(reason))" : "retrying in \(Int(saturating: delay, rounding: .up))s after: \(reason)"
            e.retry = retry
            e.retryAt = now + delay
            e.transfer = t
            entries[id] = e
            return [
                .persist(t), .log(.warning, "transfer attempt failed: \(reason); retry in \(delay)s", metadata: ["transfer.id": id]),
                .setRetryTimer(id: id, at: now + delay),
            ]
        }
    }

    /// A retry timer went off.
    package mutating func retryTimerFired(id: String, now: Double) -> [Action] {
        // A timer already cancelled (the transfer failed or was cancelled meanwhile) does nothing.
        guard entries[id]?.retryAt != nil else { return [] }
        entries[id]?.retryAt = nil
        var actions = begin(id, now: now)
        actions += rearmTimeout()
        return actions
    }

    /// The timeout timer went off: whatever has not finished by its deadline fails, running,
    /// waiting or counting down to a retry.
    package mutating func timeoutTimerFired(now: Double) -> [Action] {
        timeoutTimerAt = nil
        var actions: [Action] = []
        for e in ordered where !e.transfer.state.isFinished && (e.transfer.timeoutAt ?? .infinity) <= now {
            if e.transfer.state == .running { actions.append(.stopEngine(id: e.transfer.id)) }
            actions += fail(e.transfer.id, reason: "timed out: not finished within its --timeout-resource", now: now)
        }
        actions += rearmTimeout()
        return actions
    }

    /// `drowse transfers cancel`, or the force-quit of its app (`reason` says which).
    package mutating func cancelRequested(id: String, reason: String = "cancelled", now: Double) -> [Action] {
        guard let t = entries[id]?.transfer, !t.state.isFinished else { return [] }
        var actions = cancel(id, reason: reason, now: now)
        actions += checkSession(SessionKey(app: t.app, session: t.session))
        actions += rearmTimeout()
        return actions
    }

    /// `drowse quit APP`: cancels every unfinished transfer of the app; returns how many.
    package mutating func appQuit(_ app: String, now: Double) -> (cancelled: Int, actions: [Action]) {
        let ids = unfinished(app: app)
        var actions: [Action] = []
        var sessions: [SessionKey] = []
        for id in ids {
            guard let t = entries[id]?.transfer else { continue }
            actions += cancel(id, reason: "cancelled: the app was force-quit", now: now)
            let k = SessionKey(app: app, session: t.session)
            if !sessions.contains(k) { sessions.append(k) }
        }
        for k in sessions { actions += checkSession(k) }
        actions += rearmTimeout()
        return (ids.count, actions)
    }

    /// The app's events handler ran for a session handed over with `deliverSession`: those
    /// transfers count as delivered, and their inbox files (no `--to`) are removed.
    package mutating func sessionDelivered(app: String, session: String) -> [Action] {
        let k = SessionKey(app: app, session: session)
        guard let ids = delivering.removeValue(forKey: k) else { return [] }
        var actions: [Action] = []
        for id in ids {
            guard var t = entries.removeValue(forKey: id)?.transfer else { continue }
            if t.destination == nil, let loc = t.location {
                actions.append(.removeFile(path: loc))
                t.location = nil
            }
            t.delivered = true
            actions.append(.persist(t))
        }
        // Transfers of the same session that finished meanwhile.
        actions += checkSession(k)
        return actions
    }

    /// A session handed over with `deliverSession` could not be (its app is gone): it stays
    /// undelivered.
    package mutating func sessionNotDelivered(app: String, session: String) {
        delivering[SessionKey(app: app, session: session)] = nil
    }

    // MARK: decisions

    mutating func hold(_ t: Transfer) {
        if entries[t.id] == nil {
            entries[t.id] = Entry(transfer: t, seq: nextSeq)
            nextSeq += 1
        } else {
            entries[t.id]?.transfer = t
        }
    }

    /// Start an attempt now, or wait for conditions, or fail when the deadline has passed.
    mutating func begin(_ id: String, now: Double) -> [Action] {
        guard var e = entries[id] else { return [] }
        var t = e.transfer
        if let deadline = t.timeoutAt, now > deadline {
            return fail(id, reason: "timed out: not finished within its --timeout-resource", now: now)
        }
        if let blocker = policy.blocker(t.requirements, conditions) {
            // Not now: conditionsChanged starts it when the board's conditions allow.
            t.state = .waiting
            t.reason = "waiting: " + blocker
            entries[id]?.transfer = t
            return [.persist(t)]
        }
        t.state = .running
        t.reason = nil
        var retry = e.retry ?? TransferRetry(attempts: t.attempts, retries: t.retries)
        retry.attemptStarted(bytes: t.bytesDone)
        t.attempts = retry.attempts
        t.nextRetryAt = nil
        e.retry = retry
        e.transfer = t
        entries[id] = e
        return [.persist(t), .startEngine(t)]
    }

    mutating func fail(_ id: String, reason: String, now: Double) -> [Action] {
        guard var e = entries[id] else { return [] }
        var actions: [Action] = []
        if e.retryAt != nil { actions.append(.cancelRetryTimer(id: id)) }
        e.retry = nil
        e.retryAt = nil
        e.live = nil
        var t = e.transfer
        t.nextRetryAt = nil
        if t.kind == .upload, t.uploadURL != nil { actions.append(.cancelUpload(t)) }
        t.state = .failed
        t.reason = reason
        t.finishedAt = now
        e.transfer = t
        entries[id] = e
        actions += [.persist(t), .removePartFile(t), .log(.warning, "transfer failed: \(reason)", metadata: Self.meta(t))]
        actions += checkSession(SessionKey(app: t.app, session: t.session))
        return actions
    }

    mutating func cancel(_ id: String, reason: String, now: Double) -> [Action] {
        guard var e = entries[id] else { return [] }
        var t = e.transfer
        var actions: [Action] = [t.kind == .upload ? .cancelUpload(t) : .stopEngine(id: id)]
        if e.retryAt != nil { actions.append(.cancelRetryTimer(id: id)) }
        e.retry = nil
        e.retryAt = nil
        e.live = nil
        t.nextRetryAt = nil
        t.state = .cancelled
        t.reason = reason
        t.finishedAt = now
        e.transfer = t
        entries[id] = e
        actions += [.persist(t), .removePartFile(t), .log(.info, "transfer cancelled", metadata: ["transfer.id": id])]
        return actions
    }

    /// The app files were read again (`systemctl reload drowsed`): the apps' events handlers as
    /// they are now. A finished session that waits for an app which has just been added, or has
    /// just gained an events handler, is delivered now; a removed app's sessions stay undelivered.
    package mutating func appsChanged(_ apps: [String: AppEvents]) -> [Action] {
        self.apps = apps
        var keys: [SessionKey] = []
        for e in ordered where e.transfer.state.isFinished && !e.transfer.delivered {
            let k = SessionKey(app: e.transfer.app, session: e.transfer.session)
            if !keys.contains(k) { keys.append(k) }
        }
        return keys.flatMap { checkSession($0) }
    }

    /// When every transfer of an app's session has finished, hands those not yet delivered to
    /// the app's events handler (or, for an app without one, counts them as delivered).
    mutating func checkSession(_ k: SessionKey) -> [Action] {
        guard delivering[k] == nil, let app = apps[k.app] else { return [] }
        let inSession = ordered.filter { $0.transfer.app == k.app && $0.transfer.session == k.session }
        guard inSession.allSatisfy({ $0.transfer.state.isFinished }) else { return [] }
        let batch = inSession.map(\.transfer).filter { !$0.delivered }
        guard !batch.isEmpty else { return [] }
        guard app.hasCommand else {
            return batch.map { t in
                var t = t
                t.delivered = true
                entries[t.id] = nil
                return .persist(t)
            }
        }
        // Undelivered: delivered after a restart with an app that launches.
        guard app.launches else { return [] }
        delivering[k] = batch.map(\.id)
        return [.deliverSession(app: k.app, session: k.session, batch: batch)]
    }

    /// The timeout timer follows the earliest deadline among unfinished transfers.
    mutating func rearmTimeout() -> [Action] {
        let next = entries.values.lazy.filter { !$0.transfer.state.isFinished }.compactMap(\.transfer.timeoutAt).min()
        guard next != timeoutTimerAt else { return [] }
        timeoutTimerAt = next
        return [next.map { .setTimeoutTimer(at: $0) } ?? .cancelTimeoutTimer]
    }

    static func meta(_ t: Transfer) -> [String: String] { ["transfer.id": t.id, "app.id": t.app] }
}
