import DrowseCore

/// A `drowse simulate` scenario: apps with their fetch intervals, handler durations and
/// results, when their data is used, and a timeline of network and power. Pure data, parsed
/// from TOML (see `deploy/scenarios/`):
///
/// ```toml
/// name = "example"
/// duration = "1d"              # how much virtual time to simulate
/// seed = 42                    # same scenario and seed → same report
/// radio = "lte"                # lte | 3g | wifi | ethernet: the energy model
/// start = 1767571200           # Unix time; default Monday 2026-01-05 00:00 UTC
/// warmup = "4d"                # optional: staleness is measured only after this
///
/// [scheduler]                  # optional, as in drowse.toml
/// minimum_interval = "10m"     # what interval = "minimum" means
/// handler_deadline = "30s"
/// daily_budget = "10m"
///
/// [conditions]
/// battery_low_percent = 20
///
/// [mqtt]                       # optional: the push channel is modelled with this table or
/// keepalive = "240s"           # with [[notification]] tables (drowsed's default keepalive)
///
/// [notifications]
/// max_per_hour = 12            # as in drowse.toml
///
/// [[app]]
/// id = "weather"
/// interval = "15m"             # a duration, "minimum" or "never", like minimum_interval
/// duration = "1s-4s"           # handler run time: fixed ("2s") or a range drawn per run
/// results = ["new", "no"]      # cycled per run: new | no | failed | timeout
/// updates = "30m"              # the source publishes this often: a run finds new data if it
///                              # published since the app last got some (then results give
///                              # only failed | timeout; new and no both mean "it ran")
/// uses = ["07:30", "18:00"]    # daily times (UTC) the app's data is read
/// jitter = "5m"                # each use moves uniformly within ± this
/// use_days = ["weekdays"]      # mon..sun, weekdays, weekend; default every day
/// size = "20K"                 # bytes a run fetches (K, M, G: powers of 1024); only the wire
///                              # benchmark uses it (deploy/bench-radio.sh)
///
/// [[notification]]             # silent notifications to an app (priority 5)
/// app = "weather"              # an [[app]] id
/// every = "20m"                # one this often
/// first = "5m"                 # the first at this offset (default: half of `every`)
/// jitter = "5m"                # each moves uniformly within ± this (under half of `every`)
///
/// [[network]]
/// at = "6h"                    # offset from the start
/// kind = "none"                # none | ethernet | wifi | cellular
///
/// [[power]]
/// at = "12h"
/// source = "battery"           # ac | battery
/// battery = 15
/// ```
///
/// Only the wire benchmark uses `size`. A scenario with `[[notification]]` or `[mqtt]` tables
/// has its push channel simulated (`PushChannel`); without either, none.
package struct Scenario: Sendable, Equatable {
    /// How a handler run ends, as the scenario scripts it.
    package enum Outcome: String, Sendable, Equatable, CaseIterable {
        /// Exit 0: new data.
        case new
        /// Exit 100: no new data.
        case no
        /// Any other exit status.
        case failed
        /// Killed at the handler deadline (runs for the whole deadline, counts as failed).
        case timeout

        /// What the handler's exit says.
        package var result: FetchResult {
            switch self {
            case .new: .newData
            case .no: .noData
            case .failed, .timeout: .failed
            }
        }
    }

    package struct App: Sendable, Equatable {
        package var id: String
        package var interval: FetchInterval
        /// Handler run time in seconds: each run draws uniformly from this range.
        package var duration: ClosedRange<Double>
        /// Cycled: run k ends with `results[k % results.count]`.
        package var results: [Outcome]
        /// Seconds after midnight (UTC) at which the data is read, every day in `useDays`.
        package var uses: [Double]
        /// Each use moves by a uniform draw in ± this many seconds.
        package var jitter: Double
        /// Days of the week with uses, 0 = Monday … 6 = Sunday.
        package var useDays: Set<Int>
        /// How often the app's data source publishes (seconds), if modelled: then a run that
        /// does not fail finds new data exactly when the source published since the app's last
        /// new-data run began, whatever `results` says; nil: `results` decides.
        package var updates: Double?
        /// Bytes a run fetches, if given (the wire benchmark's default otherwise).
        package var size: Int?

        package init(id: String, interval: FetchInterval, duration: ClosedRange<Double> = 2...2, results: [Outcome] = [.new],
                    uses: [Double] = [], jitter: Double = 0, useDays: Set<Int> = Set(0..<7)) {
            self.id = id
            self.interval = interval
            self.duration = duration
            self.results = results
            self.uses = uses
            self.jitter = jitter
            self.useDays = useDays
        }
    }

    package struct NetworkChange: Sendable, Equatable {
        /// Seconds after the start.
        package var at: Double
        package var kind: Conditions.Network
        package init(at: Double, kind: Conditions.Network) {
            self.at = at
            self.kind = kind
        }
    }

    package struct PowerChange: Sendable, Equatable {
        /// Seconds after the start.
        package var at: Double
        package var source: Conditions.PowerSource
        package var battery: Int?
        package init(at: Double, source: Conditions.PowerSource, battery: Int? = nil) {
            self.at = at
            self.source = source
            self.battery = battery
        }
    }

    /// Silent notifications to one app: one every `every` seconds from `first`, each moved by a
    /// uniform draw within ± `jitter`.
    package struct NotificationSchedule: Sendable, Equatable {
        /// Index into `apps`.
        package var app: Int
        package var every: Double
        package var first: Double
        package var jitter: Double
        package init(app: Int, every: Double, first: Double, jitter: Double = 0) {
            self.app = app
            self.every = every
            self.first = first
            self.jitter = jitter
        }
    }

    /// One notification: to which app, and when (seconds after the start).
    package struct NotificationEvent: Sendable, Equatable {
        package var app: Int
        package var at: Double
    }

    /// Monday 2026-01-05 00:00 UTC.
    package static let defaultStart: Double = 1_767_571_200

    package var name: String
    /// Seconds of virtual time.
    package var duration: Double
    package var seed: UInt64
    package var radio: RadioModel
    package var start: Double
    /// Uses before this many seconds after the start feed usage learning but are left out of
    /// the staleness figures (so a report can show the learned behaviour alone).
    package var warmup: Double
    package var minimumInterval: Double
    package var handlerDeadline: Double
    package var dailyBudget: Double
    /// `[scheduler] tolerance`, as a fraction; nil: the default.
    package var tolerance: Double?
    package var batteryLowPercent: Int
    package var apps: [App]
    /// Sorted by `at`. Before the first change the network is the radio's kind.
    package var network: [NetworkChange]
    /// Sorted by `at`. Before the first change the board is on AC power.
    package var power: [PowerChange]
    package var notificationSchedules: [NotificationSchedule] = []
    /// `[mqtt] keepalive`, seconds; nil without an `[mqtt]` table.
    package var mqttKeepalive: Double?
    /// `[notifications] max_per_hour`.
    package var maxPerHour = 12

    /// drowsed's default `[mqtt] keepalive`.
    package static let defaultKeepalive = 240.0
    /// The keepalive the push channel uses.
    package var keepalive: Double { mqttKeepalive ?? Self.defaultKeepalive }
    /// `[mqtt] max_keepalive`, seconds; nil: drowsed's default, 7 × `keepalive`.
    package var mqttMaxKeepalive: Double?
    /// How long the adaptive keepalive may grow (docs/design.md, "The adaptive keepalive").
    package var maxKeepalive: Double { mqttMaxKeepalive ?? Self.defaultMaxKeepalive(keepalive) }
    /// drowsed's default `[mqtt] max_keepalive`: 7 × keepalive in whole seconds, 5 s to 65535 s.
    package static func defaultMaxKeepalive(_ keepalive: Double) -> Double { max(5, min((keepalive * 7).rounded(.up), 65535)) }
    /// Whether the simulation has a push channel: the scenario has notifications or an `[mqtt]` table.
    package var pushChannel: Bool { mqttKeepalive != nil || !notificationSchedules.isEmpty }

    package init(name: String = "scenario", duration: Double, seed: UInt64 = 1, radio: RadioModel = .lte, start: Double = Scenario.defaultStart,
                warmup: Double = 0, minimumInterval: Double = 600, handlerDeadline: Double = 30, dailyBudget: Double = 600,
                batteryLowPercent: Int = 20, apps: [App], network: [NetworkChange] = [], power: [PowerChange] = []) {
        self.name = name
        self.duration = duration
        self.seed = seed
        self.radio = radio
        self.start = start
        self.warmup = warmup
        self.minimumInterval = minimumInterval
        self.handlerDeadline = handlerDeadline
        self.dailyBudget = dailyBudget
        self.batteryLowPercent = batteryLowPercent
        self.apps = apps
        self.network = network.sorted { $0.at < $1.at }
        self.power = power.sorted { $0.at < $1.at }
    }

    /// The network before any `[[network]]` change: what the radio model is for.
    package var initialNetwork: Conditions.Network {
        switch radio.name {
        case "wifi": .wifi
        case "ethernet": .ethernet
        default: .cellular
        }
    }

    /// Every notification of the schedules within the scenario, in time order. Each one's
    /// jitter is drawn from the stream `(seed, 5, schedule, n)`.
    package func notifications(seed: UInt64? = nil) -> [NotificationEvent] {
        var out: [NotificationEvent] = []
        for (k, n) in notificationSchedules.enumerated() {
            var m = 0
            while true {
                let nominal = n.first + Double(m) * n.every
                guard nominal < duration + n.jitter else { break }
                var g = SplitMix64.stream(seed ?? self.seed, 5, UInt64(k), UInt64(m))
                let at = nominal + (n.jitter > 0 ? g.uniform(-n.jitter...n.jitter) : 0)
                if at >= 0 && at < duration { out.append(NotificationEvent(app: n.app, at: at)) }
                m += 1
            }
        }
        return out.sorted { ($0.at, $0.app) < ($1.at, $1.app) }
    }

    /// The interval the planner gets for an app, in seconds (nil: never fetched).
    package func intervalSeconds(_ app: App) -> Double? {
        switch app.interval {
        case .never: nil
        case .minimum: minimumInterval
        case .every(let d): d.seconds
        }
    }
}

// MARK: - Parsing

extension Scenario {
    static let weekdays = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    static let dayNames = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

    /// Parses a scenario file. Errors name the file, the key (`app[2].interval`) and the line.
    package static func parse(_ text: String, file: String) throws(ConfigError) -> Scenario {
        let table: TOMLTable
        do { table = try TOMLParser.parse(text) } catch {
            throw ConfigError(file: file, line: error.line, problem: error.reason)
        }
        var r = TableReader(table, file: file)
        let name = try r.string("name") ?? Self.baseName(file)
        guard let durationText = try r.string("duration") else { throw r.error("duration", "missing (how much time to simulate, e.g. \"1d\")") }
        guard let d = DurationText.parse(durationText), d > .zero else { throw r.error("duration", "'\(durationText)' is not a duration (use e.g. \"1d\", \"14d\", \"6h\")") }
        guard d <= .seconds(366 * 86400) else { throw r.error("duration", "at most a year (366d)") }
        let seed = UInt64(bitPattern: Int64(try r.integer("seed") ?? 1))
        let radioName = try r.string("radio") ?? "lte"
        guard let radio = RadioModel.named(radioName) else { throw r.error("radio", "'\(radioName)' is not one of lte, 3g, wifi, ethernet") }
        let start = Double(try r.integer("start", in: 0...253_402_300_799) ?? Int(Self.defaultStart))
        let warmup = (try r.duration("warmup"))?.seconds ?? 0

        var minimumInterval = 600.0, deadline = 30.0, budget = 600.0
        var tolerance: Double?
        if var s = try r.table("scheduler") {
            tolerance = try s.percent("tolerance", in: 0...100)
            minimumInterval = (try s.duration("minimum_interval", minimum: .seconds(1)))?.seconds ?? minimumInterval
            deadline = (try s.duration("handler_deadline", minimum: .seconds(1)))?.seconds ?? deadline
            budget = (try s.duration("daily_budget", minimum: .seconds(1)))?.seconds ?? budget
            try s.rejectUnknown()
        }
        var batteryLow = 20
        if var c = try r.table("conditions") {
            batteryLow = try c.integer("battery_low_percent", in: 0...100) ?? 20
            try c.rejectUnknown()
        }

        var keepalive: Double?
        var maxKeepalive: Double?
        if var m = try r.table("mqtt") {
            keepalive = (try m.duration("keepalive", minimum: .seconds(1)))?.seconds ?? Self.defaultKeepalive
            maxKeepalive = (try m.duration("max_keepalive", minimum: .seconds(5)))?.seconds
            try m.rejectUnknown()
        }
        var maxPerHour = 12
        if var n = try r.table("notifications") {
            maxPerHour = try n.integer("max_per_hour", in: 1...10000) ?? 12
            try n.rejectUnknown()
        }

        var apps: [App] = []
        for (n, t) in try Self.elements(table, "app", file: file).enumerated() {
            let app = try Self.app(t, prefix: "app[\(n + 1)]", file: file)
            if let twin = apps.first(where: { $0.id == app.id }) {
                throw ConfigError(file: file, key: "app[\(n + 1)].id", line: t.line(of: "id"), problem: "'\(twin.id)' is used by an earlier app")
            }
            apps.append(app)
        }
        guard !apps.isEmpty else { throw ConfigError(file: file, key: "app", problem: "no [[app]] tables: a scenario needs at least one app") }

        let total = d.seconds
        var network: [NetworkChange] = []
        for (n, t) in try Self.elements(table, "network", file: file).enumerated() {
            var e = ElementReader(t, file: file, prefix: "network[\(n + 1)]")
            let at = try e.offset("at", within: total)
            let kindText = try e.required(e.r.string("kind"), "kind", "missing (none, ethernet, wifi or cellular)")
            guard let kind = Conditions.Network(rawValue: kindText) else {
                throw e.r.error("kind", "'\(kindText)' is not one of none, ethernet, wifi, cellular")
            }
            try e.r.rejectUnknown()
            network.append(NetworkChange(at: at, kind: kind))
        }
        var power: [PowerChange] = []
        for (n, t) in try Self.elements(table, "power", file: file).enumerated() {
            var e = ElementReader(t, file: file, prefix: "power[\(n + 1)]")
            let at = try e.offset("at", within: total)
            let sourceText = try e.required(e.r.string("source"), "source", "missing (ac or battery)")
            guard let source = Conditions.PowerSource(rawValue: sourceText), source != .unknown else {
                throw e.r.error("source", "'\(sourceText)' is not one of ac, battery")
            }
            let battery = try e.r.integer("battery", in: 0...100)
            if source == .battery, battery == nil { throw e.missing("battery", "missing: on battery power, say how full it is (0-100)") }
            try e.r.rejectUnknown()
            power.append(PowerChange(at: at, source: source, battery: battery))
        }

        var schedules: [NotificationSchedule] = []
        for (n, t) in try Self.elements(table, "notification", file: file).enumerated() {
            var e = ElementReader(t, file: file, prefix: "notification[\(n + 1)]")
            let id = try e.required(e.r.string("app"), "app", "missing (the id of an [[app]])")
            guard let app = apps.firstIndex(where: { $0.id == id }) else { throw e.r.error("app", "'\(id)' is not the id of an [[app]]") }
            let every = try e.required(e.r.duration("every", minimum: .seconds(1)), "every", "missing (how often, e.g. \"20m\")").seconds
            let first = (try e.r.duration("first"))?.seconds ?? every / 2
            guard first < total else { throw e.r.error("first", "\(DurationText.format(.seconds(first))) is past the end of the scenario") }
            let jitter = (try e.r.duration("jitter"))?.seconds ?? 0
            guard jitter < every / 2 else { throw e.r.error("jitter", "must be under half of every (\(DurationText.format(.seconds(every / 2))))") }
            try e.r.rejectUnknown()
            schedules.append(NotificationSchedule(app: app, every: every, first: first, jitter: jitter))
        }

        for key in table.keys where !r.used.contains(key) && !["app", "network", "power", "notification"].contains(key) {
            throw r.error(key, "unknown key")
        }
        var scenario = Scenario(
            name: name, duration: total, seed: seed, radio: radio, start: start, warmup: warmup, minimumInterval: minimumInterval,
            handlerDeadline: deadline, dailyBudget: budget, batteryLowPercent: batteryLow, apps: apps, network: network, power: power)
        scenario.tolerance = tolerance
        scenario.notificationSchedules = schedules
        scenario.mqttKeepalive = keepalive
        scenario.mqttMaxKeepalive = maxKeepalive
        scenario.maxPerHour = maxPerHour
        return scenario
    }

    static func baseName(_ file: String) -> String {
        var base = file.split(separator: "/").last.map(String.init) ?? file
        if base.hasSuffix(".toml") { base.removeLast(5) }
        return base
    }

    /// The tables of `[[key]]`, or none; a plain `[key]` table is a likely slip, so it is named.
    static func elements(_ table: TOMLTable, _ key: String, file: String) throws(ConfigError) -> [TOMLTable] {
        guard let v = table[key] else { return [] }
        let wrong = ConfigError(file: file, key: key, line: table.line(of: key), problem: "expected [[\(key)]] tables, found \(v.typeName)"
            + (v.typeName == "a table" ? " (write [[\(key)]], with double brackets, once per entry)" : ""))
        guard case .array(let items) = v else { throw wrong }
        var out: [TOMLTable] = []
        for item in items {
            guard case .table(let t) = item else { throw wrong }
            out.append(t)
        }
        return out
    }

    /// Reads one element of an array of tables; a missing key points at the element's header.
    struct ElementReader {
        var r: TableReader
        let headerLine: Int?

        init(_ t: TOMLTable, file: String, prefix: String) {
            r = TableReader(t, file: file, prefix: prefix)
            headerLine = t.headerLine
        }

        func missing(_ key: String, _ problem: String) -> ConfigError {
            ConfigError(file: r.file, key: r.name(key), line: r.table.line(of: key) ?? headerLine, problem: problem)
        }

        func required<T>(_ value: T?, _ key: String, _ problem: String) throws(ConfigError) -> T {
            guard let value else { throw missing(key, problem) }
            return value
        }

        /// An offset from the scenario's start, within its duration.
        mutating func offset(_ key: String, within total: Double) throws(ConfigError) -> Double {
            let d = try required(r.duration(key), key, "missing (an offset from the start, e.g. \"6h\")")
            guard d.seconds <= total else { throw r.error(key, "\(DurationText.format(d)) is past the end of the scenario") }
            return d.seconds
        }
    }

    static func app(_ t: TOMLTable, prefix: String, file: String) throws(ConfigError) -> App {
        var e = ElementReader(t, file: file, prefix: prefix)
        let id = try e.required(e.r.string("id"), "id", "missing")
        guard Identifier.isValid(id) else { throw e.r.error("id", "'\(id)' may hold only letters, digits, '-', '_' and '.'") }

        let intervalText = try e.required(e.r.string("interval"), "interval", "missing (a duration like \"15m\", \"minimum\" or \"never\")")
        let interval: FetchInterval
        switch intervalText {
        case "never": interval = .never
        case "minimum": interval = .minimum
        default:
            guard let d = DurationText.parse(intervalText), d > .zero else {
                throw e.r.error("interval", "'\(intervalText)' is not \"minimum\", \"never\" or a duration like \"15m\"")
            }
            interval = .every(d)
        }

        var duration = 2.0...2.0
        if let text = try e.r.string("duration") {
            let parts = text.split(separator: "-", omittingEmptySubsequences: false).map { DurationText.parse(String($0)) }
            guard (1...2).contains(parts.count), let lo = parts.first!, let hi = parts.last! else {
                throw e.r.error("duration", "'\(text)' is not a duration (\"2s\") or a range (\"1s-4s\")")
            }
            guard lo <= hi else { throw e.r.error("duration", "the range '\(text)' runs backwards") }
            duration = lo.seconds...hi.seconds
        }

        var results: [Outcome] = [.new]
        if let words = try e.r.stringArray("results") {
            guard !words.isEmpty else { throw e.r.error("results", "empty: give at least one of new, no, failed, timeout") }
            results = []
            for w in words {
                guard let o = Outcome(rawValue: w) else { throw e.r.error("results", "'\(w)' is not one of new, no, failed, timeout") }
                results.append(o)
            }
        }

        var uses: [Double] = []
        for text in try e.r.stringArray("uses") ?? [] {
            guard let s = Self.timeOfDay(text) else { throw e.r.error("uses", "'\(text)' is not a time of day like \"07:30\"") }
            uses.append(s)
        }
        let jitter = (try e.r.duration("jitter"))?.seconds ?? 0
        guard jitter < 43200 else { throw e.r.error("jitter", "must be under 12h") }

        var days = Set(0..<7)
        if let words = try e.r.stringArray("use_days") {
            days = []
            for w in words {
                switch w.lowercased() {
                case "weekdays": days.formUnion(0...4)
                case "weekend", "weekends": days.formUnion(5...6)
                case "daily", "all": days.formUnion(0..<7)
                case let day:
                    guard let i = Self.weekdays.indices.first(where: { day == Self.weekdays[$0] || day == Self.dayNames[$0] }) else {
                        throw e.r.error("use_days", "'\(w)' is not a day (mon … sun, weekdays, weekend)")
                    }
                    days.insert(i)
                }
            }
        }
        let updates = try e.r.duration("updates", minimum: .seconds(1))?.seconds
        let size = try Self.size(&e.r, "size")
        try e.r.rejectUnknown()
        var app = App(id: id, interval: interval, duration: duration, results: results, uses: uses, jitter: jitter, useDays: days)
        app.updates = updates
        app.size = size
        return app
    }

    /// A byte count: an integer, or a string with K, M or G (powers of 1024), e.g. "20K".
    static func size(_ r: inout TableReader, _ key: String) throws(ConfigError) -> Int? {
        let bad = r.error(key, "expected a size in bytes: an integer, or a string like \"20K\" or \"2M\" (at most 1G)")
        let bytes: Int64
        switch r.table[key] {
        case nil: return nil
        case .integer(let n)?: _ = try r.integer(key); bytes = Int64(n)
        case .string?:
            guard let text = try r.string(key), case .some(.some(let b)) = AppLimits.parseMemory(text) else { throw bad }
            bytes = b
        default: throw bad
        }
        guard (0...(1 << 30)).contains(bytes) else { throw bad }
        return Int(bytes)
    }

    /// "HH:MM" or "HH:MM:SS" → seconds after midnight.
    static func timeOfDay(_ text: String) -> Double? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard (2...3).contains(parts.count), parts.allSatisfy({ (1...2).contains($0.count) && $0.allSatisfy { $0.isASCII && $0.isNumber } }),
            let h = Int(parts[0]), let m = Int(parts[1]), (0..<24).contains(h), (0..<60).contains(m)
        else { return nil }
        let s = parts.count == 3 ? Int(parts[2]) : 0
        guard let s, (0..<60).contains(s) else { return nil }
        return Double(h * 3600 + m * 60 + s)
    }
}
