import DrowseCore

/// What `drowse simulate` reports: Drowse, Android-style batching and naive timers side by side, in total and per app
/// (SPEC.md, `drowse simulate SCENARIO --json`).
public struct SimulationReport: Sendable, Equatable {
    /// One strategy's figures, for all apps or one.
    public struct Totals: Sendable, Equatable {
        /// Handler runs (for naive timers, including attempts while offline).
        public var fetches = 0
        /// Radio wakes. Per app: the wakes its runs began (shared evenly when several runs
        /// began one at the same instant), so the apps add up to the total.
        public var promotions = 0.0
        /// Promotion, transfer and tail time. Per app: each activity group's time split evenly
        /// among the runs in it.
        public var radioOnSeconds = 0.0
        public var energyJoules = 0.0
        /// Age of the newest new data at each use (counted from the scenario's start before
        /// any), over the uses after the warm-up. nil without uses.
        public var stalenessMedian: Double?
        public var stalenessP90: Double?
        /// Two starts of one app closer than its minimum interval (less 1 ms). Must be 0.
        public var intervalViolations = 0
        /// Drowse only: runs later than the due-by the scheduler stated (eligible + tolerance,
        /// offline time not counted), and apps still not run at the end past theirs. Must be 0.
        public var toleranceViolations: Int?
        /// Uses measured for staleness.
        public var uses = 0
        public var newData = 0
        public var noData = 0
        public var failed = 0
        public var timedOut = 0
        /// Naive timers firing while offline: the handler fails at once, no radio.
        public var offlineAttempts = 0
        public var handlerSeconds = 0.0
        /// The longest online wait between two runs (or the start or end of the scenario) of
        /// an app, divided by its interval; in total the largest over the apps.
        public var maxGapRatio: Double?
        /// The same wait divided by the interval the strategy itself chose after the run that
        /// began it (the planner stretches after no-data and backs off after failures).
        public var maxGapRatioEffective: Double?

        public init() {}

        public var json: JSON {
            .object([
                ("fetches", JSON(fetches)),
                ("promotions", JSON(Self.round(promotions))),
                ("radio_on_seconds", JSON(Self.round(radioOnSeconds))),
                ("energy_joules", JSON(Self.round(energyJoules))),
                ("staleness_median_seconds", JSON(stalenessMedian.map(Self.round))),
                ("staleness_p90_seconds", JSON(stalenessP90.map(Self.round))),
                ("interval_violations", JSON(intervalViolations)),
                ("tolerance_violations", JSON(toleranceViolations)),
                ("uses", JSON(uses)),
                ("new_data", JSON(newData)),
                ("no_data", JSON(noData)),
                ("failed", JSON(failed)),
                ("timed_out", JSON(timedOut)),
                ("offline_attempts", JSON(offlineAttempts)),
                ("handler_seconds", JSON(Self.round(handlerSeconds))),
                ("max_gap_ratio", JSON(maxGapRatio.map(Self.round))),
                ("max_gap_ratio_effective", JSON(maxGapRatioEffective.map(Self.round))),
            ])
        }

        /// Milliseconds are plenty, and keep the JSON short.
        static func round(_ x: Double) -> Double { (x * 1000).rounded() / 1000 }
    }

    public struct AppRow: Sendable, Equatable {
        public var id: String
        /// Seconds; nil for `never`.
        public var interval: Double?
        public var drowse: Totals
        public var naive: Totals
        public var android: Totals
    }

    public var scenario: String
    public var seed: UInt64
    public var radio: String
    public var start: Double
    public var duration: Double
    public var warmup: Double
    public var drowse: Totals
    public var naive: Totals
    /// Android-style inexact-alarm batching: the strong baseline.
    public var android: Totals
    public var apps: [AppRow]

    /// naive ÷ Drowse, nil when Drowse used none.
    public static func ratio(_ naive: Double, _ drowse: Double) -> Double? { drowse > 0 ? naive / drowse : nil }

    public var json: JSON {
        .object([
            ("scenario", .string(scenario)),
            ("seed", seed < 1 << 53 ? JSON(Double(seed)) : .string(String(seed))),  // exact either way
            ("radio", .string(radio)),
            ("start", JSON(start)),
            ("duration_seconds", JSON(duration)),
            ("warmup_seconds", JSON(warmup)),
            ("drowse", drowse.json),
            ("naive", naive.json),
            ("android", android.json),
            ("radio_on_ratio", JSON(Self.ratio(naive.radioOnSeconds, drowse.radioOnSeconds).map(Totals.round))),
            ("promotions_ratio", JSON(Self.ratio(naive.promotions, drowse.promotions).map(Totals.round))),
            ("energy_ratio", JSON(Self.ratio(naive.energyJoules, drowse.energyJoules).map(Totals.round))),
            ("android_radio_on_ratio", JSON(Self.ratio(android.radioOnSeconds, drowse.radioOnSeconds).map(Totals.round))),
            ("apps", .array(apps.map { a in
                .object([("id", .string(a.id)), ("interval_seconds", JSON(a.interval)), ("drowse", a.drowse.json), ("naive", a.naive.json),
                          ("android", a.android.json)])
            })),
        ])
    }
}
