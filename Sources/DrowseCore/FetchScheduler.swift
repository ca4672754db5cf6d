/// The one fetch scheduler: everything about fetch windows, as a pure state machine. Events
/// come in (each carrying the time), actions go out; no clock, no store, no timers inside.
/// `drowsed` feeds it what happens on the board and carries out its actions; `drowse simulate`
/// feeds it a virtual clock, drawn handler outcomes and a conditions timeline, and carries out
/// the same actions on paper. So the simulator measures the very code the daemon runs.
///
/// It owns: each app's fetch bookkeeping (last fetch, the no-data / failure / deadline streaks,
/// the last day's handler time against the daily budget, learned usage), which fetches are
/// running, whether the board is online and on a low battery, until when the radio is awake
/// anyway, and the one planned window. The arithmetic of eligibility, tolerance, neighbours,
/// piggybacking and usage prediction is `FetchPlanner`'s (pure functions of that state).
package struct FetchScheduler: Sendable {
    /// What decides one app's fetches; the part after a run (`Record`) is what the store keeps.
    package struct App: Sendable, Equatable {
        package var id: String
        /// Seconds; nil: never fetched in the background.
        package var interval: Double?
        /// When the app was first seen, so a brand-new app is eligible at once.
        package var registeredAt: Double
        package var record: Record
        /// Handler runs of any kind (start, seconds), oldest first; those of the last day count
        /// against the daily budget.
        package var recentRuns: [Span] { didSet { totalRecentRuns() } }
        /// The sum of `recentRuns`' seconds, in their order, and their earliest start, kept with
        /// them: every plan reads every app's runtime of the last day, and summing a busy app's
        /// runs afresh each time cost a walk over a day of them per app per event (a burst of
        /// notifications replans twice per run). While no run is older than a day the sum is
        /// that runtime as the walk would add it up.
        package private(set) var recentRunsSeconds = 0.0
        package private(set) var earliestRecentRun = Double.infinity
        /// Recent uses of the app's data (`drowse used`), oldest first.
        package var uses: [Double]

        package init(id: String, interval: Double?, registeredAt: Double, record: Record = Record(),
                    recentRuns: [Span] = [], uses: [Double] = []) {
            self.id = id
            self.interval = interval
            self.registeredAt = registeredAt
            self.record = record
            self.recentRuns = recentRuns
            self.uses = uses
            totalRecentRuns()
        }

        private mutating func totalRecentRuns() {
            var seconds = 0.0, earliest = Double.infinity
            for r in recentRuns {
                seconds += r.seconds
                earliest = min(earliest, r.start)
            }
            recentRunsSeconds = seconds
            earliestRecentRun = earliest
        }

        /// The seconds of the runs that started at `since` or later.
        func runtime(since: Double) -> Double {
            if earliestRecentRun >= since { return recentRunsSeconds }
            var seconds = 0.0
            for r in recentRuns where r.start >= since { seconds += r.seconds }
            return seconds
        }
    }

    /// The bookkeeping one fetch run moves (`apps` in the store).
    package struct Record: Sendable, Equatable {
        /// Start of the last fetch run.
        package var lastFetch: Double?
        package var lastResult: FetchResult?
        /// Failures (including deadline kills) since the last success.
        package var consecutiveFailures = 0
        package var consecutiveNoData = 0
        /// The last run was killed at its deadline.
        package var lastTimedOut = false

        package init(lastFetch: Double? = nil, lastResult: FetchResult? = nil, consecutiveFailures: Int = 0,
                    consecutiveNoData: Int = 0, lastTimedOut: Bool = false) {
            self.lastFetch = lastFetch
            self.lastResult = lastResult
            self.consecutiveFailures = consecutiveFailures
            self.consecutiveNoData = consecutiveNoData
            self.lastTimedOut = lastTimedOut
        }

        /// After a fetch run that started at `start`.
        package func after(_ result: FetchResult, timedOut: Bool, start: Double) -> Record {
            var r = self
            r.lastFetch = start
            r.lastResult = result
            r.consecutiveFailures = result == .failed ? min(consecutiveFailures + 1, 1_000_000) : 0
            switch result {
            case .noData: r.consecutiveNoData = min(consecutiveNoData + 1, 1_000_000)
            case .newData: r.consecutiveNoData = 0
            case .failed: break
            }
            r.lastTimedOut = timedOut
            return r
        }
    }

    package struct Span: Sendable, Equatable {
        package var start: Double
        package var seconds: Double
        package init(start: Double, seconds: Double) {
            self.start = start
            self.seconds = seconds
        }
    }

    /// What the scheduler needs to know of the board.
    package struct Conditions: Sendable, Equatable {
        package var online: Bool
        package var lowBattery: Bool
        /// How long the radio stays up after the last packet (the current network's tail).
        package var radioTail: Double
        package init(online: Bool, lowBattery: Bool = false, radioTail: Double) {
            self.online = online
            self.lowBattery = lowBattery
            self.radioTail = radioTail
        }
    }

    /// How a fetch run ended.
    package struct FetchEnding: Sendable, Equatable {
        package var result: FetchResult
        package var timedOut: Bool
        package init(result: FetchResult, timedOut: Bool = false) {
            self.result = result
            self.timedOut = timedOut
        }
    }

    package enum Trigger: String, Sendable, Equatable {
        case scheduled, manual
    }

    package enum Event: Sendable, Equatable {
        /// The daemon starts (or the simulation begins) with these apps, as the store remembers them.
        case started(apps: [App], conditions: Conditions, now: Double)
        /// The app files were read again (`systemctl reload drowsed`): these are the apps now, as
        /// the store remembers them. Apps already known keep their usage, running fetch and
        /// plan state and take the new interval; new ones are added, gone ones dropped.
        case appsChanged(apps: [App], now: Double)
        /// `drowse fetch ID`.
        case fetchRequested(app: String, now: Double)
        /// A fetch the scheduler started never ran (its app went away, or drowsed is stopping).
        case fetchAbandoned(app: String, now: Double)
        /// A handler ended: a fetch (with how it ended) or another kind (notification, transfers),
        /// which counts against the app's daily budget and kept the radio awake.
        case handlerEnded(app: String, fetch: FetchEnding?, startedAt: Double, endedAt: Double)
        case conditionsChanged(Conditions, now: Double)
        /// Something else used the network just now (a notification's handler started, a
        /// transfer finished): the radio is awake for its tail.
        case radioUsed(now: Double)
        /// The app's data was read (`drowse used`).
        case used(app: String, now: Double)
        case timerFired(now: Double)
        /// The wall clock was set (or the time zone changed): a time `t` on drowsed's timeline now
        /// falls at local time of day `t + utcOffset`. Habits are learnt and predicted in it.
        case timeOfDayChanged(utcOffset: Double, now: Double)

        package var now: Double {
            switch self {
            case .started(_, _, let t), .appsChanged(_, let t), .fetchRequested(_, let t), .fetchAbandoned(_, let t), .conditionsChanged(_, let t),
                 .radioUsed(let t), .used(_, let t), .timerFired(let t), .timeOfDayChanged(_, let t):
                t
            case .handlerEnded(_, _, _, let t): t
            }
        }
    }

    package enum Action: Sendable, Equatable {
        /// Run these apps' fetch handlers now, together (a window opens).
        case startFetch(apps: [String], trigger: Trigger)
        /// `drowse fetch` asked for an app whose fetch is already running.
        case refuseFetch(app: String, reason: String)
        /// Wake at `at` (and send `timerFired`); replaces any earlier timer.
        case setTimer(at: Double)
        case cancelTimer
        /// Keep this after the run (one transaction with the run's record).
        case save(app: String, record: Record)
        /// What now governs an app's fetches changed (a streak, the budget, the battery, the network).
        case explain(app: String, reason: String)
    }

    package private(set) var policy: FetchPlanner
    /// Seconds east of UTC, for habits by time of day (plus the wall clock's skew from the
    /// timeline, once it was set: `timeOfDayChanged`).
    package private(set) var utcOffset: Double
    package private(set) var apps: [String: App] = [:]
    /// Apps in id order (the order windows list them).
    package private(set) var order: [String] = []
    package private(set) var running: Set<String> = []
    package private(set) var conditions = Conditions(online: true, radioTail: 0)
    /// The one planned window (nil offline or with nothing to fetch).
    package private(set) var planned: FetchPlanner.Window?
    var timerAt: Double?
    var usage: [String: UsageModel] = [:]
    /// Each app's next predicted use, valid until that use passes or a use is recorded.
    var predicted: [String: Double?] = [:]
    var explained: [String: String] = [:]

    package init(policy: FetchPlanner = FetchPlanner(), utcOffset: Double = 0) {
        self.policy = policy
        self.utcOffset = utcOffset
    }

    // MARK: - Events in, actions out

    package mutating func handle(_ event: Event) -> [Action] {
        var out: [Action] = []
        let now = event.now
        switch event {
        case let .started(list, c, _):
            apps = [:]
            usage = [:]
            predicted = [:]
            explained = [:]
            running = []
            for app in list {
                apps[app.id] = app
                usage[app.id] = UsageModel(uses: app.uses, utcOffset: utcOffset)
            }
            order = apps.keys.sorted()
            conditions = c
            policy.lowBattery = c.lowBattery
        case let .appsChanged(list, _):
            let ids = Set(list.map(\.id))
            for gone in apps.keys where !ids.contains(gone) {
                apps[gone] = nil
                usage[gone] = nil
                predicted[gone] = nil
                explained[gone] = nil
                // A fetch of a gone app that is still running ends on its own; its end is ignored.
                running.remove(gone)
            }
            for app in list {
                if var known = apps[app.id] {
                    known.interval = app.interval
                    apps[app.id] = known
                } else {
                    apps[app.id] = app
                    usage[app.id] = UsageModel(uses: app.uses, utcOffset: utcOffset)
                }
            }
            order = apps.keys.sorted()
        case let .fetchRequested(id, _):
            guard apps[id] != nil else { return [.refuseFetch(app: id, reason: "no app '\(id)'")] }
            guard !running.contains(id) else { return [.refuseFetch(app: id, reason: "a fetch of '\(id)' is already running")] }
            running.insert(id)
            out.append(.startFetch(apps: [id], trigger: .manual))
            awake(now)
        case let .fetchAbandoned(id, _):
            running.remove(id)
        case let .handlerEnded(id, fetch, start, end):
            guard var app = apps[id] else { break }
            app.recentRuns.append(Span(start: start, seconds: min(max(end - start, 0), 86400)))
            if app.earliestRecentRun < now - 86400 { app.recentRuns.removeAll { $0.start < now - 86400 } }
            if let fetch {
                running.remove(id)
                app.record = app.record.after(fetch.result, timedOut: fetch.timedOut, start: start)
                out.append(.save(app: id, record: app.record))
            }
            apps[id] = app
            awake(end)
        case let .conditionsChanged(c, _):
            conditions = c
            policy.lowBattery = c.lowBattery
        case .radioUsed:
            awake(now)
        case let .used(id, _):
            guard apps[id] != nil else { break }
            usage[id, default: UsageModel(utcOffset: utcOffset)].record(now)
            apps[id]?.uses = usage[id]!.uses
            predicted[id] = nil
        case let .timeOfDayChanged(offset, _):
            guard offset.isFinite else { break }
            utcOffset = offset
            for id in usage.keys { usage[id]?.utcOffset = offset }
            predicted = [:]
        case .timerFired:
            // A stale timer (one replaced just as it fired) opens nothing early.
            if conditions.online, let window = planned, now + 0.001 >= window.at,
               let due = policy.nextWindow(fetchingInputs(now), now: now).flatMap({ $0.at <= now + 0.001 ? $0.apps : nil }) {
                if !due.isEmpty {
                    for id in due { running.insert(id) }
                    out.append(.startFetch(apps: due, trigger: .scheduled))
                    awake(now)
                }
            }
            timerAt = nil
        }
        replan(now, into: &out)
        return out
    }

    /// The radio is awake until `t` plus its tail: due fetches may ride along.
    mutating func awake(_ t: Double) {
        let until = t + conditions.radioTail
        if until > (policy.radioAwakeUntil ?? -.infinity) { policy.radioAwakeUntil = until }
    }

    /// The planner's view of every app not fetching right now.
    package mutating func inputs(_ now: Double) -> [FetchPlanner.AppInput] {
        order.compactMap { id -> FetchPlanner.AppInput? in
            guard !running.contains(id), let app = apps[id] else { return nil }
            return input(app, now)
        }
    }

    mutating func input(_ app: App, _ now: Double) -> FetchPlanner.AppInput {
        let next = nextUse(app.id, now)
        predicted[app.id] = .some(next)
        return input(app, now, nextUse: next)
    }

    /// The next predicted use: the cached one while it is still ahead.
    func nextUse(_ id: String, _ now: Double) -> Double? {
        if let cached = predicted[id], let t = cached, now < t { return t }
        return usage[id]?.nextUse(after: now)
    }

    func input(_ app: App, _ now: Double, nextUse: Double?) -> FetchPlanner.AppInput {
        let runtime = app.runtime(since: now - 86400)
        return FetchPlanner.AppInput(
            id: app.id, interval: app.interval.map { .milliseconds(Int64(saturating: ($0 * 1000).rounded())) },
            lastFetch: app.record.lastFetch, consecutiveFailures: app.record.consecutiveFailures,
            registeredAt: app.registeredAt, consecutiveNoData: app.record.consecutiveNoData,
            lastTimedOut: app.record.lastTimedOut, runtimeToday: runtime, predictedUse: nextUse)
    }

    /// The planner's view of every app that fetches (has an interval) and is not fetching right
    /// now: the others take no part in a window.
    mutating func fetchingInputs(_ now: Double) -> [FetchPlanner.AppInput] {
        order.compactMap { id -> FetchPlanner.AppInput? in
            guard !running.contains(id), let app = apps[id], app.interval != nil else { return nil }
            return input(app, now)
        }
    }

    /// Remakes the one planned window and says what changed. Apps that never fetch are only
    /// told so, once: in a burst of notifications to them, each run's start and end replans
    /// without building their inputs.
    mutating func replan(_ now: Double, into out: inout [Action]) {
        let all = fetchingInputs(now)
        planned = conditions.online ? policy.nextWindow(all, now: now) : nil
        var wake = planned?.at
        // An app over its daily budget opens no window, but its budget frees as its runs age
        // past a day: wake then to plan it again (nothing else may happen before).
        if conditions.online {
            for app in all where app.interval != nil && policy.overBudget(app) {
                if let t = budgetFrees(app.id, now), t < wake ?? .infinity { wake = t }
            }
        }
        if let at = wake {
            if timerAt != at { out.append(.setTimer(at: at)) }
            timerAt = at
        } else if timerAt != nil {
            out.append(.cancelTimer)
            timerAt = nil
        }
        // In id order, as `inputs` lists them.
        var fetching = all[...]
        for id in order where !running.contains(id) {
            guard let app = apps[id] else { continue }
            let reason: String
            if app.interval == nil {
                reason = Self.fetchOff
            } else {
                guard let input = fetching.first, input.id == id else { continue }
                fetching.removeFirst()
                reason = governing(input)
            }
            if explained[id] != reason {
                explained[id] = reason
                out.append(.explain(app: id, reason: reason))
            }
        }
    }

    static let fetchOff = "background fetch is off"

    /// When an app over its daily budget is under it again, as its runs of the last day age
    /// (nil: not over it). Just after a run is a day old it no longer counts.
    func budgetFrees(_ id: String, _ now: Double) -> Double? {
        guard let app = apps[id] else { return nil }
        let counted = app.recentRuns.filter { $0.start >= now - 86400 }
        var runtime = input(app, now, nextUse: nil).runtimeToday
        for run in counted.sorted(by: { $0.start < $1.start }) {
            runtime -= run.seconds
            let t = run.start + 86400 + 0.001
            if runtime < policy.dailyBudget, !policy.overBudget(input(app, t, nextUse: nil)) { return t }
        }
        return nil
    }

    /// The standing reason behind an app's schedule, without the times that move every second.
    func governing(_ app: FetchPlanner.AppInput) -> String {
        guard app.interval != nil else { return Self.fetchOff }
        var notes = policy.notes(app)
        if !conditions.online { notes.insert("offline: fetches wait for the network", at: 0) }
        return notes.isEmpty ? "on schedule" : notes.joined(separator: "; ")
    }

    // MARK: - Questions (for `drowse apps`, and the simulator's checks)

    /// Every app's plan at `now`; a running app is shown as fetching.
    package mutating func plans(now: Double) -> [FetchPlanner.AppPlan] {
        let all = inputs(now)
        var plans = policy.plans(all, now: now, window: planned)
        if !conditions.online {
            for i in plans.indices where plans[i].plannedAt != nil { plans[i].reason = "waiting for network; " + plans[i].reason }
        }
        return plans
    }

    /// The stated rule for one app now: eligible from, and due by (nil while the app only joins
    /// others' windows, or never fetches). Offline time does not count against it.
    package func promise(_ id: String, now: Double) -> (eligibleAt: Double, dueBy: Double?)? {
        guard let app = apps[id], !running.contains(id) else { return nil }
        let input = input(app, now, nextUse: nextUse(id, now))
        guard let e = policy.eligibleAt(input) else { return nil }
        return (e, policy.dueBy(input))
    }
}
