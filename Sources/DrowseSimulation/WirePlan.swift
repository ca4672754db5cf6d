import DrowseCore

/// What a wire benchmark of a scenario replays (`drowse simulate SCENARIO --plan`,
/// deploy/bench-radio.sh): the apps with the k-th handler run of each (its duration and
/// result, the same draws the simulator uses for every strategy), the notifications, and the
/// run starts of the two baselines exactly as the simulator schedules them: naive per-app
/// timers and Android-style batched inexact alarms. Drowse's own runs are not in it: on the
/// wire the real drowsed decides them. Times are seconds after the scenario's start.
///
/// A scenario's `updates` is not modelled: each run's result comes from `results` alone.
/// Runs a naive timer or an alarm would start while offline are left out (no radio).
package struct WirePlan: Sendable {
    package struct Run: Sendable, Equatable {
        package var duration: Double
        package var outcome: Scenario.Outcome
    }

    package struct Start: Sendable, Equatable {
        /// Index into the scenario's apps.
        package var app: Int
        package var at: Double
    }

    package let scenario: Scenario
    /// Per app, its runs in order (as many as it could make in the scenario, and a few more).
    package let runs: [[Run]]
    package let notifications: [Scenario.NotificationEvent]
    package let naive: [Start]
    package let android: [Start]

    package init(_ simulator: Simulator) {
        let s = simulator.scenario
        scenario = s
        runs = s.apps.indices.map { i in
            guard let interval = s.intervalSeconds(s.apps[i]) else { return [] }
            let count = Int((s.duration / interval).rounded(.up)) + 2
            return (0..<count).map { k in
                let d = simulator.draw(app: i, run: k, start: s.start, lastNew: nil)
                return Run(duration: d.duration, outcome: d.outcome)
            }
        }
        notifications = s.notifications(seed: simulator.seed)
        func starts(_ runs: [Simulator.Run]) -> [Start] {
            runs.filter { !$0.offline }.map { Start(app: $0.app, at: $0.start - s.start) }
        }
        naive = starts(simulator.runNaive())
        android = starts(simulator.runAndroid())
    }

    package var json: JSON {
        let s = scenario
        func id(_ i: Int) -> JSON { .string(s.apps[i].id) }
        return .object([
            ("scenario", .string(s.name)), ("duration", JSON(s.duration)), ("seed", JSON(Double(s.seed))), ("radio", .string(s.radio.name)),
            ("scheduler", .object([
                ("minimum_interval", JSON(s.minimumInterval)), ("handler_deadline", JSON(s.handlerDeadline)),
                ("daily_budget", JSON(s.dailyBudget)), ("tolerance", JSON(s.tolerance)),
            ])),
            ("mqtt_keepalive", JSON(s.keepalive)), ("mqtt_max_keepalive", JSON(s.maxKeepalive)), ("max_per_hour", JSON(s.maxPerHour)),
            ("network_changes", JSON(s.network.count)), ("power_changes", JSON(s.power.count)),
            ("apps", .array(s.apps.indices.map { i in
                let a = s.apps[i]
                return .object([
                    ("id", .string(a.id)), ("interval", JSON(s.intervalSeconds(a))), ("size", JSON(a.size)),
                    ("notified", .bool(s.notificationSchedules.contains { $0.app == i })),
                    ("runs", .array(runs[i].map { .array([JSON($0.duration), .string($0.outcome.rawValue)]) })),
                ])
            })),
            ("notifications", .array(notifications.map { .object([("app", id($0.app)), ("at", JSON($0.at))]) })),
            ("naive", .array(naive.map { .object([("app", id($0.app)), ("at", JSON($0.at))]) })),
            ("android", .array(android.map { .object([("app", id($0.app)), ("at", JSON($0.at))]) })),
        ])
    }
}
