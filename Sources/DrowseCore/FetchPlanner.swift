/// Plans background fetches into shared wake windows. Pure: no I/O, time is passed in.
///
/// Each app becomes *eligible* its effective interval after its last fetch and may wait a
/// *tolerance* beyond that. The next window opens at the last moment that keeps every
/// eligible-soon app within its tolerance; every app eligible by then runs in it, so the
/// radio wakes once for all of them. No app runs before it is eligible.
public struct FetchPlanner: Sendable {
    public struct AppInput: Sendable, Equatable {
        public var id: String
        /// nil: never fetched in the background.
        public var interval: Duration?
        public var lastFetch: Double?
        /// Failures (including deadline kills) since the last success.
        public var consecutiveFailures: Int
        /// When the app was first seen, so a brand-new app is eligible at once.
        public var registeredAt: Double

        public init(id: String, interval: Duration?, lastFetch: Double?, consecutiveFailures: Int = 0, registeredAt: Double) {
            self.id = id
            self.interval = interval
            self.lastFetch = lastFetch
            self.consecutiveFailures = consecutiveFailures
            self.registeredAt = registeredAt
        }
    }

    /// One app's place in the plan, with the reason a person can read.
    public struct AppPlan: Sendable, Equatable {
        public var id: String
        public var eligibleAt: Double?
        public var plannedAt: Double?
        public var reason: String
    }

    public struct Window: Sendable, Equatable {
        public var at: Double
        public var apps: [String]
    }

    /// Longest tolerance, so that long intervals do not drift by hours.
    public var maxTolerance: Double = 900
    /// Failures stretch the interval by 2^n, at most this many times.
    public var maxBackoffDoublings: Int = 5

    public init() {}

    public func effectiveInterval(_ app: AppInput) -> Double? {
        guard let interval = app.interval else { return nil }
        let doublings = min(app.consecutiveFailures, maxBackoffDoublings)
        return interval.seconds * Double(1 << doublings)
    }

    public func eligibleAt(_ app: AppInput) -> Double? {
        guard let interval = effectiveInterval(app) else { return nil }
        guard let last = app.lastFetch else { return app.registeredAt }
        return last + interval
    }

    public func tolerance(_ app: AppInput) -> Double {
        guard let interval = app.interval?.seconds else { return 0 }
        return min(max(interval * 0.2, 1), maxTolerance)
    }

    /// The next window at or after `now`, or nil when no app fetches in the background.
    public func nextWindow(_ apps: [AppInput], now: Double) -> Window? {
        let scheduled = apps.compactMap { app -> (AppInput, Double)? in eligibleAt(app).map { (app, $0) } }
        guard !scheduled.isEmpty else { return nil }
        // Tolerances are anchored at eligibility, so re-planning never pushes an overdue app later.
        let latest = scheduled.map { $0.1 + tolerance($0.0) }.min()!
        let windowAt = max(now, latest)
        let members = scheduled.filter { $0.1 <= windowAt }.map(\.0.id).sorted()
        return Window(at: windowAt, apps: members)
    }

    /// Every app's plan, for `drowse apps` and `apps show`.
    public func plans(_ apps: [AppInput], now: Double) -> [AppPlan] {
        let window = nextWindow(apps, now: now)
        return apps.map { app in
            guard let interval = app.interval else {
                return AppPlan(id: app.id, eligibleAt: nil, plannedAt: nil, reason: "background fetch is off (minimum_interval = never)")
            }
            let eligible = eligibleAt(app)!
            if let window, window.apps.contains(app.id) {
                var reason = eligible <= now ? "due now" : "in the next wake window"
                if window.apps.count > 1 { reason += " (shared with \(window.apps.count - 1) other app\(window.apps.count == 2 ? "" : "s"))" }
                if app.consecutiveFailures > 0 { reason += ", backing off after \(app.consecutiveFailures) failure\(app.consecutiveFailures == 1 ? "" : "s")" }
                return AppPlan(id: app.id, eligibleAt: eligible, plannedAt: window.at, reason: reason)
            }
            var reason = "waiting for its \(DurationText.format(interval)) interval"
            if app.consecutiveFailures > 0 {
                reason = "backing off after \(app.consecutiveFailures) failure\(app.consecutiveFailures == 1 ? "" : "s") (interval stretched to \(DurationText.format(.seconds(effectiveInterval(app)!))))"
            }
            let planned = max(eligible + tolerance(app), now)
            return AppPlan(id: app.id, eligibleAt: eligible, plannedAt: planned, reason: reason)
        }
    }
}
