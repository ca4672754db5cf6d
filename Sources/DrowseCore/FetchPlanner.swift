/// Plans background fetches into shared wake windows. Pure: no I/O, time is passed in; the
/// daemon and `drowse simulate` run this same code.
///
/// Each app becomes *eligible* its interval (backed off after failures) after its last fetch and
/// runs at most a *tolerance* after that, or after its no-data-stretched interval (the stated
/// rule: `drowse apps show` gives both times; offline time does not count). The next window opens at the last moment that keeps every eligible-soon app
/// within its tolerance; every app eligible by then runs in it, so the radio wakes once for all
/// of them. No app ever runs before it is eligible. On top of that:
/// - results steer the interval: failures back off exponentially, a deadline kill costs one
///   more doubling, new data restores it; no-data stretches (bounded) only how long the app
///   waits before it opens a window itself: from its interval on it rides windows others open,
///   which cost no extra wake, so its data is not left older for nothing;
/// - while the radio is awake anyway (a notification, a transfer, another window) apps that
///   become eligible before its tail ends join instead of waking it again later;
/// - an app whose data is used at a habitual time is fetched shortly before that time (the
///   earliest it was used at on any day), and a window holding for that does not wait past it;
/// - an app past its daily handler budget opens no window of its own; it joins others';
/// - on a low battery, tolerances stretch;
/// - a window waits for apps that become eligible shortly after it, as long as every member
///   stays within its tolerance.
package struct FetchPlanner: Sendable {
    package struct AppInput: Sendable, Equatable {
        package var id: String
        /// nil: never fetched in the background.
        package var interval: Duration?
        package var lastFetch: Double?
        /// Failures (including deadline kills) since the last success.
        package var consecutiveFailures: Int
        /// When the app was first seen, so a brand-new app is eligible at once.
        package var registeredAt: Double
        /// "No new data" results in a row.
        package var consecutiveNoData: Int = 0
        /// The last run was killed at its deadline.
        package var lastTimedOut: Bool = false
        /// Handler run time in the last 24 h, against the daily budget.
        package var runtimeToday: Double = 0
        /// The next habitual use of the app's data, if one is predicted.
        package var predictedUse: Double?

        package init(id: String, interval: Duration?, lastFetch: Double?, consecutiveFailures: Int = 0, registeredAt: Double,
                    consecutiveNoData: Int = 0, lastTimedOut: Bool = false, runtimeToday: Double = 0, predictedUse: Double? = nil) {
            self.id = id
            self.interval = interval
            self.lastFetch = lastFetch
            self.consecutiveFailures = consecutiveFailures
            self.registeredAt = registeredAt
            self.consecutiveNoData = consecutiveNoData
            self.lastTimedOut = lastTimedOut
            self.runtimeToday = runtimeToday
            self.predictedUse = predictedUse
        }
    }

    /// One app's place in the plan, with the reason a person can read.
    package struct AppPlan: Sendable, Equatable {
        package var id: String
        package var eligibleAt: Double?
        package var plannedAt: Double?
        package var reason: String
        /// Seconds past eligibility the app may wait (nil: never fetches).
        package var tolerance: Double? = nil
        /// The latest it runs by the stated rule (nil while it only joins others' windows).
        package var dueBy: Double? = nil
    }

    package struct Window: Sendable, Equatable {
        package var at: Double
        package var apps: [String]
    }

    /// The tolerance as a share of the interval (`[scheduler] tolerance`).
    package var toleranceFraction: Double = 0.5
    /// Longest tolerance, so that long intervals do not drift by hours.
    package var maxTolerance: Double = 1800
    /// Failures stretch the interval by 2^n, at most this many times.
    package var maxBackoffDoublings: Int = 5
    /// No-data results stretch the interval before the app opens a window itself by 50 % each, up to this factor.
    package var maxNoDataStretch: Double = 4
    /// Handler seconds per app per day before its fetches only join others' windows.
    package var dailyBudget: Double = 600
    /// How long before a predicted use the fetch runs.
    package var usageLead: Double = 300
    /// On battery below the low mark: tolerances are multiplied by this.
    package var lowBatteryStretch: Double = 3
    package var lowBattery = false
    /// Until when the radio is awake anyway (activity end plus its tail), if it is.
    package var radioAwakeUntil: Double?
    package init() {}

    /// The interval after which the app may run: its own, backed off by failures and a deadline kill.
    package func eligibleInterval(_ app: AppInput) -> Double? {
        guard let interval = app.interval else { return nil }
        let doublings = min(min(app.consecutiveFailures, maxBackoffDoublings) + (app.lastTimedOut ? 1 : 0), maxBackoffDoublings)
        return interval.seconds * Double(1 << doublings)
    }

    /// The interval after which the app wakes the radio itself: the eligible one, stretched by
    /// no-data results. In between it only rides windows that are open anyway, which cost no wake.
    package func effectiveInterval(_ app: AppInput) -> Double? {
        guard let interval = eligibleInterval(app) else { return nil }
        let stretch = min(1 + 0.5 * Double(app.consecutiveNoData), maxNoDataStretch)
        return interval * (app.consecutiveFailures > 0 ? 1 : stretch)
    }

    package func eligibleAt(_ app: AppInput) -> Double? {
        guard let interval = eligibleInterval(app) else { return nil }
        guard let last = app.lastFetch else { return app.registeredAt }
        return last + interval
    }

    /// When the app would open a window itself, at the latest: the end of its tolerance after the
    /// stretched interval (its eligibility when nothing stretches it).
    func ownDue(_ app: AppInput) -> Double? {
        guard let interval = effectiveInterval(app) else { return nil }
        guard let last = app.lastFetch else { return app.registeredAt + tolerance(app) }
        return last + interval + tolerance(app)
    }

    package func tolerance(_ app: AppInput) -> Double {
        guard let interval = app.interval?.seconds else { return 0 }
        let base = min(max(interval * toleranceFraction, 1), maxTolerance)
        return lowBattery ? base * lowBatteryStretch : base
    }

    package func overBudget(_ app: AppInput) -> Bool { app.runtimeToday >= dailyBudget }

    /// How late past eligibility an app may run: to share a window with an app that becomes
    /// eligible just after, or to reach a predicted use. The tolerance, so the rule holds.
    package func lateness(_ app: AppInput) -> Double { tolerance(app) }

    /// The latest time the app runs, by the stated rule (online time): its tolerance after its
    /// (no-data-stretched) interval; nil while it only joins windows others open (daily budget
    /// spent) or never fetches.
    package func dueBy(_ app: AppInput) -> Double? {
        guard !overBudget(app) else { return nil }
        return ownDue(app)
    }

    /// What stretches or holds an app's schedule now, for people.
    package func notes(_ app: AppInput) -> [String] {
        var notes: [String] = []
        if app.consecutiveFailures > 0, let i = effectiveInterval(app) {
            notes.append("backing off after \(app.consecutiveFailures) failure\(app.consecutiveFailures == 1 ? "" : "s")"
                + " (interval stretched to \(DurationText.format(.seconds(i))))")
        } else if app.consecutiveNoData > 0, let i = effectiveInterval(app), let base = eligibleInterval(app) {
            notes.append("\(app.consecutiveNoData) no-data result\(app.consecutiveNoData == 1 ? "" : "s") in a row stretched the interval to \(DurationText.format(.seconds(i)))"
                + " (it rides windows other apps open from \(DurationText.format(.seconds(base))))")
        }
        if app.lastTimedOut { notes.append("penalised: the last run was killed at its deadline") }
        if overBudget(app) { notes.append("daily budget of \(DurationText.format(.seconds(dailyBudget))) spent: joins windows others open") }
        if lowBattery { notes.append("battery low: tolerance stretched \(lowBatteryStretch.rounded() == lowBatteryStretch ? String(Int(lowBatteryStretch)) : String(lowBatteryStretch))×") }
        return notes
    }

    /// When the app would like to run: the end of its tolerance, or just before a predicted use.
    func latest(_ app: AppInput, eligible e: Double) -> (Double, usage: Bool) {
        let natural = ownDue(app) ?? e + tolerance(app)
        guard let use = app.predictedUse, let interval = eligibleInterval(app) else { return (natural, false) }
        let target = use - usageLead
        let slack = lateness(app)
        // Too soon to fetch before the use: stay on the usual schedule.
        guard target >= e else { return (natural, false) }
        // The use comes before this fetch is due to be late anyway: run just before it.
        if target <= e + slack { return (target, true) }
        // Further off: keep the chain of fetches (each at least an interval and at most `slack`
        // late after the previous) able to land on the target. From x that means
        // target - x in [m·interval, m·(interval + slack)] for some m >= 1.
        func reachable(_ x: Double) -> Bool {
            let d = target - x
            let most = (d / interval).rounded(.down)
            return most >= 1 && max(1, (d / (interval + slack)).rounded(.up)) <= most
        }
        // It may run anywhere from e (joining a window) to natural: both must keep the target in reach.
        if reachable(natural) && reachable(e) { return (natural, false) }
        if reachable(e) { return (e, true) }
        let m = max(1, ((target - e - slack) / (interval + slack)).rounded(.up))
        guard target - m * interval >= e else { return (natural, false) }
        return (min(target - m * interval, e + slack), true)
    }

    /// The next window at or after `now`, or nil when no app fetches in the background.
    package func nextWindow(_ apps: [AppInput], now: Double) -> Window? {
        // Each app with when it becomes eligible, and when it is ready to run: at eligibility,
        // or, when it holds back for a predicted use of its data, at that (later) moment — it
        // then joins no window before it, so the use finds fresh data.
        // `due` bounds how long a window it is in may wait for others: the stated due-by, or the
        // moment it holds back for, which must not slip past the use.
        let scheduled = apps.compactMap { app -> (app: AppInput, e: Double, ready: Double, due: Double)? in
            guard let e = eligibleAt(app), let due = ownDue(app) else { return nil }
            let (late, forUsage) = latest(app, eligible: e)
            return forUsage ? (app, e, max(e, late), min(due, max(e, late))) : (app, e, e, due)
        }
        guard !scheduled.isEmpty else { return nil }
        // Apps within budget decide when windows open; the others only join.
        let openers = scheduled.filter { !overBudget($0.app) }
        var at = openers.map { latest($0.app, eligible: $0.e).0 }.min() ?? .infinity
        // The radio is awake anyway: whoever is ready before its tail ends rides along.
        var ridesAwakeRadio = false
        if let awake = radioAwakeUntil, awake > now, let r = scheduled.map(\.ready).filter({ $0 <= awake }).min(), max(r, now) < at {
            at = max(r, now)
            ridesAwakeRadio = true
        }
        guard at.isFinite else { return nil }
        var windowAt = max(now, at)
        // Rather than wake the radio again shortly for an app that becomes ready just after,
        // wait for it, as long as every app in the window stays within its tolerance.
        var limit = scheduled.filter { $0.ready <= windowAt }.map(\.due).min() ?? windowAt
        // A window riding an awake radio waits no longer than the radio stays awake.
        if ridesAwakeRadio, let awake = radioAwakeUntil { limit = min(limit, awake) }
        for x in scheduled.filter({ $0.ready > windowAt && !overBudget($0.app) }).sorted(by: { $0.ready < $1.ready }) {
            guard x.ready <= limit else { break }
            windowAt = x.ready
            limit = min(limit, x.due)
        }
        let members = scheduled.filter { $0.ready <= windowAt }.map(\.app.id).sorted()
        guard !members.isEmpty else { return nil }
        return Window(at: windowAt, apps: members)
    }

    /// Every app's plan, for `drowse apps` and `apps show`.
    package func plans(_ apps: [AppInput], now: Double) -> [AppPlan] {
        plans(apps, now: now, window: nextWindow(apps, now: now))
    }

    /// Every app's plan, given the window already planned.
    package func plans(_ apps: [AppInput], now: Double, window: Window?) -> [AppPlan] {
        apps.map { app in
            guard let interval = app.interval else {
                return AppPlan(id: app.id, eligibleAt: nil, plannedAt: nil, reason: "background fetch is off (minimum_interval = never)")
            }
            let eligible = eligibleAt(app)!
            let (late, forUsage) = latest(app, eligible: eligible)
            let notes = notes(app)
            let tail = notes.isEmpty ? "" : "; " + notes.joined(separator: "; ")
            if let window, window.apps.contains(app.id) {
                var reason = window.at <= now + 1 ? "due now" : eligible <= now ? "eligible; waiting for the wake window" : "in the next wake window"
                if forUsage && window.at >= late - 1 { reason = "prefetch for usage: data is usually read around then" }
                if window.apps.count > 1 { reason += " (shared with \(window.apps.count - 1) other app\(window.apps.count == 2 ? "" : "s"))" }
                return AppPlan(id: app.id, eligibleAt: eligible, plannedAt: window.at, reason: reason + tail,
                               tolerance: tolerance(app), dueBy: dueBy(app))
            }
            var reason = forUsage ? "prefetch for usage: planned shortly before its data is usually read"
                : "waiting for its \(DurationText.format(interval)) interval"
            if overBudget(app) { reason = "waiting for a window another app opens" }
            let planned = max(late, now)
            return AppPlan(id: app.id, eligibleAt: eligible, plannedAt: overBudget(app) ? nil : planned, reason: reason + tail,
                           tolerance: tolerance(app), dueBy: dueBy(app))
        }
    }
}
