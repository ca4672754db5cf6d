import DrowseCore

/// What `drowse simulate` reports: Drowse, Android-style batching and naive timers side by side, in total and per app
/// (docs/contract.md, `drowse simulate SCENARIO --json`).
package struct SimulationReport: Sendable, Equatable {
    /// What a strategy's push channel did (a scenario with `[[notification]]` or `[mqtt]`
    /// tables); its radio use is in the strategy's totals.
    package struct PushTotals: Sendable, Equatable {
        /// Notifications the provider published, and handler runs they started.
        package var published = 0
        package var handled = 0
        /// Held back by `max_per_hour` before they ran (Drowse only).
        package var deferred = 0
        /// PINGREQs sent.
        package var pings = 0
        /// Sessions the broker accepted: 1, and one more per reconnect.
        package var sessions = 0
        package var handlerSeconds = 0.0
        /// Wakes of pings alone: promotions whose radio-on period carried nothing but the keepalive.
        package var keepaliveWakes = 0
        package var keepaliveRadioOnSeconds = 0.0
        package var keepaliveJoules = 0.0

        package init() {}

        package var json: JSON {
            .object([
                ("notifications_published", JSON(published)), ("notifications_handled", JSON(handled)),
                ("notifications_deferred", JSON(deferred)), ("pings", JSON(pings)), ("sessions", JSON(sessions)),
                ("handler_seconds", JSON(Totals.round(handlerSeconds))), ("keepalive_wakes", JSON(keepaliveWakes)),
                ("keepalive_radio_on_seconds", JSON(Totals.round(keepaliveRadioOnSeconds))),
                ("keepalive_energy_joules", JSON(Totals.round(keepaliveJoules))),
            ])
        }
    }

    /// One strategy's figures, for all apps or one.
    package struct Totals: Sendable, Equatable {
        /// Handler runs (for naive timers, including attempts while offline).
        package var fetches = 0
        /// Radio wakes. Per app: the wakes its runs began (shared evenly when several runs
        /// began one at the same instant), so the apps add up to the total.
        package var promotions = 0.0
        /// Promotion, transfer and tail time. Per app: each activity group's time split evenly
        /// among the runs in it.
        package var radioOnSeconds = 0.0
        package var energyJoules = 0.0
        /// Age of the newest new data at each use (counted from the scenario's start before
        /// any), over the uses after the warm-up. nil without uses.
        package var stalenessMedian: Double?
        package var stalenessP90: Double?
        /// Two starts of one app closer than its minimum interval (less 1 ms). Must be 0.
        package var intervalViolations = 0
        /// Drowse only: runs later than the due-by the scheduler stated (eligible + tolerance,
        /// offline time not counted), and apps still not run at the end past theirs. Must be 0.
        package var toleranceViolations: Int?
        /// Uses measured for staleness.
        package var uses = 0
        package var newData = 0
        package var noData = 0
        package var failed = 0
        package var timedOut = 0
        /// Naive timers firing while offline: the handler fails at once, no radio.
        package var offlineAttempts = 0
        package var handlerSeconds = 0.0
        /// The longest online wait between two runs (or the start or end of the scenario) of
        /// an app, divided by its interval; in total the largest over the apps.
        package var maxGapRatio: Double?
        /// The same wait divided by the interval the strategy itself chose after the run that
        /// began it (the planner stretches after no-data and backs off after failures).
        package var maxGapRatioEffective: Double?
        /// In total, with a push channel: what it did. Per app the figures are its fetches'.
        package var push: PushTotals?

        package init() {}

        package var json: JSON {
            var members: [(String, JSON)] = [
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
            ]
            if let push { members.append(("push", push.json)) }
            return .object(members)
        }

        /// Milliseconds are plenty, and keep the JSON short.
        static func round(_ x: Double) -> Double { (x * 1000).rounded() / 1000 }
    }

    package struct AppRow: Sendable, Equatable {
        package var id: String
        /// Seconds; nil for `never`.
        package var interval: Double?
        package var drowse: Totals
        package var naive: Totals
        package var android: Totals
    }

    package var scenario: String
    package var seed: UInt64
    package var radio: String
    package var start: Double
    package var duration: Double
    package var warmup: Double
    /// The wire benchmark's compression this report predicts (`drowse simulate --compress K`).
    package var compress: Double?
    package var drowse: Totals
    package var naive: Totals
    /// Android-style inexact-alarm batching: the strong baseline.
    package var android: Totals
    package var apps: [AppRow]

    /// naive ÷ Drowse, nil when Drowse used none.
    package static func ratio(_ naive: Double, _ drowse: Double) -> Double? { drowse > 0 ? naive / drowse : nil }

    package var json: JSON {
        var members: [(String, JSON)] = [
            ("scenario", .string(scenario)),
            ("seed", seed < 1 << 53 ? JSON(Double(seed)) : .string(String(seed))),  // exact either way
            ("radio", .string(radio)),
            ("start", JSON(start)),
            ("duration_seconds", JSON(duration)),
            ("warmup_seconds", JSON(warmup)),
        ]
        if let compress { members.append(("compress", JSON(compress))) }
        members += [
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
        ]
        return .object(members)
    }
}
