/// The scheduler's events and actions as JSON, one line each: `drowsed --scheduler-trace FILE`
/// writes what it fed the scheduler and what it got back, and `drowse simulate --replay FILE`
/// feeds the same events through the simulator's driver and checks it gets the same actions.
/// Times are written with full precision (shortest round-trip form), so a replay is exact.
extension FetchScheduler {
    /// The first line of a trace: the policy and the time zone the scheduler was made with.
    package var traceHeader: JSON {
        .object([
            ("type", "config"),
            ("tolerance_fraction", JSON(policy.toleranceFraction)), ("max_tolerance", JSON(policy.maxTolerance)),
            ("max_backoff_doublings", JSON(policy.maxBackoffDoublings)), ("max_no_data_stretch", JSON(policy.maxNoDataStretch)),
            ("daily_budget", JSON(policy.dailyBudget)), ("usage_lead", JSON(policy.usageLead)),
            ("low_battery_stretch", JSON(policy.lowBatteryStretch)), ("utc_offset", JSON(utcOffset)),
        ])
    }

    /// A scheduler made as the one that wrote `header`.
    package static func fromTrace(header: JSON) throws(TraceError) -> FetchScheduler {
        guard header["type"]?.stringValue == "config" else { throw TraceError("the first line is not a scheduler config") }
        func number(_ key: String) throws(TraceError) -> Double {
            guard let v = header[key]?.doubleValue, v.isFinite else { throw TraceError("config: '\(key)' is missing") }
            return v
        }
        var policy = FetchPlanner()
        policy.toleranceFraction = try number("tolerance_fraction")
        policy.maxTolerance = try number("max_tolerance")
        policy.maxBackoffDoublings = Int(saturating: try number("max_backoff_doublings"), rounding: .down)
        policy.maxNoDataStretch = try number("max_no_data_stretch")
        policy.dailyBudget = try number("daily_budget")
        policy.usageLead = try number("usage_lead")
        policy.lowBatteryStretch = try number("low_battery_stretch")
        return FetchScheduler(policy: policy, utcOffset: try number("utc_offset"))
    }

    package struct TraceError: Error, Sendable, Equatable, CustomStringConvertible {
        package var description: String
        package init(_ d: String) { description = d }
    }
}

extension FetchScheduler.Conditions {
    var json: JSON {
        .object([("online", .bool(online)), ("low_battery", .bool(lowBattery)), ("radio_tail", JSON(radioTail))])
    }

    init(json j: JSON) throws(FetchScheduler.TraceError) {
        guard let online = j["online"]?.boolValue, let low = j["low_battery"]?.boolValue, let tail = j["radio_tail"]?.doubleValue else {
            throw .init("conditions: expected online, low_battery, radio_tail")
        }
        self.init(online: online, lowBattery: low, radioTail: tail)
    }
}

extension FetchScheduler.Record {
    var json: JSON {
        .object([
            ("last_fetch", JSON(lastFetch)), ("last_result", JSON(lastResult?.rawValue)),
            ("consecutive_failures", JSON(consecutiveFailures)), ("consecutive_no_data", JSON(consecutiveNoData)),
            ("last_timed_out", .bool(lastTimedOut)),
        ])
    }

    init(json j: JSON) throws(FetchScheduler.TraceError) {
        var r = FetchScheduler.Record()
        r.lastFetch = j["last_fetch"]?.doubleValue
        r.lastResult = j["last_result"]?.stringValue.flatMap(FetchResult.init(rawValue:))
        r.consecutiveFailures = j["consecutive_failures"]?.intValue ?? 0
        r.consecutiveNoData = j["consecutive_no_data"]?.intValue ?? 0
        r.lastTimedOut = j["last_timed_out"]?.boolValue ?? false
        self = r
    }
}

extension FetchScheduler.App {
    var json: JSON {
        .object([
            ("id", .string(id)), ("interval", JSON(interval)), ("registered_at", JSON(registeredAt)), ("record", record.json),
            ("recent_runs", .array(recentRuns.map { .array([JSON($0.start), JSON($0.seconds)]) })),
            ("uses", .array(uses.map { JSON($0) })),
        ])
    }

    init(json j: JSON) throws(FetchScheduler.TraceError) {
        guard let id = j["id"]?.stringValue, let registered = j["registered_at"]?.doubleValue, let record = j["record"] else {
            throw .init("app: expected id, registered_at, record")
        }
        let runs = (j["recent_runs"]?.arrayValue ?? []).compactMap { r -> FetchScheduler.Span? in
            guard let pair = r.arrayValue, pair.count == 2, let s = pair[0].doubleValue, let d = pair[1].doubleValue else { return nil }
            return FetchScheduler.Span(start: s, seconds: d)
        }
        self.init(id: id, interval: j["interval"]?.doubleValue, registeredAt: registered, record: try .init(json: record),
                  recentRuns: runs, uses: (j["uses"]?.arrayValue ?? []).compactMap(\.doubleValue))
    }
}

extension FetchScheduler.Event {
    package var json: JSON {
        switch self {
        case let .started(apps, c, now):
            .object([("type", "started"), ("now", JSON(now)), ("conditions", c.json), ("apps", .array(apps.map(\.json)))])
        case let .appsChanged(apps, now):
            .object([("type", "apps_changed"), ("now", JSON(now)), ("apps", .array(apps.map(\.json)))])
        case let .fetchRequested(app, now): .object([("type", "fetch_requested"), ("app", .string(app)), ("now", JSON(now))])
        case let .fetchAbandoned(app, now): .object([("type", "fetch_abandoned"), ("app", .string(app)), ("now", JSON(now))])
        case let .handlerEnded(app, fetch, start, end):
            .object([
                ("type", "handler_ended"), ("app", .string(app)),
                ("fetch", fetch.map { .object([("result", .string($0.result.rawValue)), ("timed_out", .bool($0.timedOut))]) } ?? .null),
                ("started_at", JSON(start)), ("ended_at", JSON(end)),
            ])
        case let .conditionsChanged(c, now): .object([("type", "conditions_changed"), ("conditions", c.json), ("now", JSON(now))])
        case let .radioUsed(now): .object([("type", "radio_used"), ("now", JSON(now))])
        case let .used(app, now): .object([("type", "used"), ("app", .string(app)), ("now", JSON(now))])
        case let .timerFired(now): .object([("type", "timer_fired"), ("now", JSON(now))])
        case let .timeOfDayChanged(offset, now): .object([("type", "time_of_day_changed"), ("utc_offset", JSON(offset)), ("now", JSON(now))])
        }
    }

    package init(json j: JSON) throws(FetchScheduler.TraceError) {
        let type = j["type"]?.stringValue ?? ""
        let now = j["now"]?.doubleValue
        func need<T>(_ v: T?, _ what: String) throws(FetchScheduler.TraceError) -> T {
            guard let v else { throw .init("\(type): '\(what)' is missing") }
            return v
        }
        switch type {
        case "started":
            var apps: [FetchScheduler.App] = []
            for a in try need(j["apps"]?.arrayValue, "apps") { apps.append(try .init(json: a)) }
            self = .started(apps: apps, conditions: try .init(json: try need(j["conditions"], "conditions")), now: try need(now, "now"))
        case "apps_changed":
            var apps: [FetchScheduler.App] = []
            for a in try need(j["apps"]?.arrayValue, "apps") { apps.append(try .init(json: a)) }
            self = .appsChanged(apps: apps, now: try need(now, "now"))
        case "fetch_requested": self = .fetchRequested(app: try need(j["app"]?.stringValue, "app"), now: try need(now, "now"))
        case "fetch_abandoned": self = .fetchAbandoned(app: try need(j["app"]?.stringValue, "app"), now: try need(now, "now"))
        case "handler_ended":
            var ending: FetchScheduler.FetchEnding?
            if let f = j["fetch"], !f.isNull {
                ending = .init(result: try need(f["result"]?.stringValue.flatMap(FetchResult.init(rawValue:)), "fetch.result"),
                               timedOut: f["timed_out"]?.boolValue ?? false)
            }
            self = .handlerEnded(app: try need(j["app"]?.stringValue, "app"), fetch: ending,
                                 startedAt: try need(j["started_at"]?.doubleValue, "started_at"),
                                 endedAt: try need(j["ended_at"]?.doubleValue, "ended_at"))
        case "conditions_changed":
            self = .conditionsChanged(try .init(json: try need(j["conditions"], "conditions")), now: try need(now, "now"))
        case "radio_used": self = .radioUsed(now: try need(now, "now"))
        case "used": self = .used(app: try need(j["app"]?.stringValue, "app"), now: try need(now, "now"))
        case "timer_fired": self = .timerFired(now: try need(now, "now"))
        case "time_of_day_changed":
            self = .timeOfDayChanged(utcOffset: try need(j["utc_offset"]?.doubleValue, "utc_offset"), now: try need(now, "now"))
        default: throw .init("unknown event type '\(type)'")
        }
    }
}

extension FetchScheduler.Action {
    package var json: JSON {
        switch self {
        case let .startFetch(apps, trigger):
            .object([("type", "start_fetch"), ("apps", .array(apps.map { .string($0) })), ("trigger", .string(trigger.rawValue))])
        case let .refuseFetch(app, reason): .object([("type", "refuse_fetch"), ("app", .string(app)), ("reason", .string(reason))])
        case let .setTimer(at): .object([("type", "set_timer"), ("at", JSON(at))])
        case .cancelTimer: .object([("type", "cancel_timer")])
        case let .save(app, record): .object([("type", "save"), ("app", .string(app)), ("record", record.json)])
        case let .explain(app, reason): .object([("type", "explain"), ("app", .string(app)), ("reason", .string(reason))])
        }
    }
}
