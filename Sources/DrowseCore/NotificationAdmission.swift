/// Decides what becomes of each silent notification once its payload has been checked: refused
/// as expired, recorded under a dedupe key, run at once, deferred, collapsed into a newer one,
/// expired while it waited, or released when a fetch window opens or the app's hourly budget has
/// room again; and when the dedupe records of old notifications are pruned (docs/contract.md,
/// "Notifications over MQTT"; docs/design.md, "Notifications").
///
/// Pure: events in, each with the time, actions out; the agent carries the actions out and
/// decides nothing itself. What lives in the store is passed in rather than copied here:
/// - the dedupe keys of the last 7 days: the store's unique index is the atomic check, and a
///   week of keys does not belong in a small board's memory. This type chooses the key (the
///   `id`, else a digest of topic and payload), asks for the record (`record`), and is told
///   whether the store held the key already (`recorded(seq: nil, …)`).
/// - the times each app's budget was used: counted from the store at each decision, so a
///   restart hands out no fresh hour. Each event that may admit takes them for the apps in
///   `budgetApps(plus:)`.
///
/// The rules:
/// - expired on arrival (`expiration` < now): refused, not recorded.
/// - priority 10 runs at once; priority 5 runs at once while the app is within
///   `max_per_hour` (its arrival has woken the radio already), else it is deferred. Each run
///   uses the budget, priority 10 included (`NotificationBudget`).
/// - a notification with a `collapse-id` replaces the older one of its app with the same id
///   that has not run yet (deferred, or admitted and still waiting for a handler slot).
/// - a signed notification with a `download` to an app that allows it starts that download
///   instead of its handler, and uses no budget.
/// - a notification with a `spread` waits its device's rollout delay (`RolloutDelay`, from the
///   device id and the notification's id, else its dedupe key) after it was received, then goes
///   on as if it had just arrived (download, budget). A fetch window that opens meanwhile
///   releases it early (the radio is awake anyway); else the one timer fires at its due time.
///   Its record stays `pending`, so after a restart the delay is drawn again, the same, from
///   the time it was received. One that expires while it waits never runs.
/// - deferred ones are released, oldest first and as far as the budget allows, when a fetch
///   window opens and when the one timer fires: at the next window or when the budget has room
///   again, whichever comes first. One that expired meanwhile is dropped.
/// - an app has at most `maxDeferred` (`[notifications] max_deferred`) notifications waiting
///   (deferred, or waiting for their rollout delay); one more evicts the lowest-priority one,
///   the oldest of those, as APNs keeps only the latest per app. Whoever can publish to the
///   device's topic can then grow neither the store nor this machine past that, and nothing here
///   costs more per message as the backlog grows (a flood of 20 000 once took 190 MB and 3× the CPU).
/// - dedupe records of handled notifications are kept `dedupeWindow` (7 days) and pruned as they
///   age: at start-up, then on an event once the oldest has passed its age (at most once per
///   `pruneInterval`), never by a timer of its own: a device that receives nothing prunes nothing.
package struct NotificationAdmission: Sendable {
    /// What the machine needs of a checked notification, its app and how it arrived.
    package struct Arrival: Sendable, Equatable {
        package var app: String
        package var id: String?
        package var collapseID: String?
        package var expiration: Double?
        package var priority: Int
        /// The payload asks for a download (push to transfer).
        package var download: Bool
        /// It came as a JWS that verified with the app's key.
        package var signed: Bool
        /// The app sets `notification.allow_download`.
        package var allowDownload: Bool
        /// Staged rollout window in seconds (checked by `Notification.parse`); nil or 0: no delay.
        package var spread: Double?

        package init(app: String, id: String? = nil, collapseID: String? = nil, expiration: Double? = nil, priority: Int = 5,
                     download: Bool = false, signed: Bool = false, allowDownload: Bool = false, spread: Double? = nil) {
            self.app = app
            self.id = id
            self.collapseID = collapseID
            self.expiration = expiration
            self.priority = priority
            self.download = download
            self.signed = signed
            self.allowDownload = allowDownload
            self.spread = spread
        }

        package init(app: String, note: Notification, signed: Bool, allowDownload: Bool) {
            self.init(app: app, id: note.id, collapseID: note.collapseID, expiration: note.expiration, priority: note.priority,
                      download: note.download != nil, signed: signed, allowDownload: allowDownload, spread: note.spread)
        }

        func expired(at now: Double) -> Bool { expiration.map { $0 < now } ?? false }
    }

    /// A record the store holds as not yet handled, at start-up.
    package struct Restored: Sendable, Equatable {
        package enum State: Sendable, Equatable {
            /// Recorded; `budgetAt` set when it had been admitted (it may have been waiting for a slot).
            case pending(budgetAt: Double?)
            case deferred
        }

        package var seq: Int64
        package var receivedAt: Double
        package var state: State
        /// nil when it cannot run any more: its app is gone, or its payload no longer parses.
        package var arrival: Arrival?
        /// The key it was recorded under: a rollout delay of a notification without an `id` is drawn from it.
        package var dedupeKey: String?

        package init(seq: Int64, receivedAt: Double, state: State, arrival: Arrival?, dedupeKey: String? = nil) {
            self.seq = seq
            self.receivedAt = receivedAt
            self.state = state
            self.arrival = arrival
            self.dedupeKey = dedupeKey
        }
    }

    package enum Refusal: Sendable, Equatable {
        case expired
    }

    package enum DownloadRefusal: Sendable, Equatable {
        /// The app does not set `notification.allow_download`.
        case notAllowed
        /// Only a signed notification may start a download.
        case unsigned
    }

    package enum Action: Sendable, Equatable {
        /// Not recorded, and final (the message is acknowledged all the same).
        case refuse(app: String, Refusal)
        /// Record it under this key (not waiting for the disk), then report with `recorded`.
        case record(app: String, dedupeKey: String)
        /// The store held the key already: a redelivery or a provider's retry. Nothing runs.
        case duplicate(app: String, dedupeKey: String)
        /// Mark it `expired`; it never runs.
        case expire(seq: Int64, app: String)
        /// Mark it `collapsed`: a newer one with the same collapse id replaces it.
        case dropCollapsed(seq: Int64, app: String, collapseID: String)
        /// Mark it `dropped`: restored, but its app is gone or its payload unreadable.
        case drop(seq: Int64)
        /// Mark it `evicted`: its app already had `maxDeferred` waiting and this was the
        /// lowest-priority, oldest of them. It never runs.
        case evict(seq: Int64, app: String, maxDeferred: Int)
        /// Start the download the notification asks for; the app runs when the file is ready.
        case startDownload(seq: Int64, app: String)
        /// The notification's download is ignored; it runs like any other.
        case ignoreDownload(seq: Int64, app: String, DownloadRefusal)
        /// Record that it used its app's hourly budget at `at` (it is `pending`, to run).
        case chargeBudget(seq: Int64, at: Double)
        /// Queue its handler for a slot; report its end with `handlerFinished`.
        case runHandler(seq: Int64, app: String)
        /// Mark it `deferred`: it waits for a window or room in the budget, at the latest `until`
        /// (as things stand now). `inLastHour` runs of the app count against its budget.
        case `defer`(seq: Int64, app: String, until: Double, inLastHour: Int)
        /// It waits for its rollout delay (`spread`): it goes on at `until` (received + `delay`),
        /// or earlier in a fetch window. Its record stays `pending`.
        case spread(seq: Int64, app: String, until: Double, delay: Double, spread: Double)
        /// The one timer for deferred notifications: fire `timerFired` at this time; nil: none.
        case setTimer(at: Double?)
        /// Delete the records of handled notifications received before `before` (their dedupe keys
        /// expire with them), then report what is left with `pruned`.
        case prune(before: Double)
    }

    package enum Phase: Sendable, Equatable {
        /// Waiting for its rollout delay.
        case spreading
        case deferred
        /// Admitted: queued for a handler slot, or running.
        case admitted
    }

    struct Entry: Sendable, Equatable {
        var seq: Int64
        var arrival: Arrival
        var receivedAt: Double
        var phase: Phase
        /// Its rollout delay (0 when it has no spread).
        var delay: Double
        /// When its rollout delay is over.
        var dueAt: Double { receivedAt + delay }
    }

    struct CollapseKey: Hashable, Sendable {
        var app: String
        var id: String
    }

    package static let dedupeWindow: Double = 7 * 86400
    /// At most one prune in this long, however busy: each costs a scan of the table.
    package static let pruneInterval: Double = 3600
    /// The timer fires this much after the room opens, so that the use that leaves the hour has left it.
    package static let timerSlack = 0.01

    package let budget: NotificationBudget
    /// `[notifications] max_deferred`: how many notifications one app may have waiting.
    package let maxDeferred: Int
    /// This device's id: the rollout delay is drawn from it.
    package let deviceID: String
    /// Notifications recorded and not yet handled that this machine follows, by seq.
    var entries: [Int64: Entry] = [:]
    /// The newest entry per app and collapse id (at most one is ever live).
    var collapsing: [CollapseKey: Int64] = [:]
    var deferredPerApp: [String: Int] = [:]
    /// Per app, the seqs of its waiting entries (deferred or spreading), ascending; never more
    /// than `maxDeferred` once an event is over.
    var waiting: [String: [Int64]] = [:]
    /// Between `received` and `recorded`: what is being written, its key and its time.
    var arriving: (arrival: Arrival, key: String, at: Double)?
    /// The deferred timer as last set.
    package private(set) var timerAt: Double?
    /// When the oldest record a prune could delete was received; nil when none is known.
    package private(set) var oldestPrunable: Double?
    var lastPrune: Double?
    /// Entries waiting for their rollout delay (`retime` looks at them only when there are some).
    var spreading = 0
    /// While a record is tentative (`recordedTentatively`): each change to the entries, to take
    /// back should its commit fail.
    private var changes: [Change]?

    /// One change to the followed entries, as `takeBack` undoes it.
    enum Change: Sendable {
        case inserted(Int64)
        case removed(Entry)
        case collapsing(CollapseKey, was: Int64?)
    }

    /// What `recordedTentatively` changed: `takeBack` restores the machine as it was before.
    package struct Checkpoint: Sendable {
        fileprivate var changes: [Change] = []
        fileprivate var arriving: (arrival: Arrival, key: String, at: Double)?
        fileprivate var timerAt: Double?
        fileprivate var oldestPrunable: Double?
        fileprivate var lastPrune: Double?
    }

    package init(budget: NotificationBudget, deviceID: String = "", maxDeferred: Int = 64) {
        self.budget = budget
        self.deviceID = deviceID
        self.maxDeferred = max(1, maxDeferred)
    }

    /// How long after it was received a notification may act: its rollout delay, if any.
    func delay(_ a: Arrival, key: String?, seq: Int64) -> Double {
        guard let spread = a.spread, spread > 0 else { return 0 }
        let id = a.id ?? key ?? "seq:\(seq)"
        return RolloutDelay.delay(deviceID: deviceID, notificationID: id, spread: spread)
    }

    /// Apps whose budget uses an event needs (the apps with deferred notifications, and `app`).
    package func budgetApps(plus app: String? = nil) -> Set<String> {
        var s = Set(deferredPerApp.keys)
        if let app { s.insert(app) }
        return s
    }

    package var deferredCount: Int { deferredPerApp.values.reduce(0, +) }
    /// Notifications waiting for their rollout delay.
    package var spreadingCount: Int { spreading }
    package var followedCount: Int { entries.count }
    /// Notifications waiting (deferred or for their rollout delay), by app.
    package func waitingCount(app: String) -> Int { waiting[app]?.count ?? 0 }

    /// The phase of a followed notification (for tests and status); nil when it is not followed.
    package func phase(of seq: Int64) -> Phase? { entries[seq]?.phase }

    // MARK: events

    /// The store's notifications not yet handled, after a start: they run, wait or are dropped as
    /// before the restart. The first prune happens now.
    package mutating func restored(_ records: [Restored], now: Double, uses: [String: [Double]], nextWindow: Double?) -> [Action] {
        entries = [:]
        collapsing = [:]
        deferredPerApp = [:]
        waiting = [:]
        spreading = 0
        arriving = nil
        var uses = uses
        var out: [Action] = []
        for r in records.sorted(by: { $0.seq < $1.seq }) {
            guard let a = r.arrival else {
                out.append(.drop(seq: r.seq))
                becamePrunable(receivedAt: r.receivedAt)
                continue
            }
            // A clock set back since (a board without an RTC) must not put the delay months away.
            let entry = Entry(seq: r.seq, arrival: a, receivedAt: min(r.receivedAt, now), phase: .deferred,
                              delay: delay(a, key: r.dedupeKey, seq: r.seq))
            switch r.state {
            case .deferred:
                if collapseOlder(than: entry, into: &out) { continue }
                insert(entry)
            case .pending(.some):
                // Admitted before the restart: it used its budget already and runs without a second decision.
                if collapseOlder(than: entry, into: &out) { continue }
                var e = entry
                e.phase = .admitted
                insert(e)
                out.append(.runHandler(seq: r.seq, app: a.app))
            case .pending(nil):
                dispatch(entry, now: now, uses: &uses, nextWindow: nextWindow, into: &out)
            }
        }
        // A smaller max_deferred than before the restart applies to the backlog kept until then.
        for app in waiting.keys.sorted() { trimBacklog(app: app, into: &out) }
        out.append(.prune(before: now - Self.dedupeWindow))
        lastPrune = now
        out += retime(now: now, uses: uses, nextWindow: nextWindow)
        return out
    }

    /// An `id` up to this many bytes is its own dedupe key; a longer one is keyed by its digest.
    /// The key is kept `dedupeWindow` after the notification is handled: ids of up to 4 KiB
    /// made a flood of distinct notifications grow state.db by 4 KiB each for a week.
    package static let maxKeyedID = 128

    /// A checked notification arrived. `digest` (of the payload) is asked for
    /// only when the notification has no `id`; `idDigest` only for an id over `maxKeyedID` bytes.
    ///
    /// The dedupe key never holds the topic: one notification that reaches the device by two
    /// routes (its own topic and a group's, or two groups) is one notification for the app.
    package mutating func received(_ a: Arrival, now: Double, idDigest: (String) -> String, digest: () -> String) -> [Action] {
        var out = pruneIfDue(now: now)
        if a.expired(at: now) {
            arriving = nil
            out.append(.refuse(app: a.app, .expired))
            return out
        }
        let key = a.id.map { $0.utf8.count <= Self.maxKeyedID ? "id:" + $0 : "id-sha256:" + idDigest($0) } ?? "hash:" + digest()
        arriving = (a, key, now)
        out.append(.record(app: a.app, dedupeKey: key))
        return out
    }

    /// The record asked for by `record` was written as `seq`, or not (nil) because the store
    /// held its key already. A store that failed needs no event: the broker delivers the message
    /// again and `received` starts over.
    package mutating func recorded(seq: Int64?, now: Double, uses: [String: [Double]], nextWindow: Double?) -> [Action] {
        guard let (a, key, at) = arriving else { return [] }
        arriving = nil
        guard let seq else { return [.duplicate(app: a.app, dedupeKey: key)] }
        var uses = uses
        var out: [Action] = []
        let entry = Entry(seq: seq, arrival: a, receivedAt: at, phase: .deferred, delay: delay(a, key: key, seq: seq))
        dispatch(entry, now: now, uses: &uses, nextWindow: nextWindow, into: &out)
        out += retime(now: now, uses: uses, nextWindow: nextWindow)
        return out
    }

    /// `recorded`, for a record whose transaction has not committed yet: the checkpoint lets
    /// `takeBack` undo it should the commit fail. It costs what `recorded` changes, not a copy
    /// of the machine: a copy kept for the rollback was copied on write at every record, and
    /// with a burst's thousand entries waiting that was a tenth of the daemon's work for it.
    package mutating func recordedTentatively(seq: Int64?, now: Double, uses: [String: [Double]], nextWindow: Double?)
        -> (actions: [Action], checkpoint: Checkpoint) {
        var checkpoint = Checkpoint(arriving: arriving, timerAt: timerAt, oldestPrunable: oldestPrunable, lastPrune: lastPrune)
        changes = []
        let actions = recorded(seq: seq, now: now, uses: uses, nextWindow: nextWindow)
        checkpoint.changes = changes ?? []
        changes = nil
        return (actions, checkpoint)
    }

    /// The commit of a record `recordedTentatively` decided for failed: the machine is as it was
    /// before (its actions are not carried out; the broker delivers the message again).
    package mutating func takeBack(_ checkpoint: Checkpoint) {
        for change in checkpoint.changes.reversed() {
            switch change {
            case .inserted(let seq): unfollow(seq)
            case .removed(let e): follow(e)
            case .collapsing(let key, let was): collapsing[key] = was
            }
        }
        arriving = checkpoint.arriving
        timerAt = checkpoint.timerAt
        oldestPrunable = checkpoint.oldestPrunable
        lastPrune = checkpoint.lastPrune
    }

    /// A fetch window opens (the radio is awake): deferred notifications run as far as their
    /// app's budget allows, and those waiting for their rollout delay go on now.
    package mutating func windowOpened(now: Double, uses: [String: [Double]], nextWindow: Double?) -> [Action] {
        var out = pruneIfDue(now: now)
        out += release(now: now, uses: uses, nextWindow: nextWindow, window: true)
        return out
    }

    /// The wall clock was set by `step` seconds (a time sync). Expirations are the publishers'
    /// wall-clock times: on the timeline they now fall `step` earlier (set forward) or later (set
    /// back). Nothing else moves: receipt times, rollout delays and budgets are the timeline's own.
    /// One that has expired now is dropped when the timer this sets fires (at once).
    package mutating func wallClockStepped(by step: Double, now: Double, uses: [String: [Double]], nextWindow: Double?) -> [Action] {
        guard step.isFinite, step != 0 else { return [] }
        for seq in entries.keys {
            if let e = entries[seq]?.arrival.expiration { entries[seq]?.arrival.expiration = e - step }
        }
        if let e = arriving?.arrival.expiration { arriving?.arrival.expiration = e - step }
        return retime(now: now, uses: uses, nextWindow: nextWindow)
    }

    /// The timer set by `setTimer` fired.
    package mutating func timerFired(now: Double, uses: [String: [Double]], nextWindow: Double?) -> [Action] {
        timerAt = nil
        var out = pruneIfDue(now: now)
        out += release(now: now, uses: uses, nextWindow: nextWindow)
        return out
    }

    /// The handler asked for by `runHandler` ended (or was not started: the app has no command,
    /// or the notification was collapsed while it waited). Its record is handled now.
    package mutating func handlerFinished(seq: Int64, now: Double) -> [Action] {
        if let e = entries[seq] {
            remove(e)
            becamePrunable(receivedAt: e.receivedAt)
        }
        return pruneIfDue(now: now)
    }

    /// `prune` was carried out: `oldestLeft` is when the oldest record a prune could delete was
    /// received (nil: none is left).
    package mutating func pruned(oldestLeft: Double?) {
        oldestPrunable = min(oldestPrunable ?? .infinity, oldestLeft ?? .infinity)
        if oldestPrunable == .infinity { oldestPrunable = nil }
    }

    // MARK: rules

    /// Expiry, collapse, the rollout delay, then `act`: runs now or waits.
    private mutating func dispatch(_ entry: Entry, now: Double, uses: inout [String: [Double]], nextWindow: Double?,
                                   into out: inout [Action]) {
        let a = entry.arrival
        if a.expired(at: now) {
            out.append(.expire(seq: entry.seq, app: a.app))
            becamePrunable(receivedAt: entry.receivedAt)
            return
        }
        if collapseOlder(than: entry, into: &out) {
            // An older live one is newer than this (only from a store written out of order): this one goes.
            return
        }
        if entry.dueAt > now {
            var e = entry
            e.phase = .spreading
            insert(e)
            out.append(.spread(seq: e.seq, app: a.app, until: e.dueAt, delay: e.delay, spread: a.spread ?? 0))
            trimBacklog(app: a.app, into: &out)
            return
        }
        act(entry, now: now, uses: &uses, nextWindow: nextWindow, into: &out)
    }

    /// Download, then the budget: runs now or is deferred.
    private mutating func act(_ entry: Entry, now: Double, uses: inout [String: [Double]], nextWindow: Double?,
                              into out: inout [Action]) {
        let a = entry.arrival
        if a.download {
            if a.allowDownload && a.signed {
                // Its record is marked with the transfer (or as failed) at once: handled.
                out.append(.startDownload(seq: entry.seq, app: a.app))
                becamePrunable(receivedAt: entry.receivedAt)
                if let c = a.collapseID, collapsing[CollapseKey(app: a.app, id: c)] == entry.seq {
                    setCollapsing(CollapseKey(app: a.app, id: c), nil)
                }
                return
            }
            out.append(.ignoreDownload(seq: entry.seq, app: a.app, a.allowDownload ? .unsigned : .notAllowed))
        }
        var e = entry
        let used = uses[a.app] ?? []
        if budget.admits(priority: a.priority, used: used, now: now) {
            uses[a.app, default: []].append(now)
            e.phase = .admitted
            insert(e)
            out += [.chargeBudget(seq: e.seq, at: now), .runHandler(seq: e.seq, app: a.app)]
        } else {
            e.phase = .deferred
            insert(e)
            var until = budget.nextRoom(used: used, now: now)
            if let w = nextWindow, w > now { until = min(until, w) }
            out.append(.defer(seq: e.seq, app: a.app, until: until, inLastHour: budget.counting(used, now: now).count))
            trimBacklog(app: a.app, into: &out)
        }
    }

    /// Drops the older live notification of the entry's app with its collapse id, if any, and
    /// makes the entry the one to collapse next. Returns true when the live one is newer, so the
    /// entry itself is the one dropped.
    @discardableResult
    private mutating func collapseOlder(than entry: Entry, into out: inout [Action]) -> Bool {
        guard let c = entry.arrival.collapseID else { return false }
        let key = CollapseKey(app: entry.arrival.app, id: c)
        if let live = collapsing[key], let older = entries[live], live != entry.seq {
            if live > entry.seq {
                out.append(.dropCollapsed(seq: entry.seq, app: entry.arrival.app, collapseID: c))
                becamePrunable(receivedAt: entry.receivedAt)
                return true
            }
            remove(older)
            out.append(.dropCollapsed(seq: live, app: entry.arrival.app, collapseID: c))
            becamePrunable(receivedAt: older.receivedAt)
        }
        setCollapsing(key, entry.seq)
        return false
    }

    /// Notifications whose rollout delay is over (all of them in a `window`) go on; deferred
    /// ones, oldest first, run as far as their app's budget has room; expired ones are dropped.
    private mutating func release(now: Double, uses: [String: [Double]], nextWindow: Double?, window: Bool = false) -> [Action] {
        var uses = uses
        var out: [Action] = []
        for seq in entries.keys.sorted() {
            guard let e = entries[seq], e.phase == .spreading else { continue }
            if e.arrival.expired(at: now) {
                remove(e)
                out.append(.expire(seq: seq, app: e.arrival.app))
                becamePrunable(receivedAt: e.receivedAt)
                continue
            }
            guard window || e.dueAt <= now else { continue }
            remove(e)
            var ready = e
            ready.phase = .deferred
            act(ready, now: now, uses: &uses, nextWindow: nextWindow, into: &out)
            // Still live (admitted or deferred): a newer one with its collapse id replaces it.
            if let c = e.arrival.collapseID, entries[seq] != nil { setCollapsing(CollapseKey(app: e.arrival.app, id: c), seq) }
        }
        guard deferredCount > 0 else { return out + retime(now: now, uses: uses, nextWindow: nextWindow) }
        for seq in entries.keys.sorted() {
            guard var e = entries[seq], e.phase == .deferred else { continue }
            let a = e.arrival
            if a.expired(at: now) {
                remove(e)
                out.append(.expire(seq: seq, app: a.app))
                becamePrunable(receivedAt: e.receivedAt)
                continue
            }
            guard budget.admits(priority: a.priority, used: uses[a.app] ?? [], now: now) else { continue }
            uses[a.app, default: []].append(now)
            remove(e)
            e.phase = .admitted
            insert(e)
            out += [.chargeBudget(seq: seq, at: now), .runHandler(seq: seq, app: a.app)]
        }
        out += retime(now: now, uses: uses, nextWindow: nextWindow)
        return out
    }

    /// The one timer: when the first app with deferred notifications has room again, or the next
    /// fetch window if sooner; none while nothing is deferred. Set only when it changes.
    private mutating func retime(now: Double, uses: [String: [Double]], nextWindow: Double?) -> [Action] {
        var next: Double?
        for (app, n) in deferredPerApp where n > 0 {
            let room = budget.nextRoom(used: uses[app] ?? [], now: now)
            next = min(next ?? room, room)
        }
        // A window at or before `now` is the one opening (or one already past): not a later one.
        if let n = next, let w = nextWindow, w > now { next = min(n, w) }
        // Rollout delays: each entry's due time, or its expiry if sooner (to drop it then). A
        // window that opens first releases them too, but they do not wait for one.
        for e in entries.values where spreading > 0 && e.phase == .spreading {
            let due = min(e.dueAt, e.arrival.expiration.map { max($0, now) } ?? .infinity)
            next = min(next ?? due, due)
        }
        let at = next.map { max($0, now) + Self.timerSlack }
        guard at != timerAt else { return [] }
        timerAt = at
        return [.setTimer(at: at)]
    }

    /// Evicts the app's waiting notifications past `maxDeferred`: the lowest priority first, the
    /// oldest of those. A scan of at most `maxDeferred + 1` seqs, whatever the flood.
    private mutating func trimBacklog(app: String, into out: inout [Action]) {
        while let seqs = waiting[app], seqs.count > maxDeferred {
            var victim = seqs[0]
            for seq in seqs.dropFirst() where (entries[seq]?.arrival.priority ?? 0) < (entries[victim]?.arrival.priority ?? 0) {
                victim = seq
            }
            guard let e = entries[victim] else {
                // Not followed (cannot happen: insert and remove keep both): forget the seq, never loop.
                waiting[app]?.removeAll { $0 == victim }
                continue
            }
            remove(e)
            out.append(.evict(seq: victim, app: app, maxDeferred: maxDeferred))
            becamePrunable(receivedAt: e.receivedAt)
        }
    }

    private mutating func pruneIfDue(now: Double) -> [Action] {
        guard let oldest = oldestPrunable, now - Self.dedupeWindow > oldest,
            now - (lastPrune ?? -.infinity) >= Self.pruneInterval
        else { return [] }
        lastPrune = now
        oldestPrunable = nil
        return [.prune(before: now - Self.dedupeWindow)]
    }

    private mutating func becamePrunable(receivedAt: Double) {
        oldestPrunable = min(oldestPrunable ?? receivedAt, receivedAt)
    }

    private mutating func insert(_ e: Entry) {
        changes?.append(.inserted(e.seq))
        follow(e)
    }

    private mutating func remove(_ e: Entry) {
        guard let old = unfollow(e.seq) else { return }
        changes?.append(.removed(old))
        if let c = old.arrival.collapseID, collapsing[CollapseKey(app: old.arrival.app, id: c)] == old.seq {
            setCollapsing(CollapseKey(app: old.arrival.app, id: c), nil)
        }
    }

    private mutating func setCollapsing(_ key: CollapseKey, _ seq: Int64?) {
        changes?.append(.collapsing(key, was: collapsing[key]))
        collapsing[key] = seq
    }

    /// The entry and the counts and lists it is in (not `collapsing`, which its callers keep).
    private mutating func follow(_ e: Entry) {
        entries[e.seq] = e
        if e.phase == .deferred { deferredPerApp[e.arrival.app, default: 0] += 1 }
        if e.phase == .spreading { spreading += 1 }
        if e.phase != .admitted {
            // Seqs mostly arrive ascending: the search from the end is usually one step.
            var seqs = waiting[e.arrival.app] ?? []
            var i = seqs.endIndex
            while i > seqs.startIndex, seqs[i - 1] > e.seq { i -= 1 }
            seqs.insert(e.seq, at: i)
            waiting[e.arrival.app] = seqs
        }
    }

    @discardableResult
    private mutating func unfollow(_ seq: Int64) -> Entry? {
        guard let old = entries.removeValue(forKey: seq) else { return nil }
        if old.phase == .deferred {
            let n = (deferredPerApp[old.arrival.app] ?? 1) - 1
            deferredPerApp[old.arrival.app] = n > 0 ? n : nil
        }
        if old.phase == .spreading { spreading -= 1 }
        if old.phase != .admitted, var seqs = waiting[old.arrival.app], let i = seqs.lastIndex(of: old.seq) {
            seqs.remove(at: i)
            waiting[old.arrival.app] = seqs.isEmpty ? nil : seqs
        }
        return old
    }
}
