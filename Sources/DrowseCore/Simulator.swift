/// `drowse simulate`: runs a `Scenario` on a virtual clock twice — once with the real
/// `FetchPlanner`, driven the way `drowsed` drives it, and once with naive independent
/// per-app timers — and measures both the same way. Pure and deterministic: every random
/// draw comes from `SplitMix64` streams of the seed.
///
/// What both strategies share, so that only the scheduling differs:
/// - the k-th run of an app takes the same time and ends with the same result (the app's
///   `results` cycled, durations drawn from the stream `(seed, 1, app, k)`); a run that would
///   last the handler deadline or longer is killed there and counts as a timeout;
/// - the same uses of each app's data (times of day, jittered by `(seed, 2, app, day, use)`);
/// - the same network and power timeline.
///
/// How `drowsed` is mirrored (Agent+Fetch.swift): the planner sees every app that is not
/// running, with `lastFetch` = the start of its last run, its result counters, `runtimeToday`
/// (handler seconds of runs started in the last 24 h), `predictedUse` (its usage model's next
/// use) and `radioAwakeUntil` (start and end of every run plus the radio's tail). The one
/// planned window is remade where `drowsed` calls `replan()` — when runs start and end, after
/// a window, when conditions change — and at the window every app with
/// `eligibleAt <= now + 1 ms` starts. Offline there is no window.
public struct Simulator: Sendable {
    /// What the simulator asks of a planner: `FetchPlanner` itself, or a variant under study
    /// (so a proposed change can be measured before it is made).
    public protocol Planner: Sendable {
        var radioAwakeUntil: Double? { get set }
        var lowBattery: Bool { get set }
        func nextWindow(_ apps: [FetchPlanner.AppInput], now: Double) -> FetchPlanner.Window?
        func eligibleAt(_ app: FetchPlanner.AppInput) -> Double?
        func effectiveInterval(_ app: FetchPlanner.AppInput) -> Double?
    }

    /// One handler run.
    public struct Run: Sendable, Equatable {
        /// Index into `scenario.apps`.
        public var app: Int
        public var start: Double
        public var end: Double
        public var outcome: Scenario.Outcome
        /// A naive timer fired while offline: the handler failed at once and used no radio.
        public var offline: Bool
        /// The interval the strategy waits after this run: the planner's effective interval
        /// (stretched by no-data, backed off by failures); for naive timers the configured one.
        public var nextInterval: Double?
    }

    /// One read of an app's data.
    public struct Use: Sendable, Equatable {
        public var app: Int
        public var at: Double
    }

    public let scenario: Scenario
    public let seed: UInt64

    public init(_ scenario: Scenario, seed: UInt64? = nil) {
        self.scenario = scenario
        self.seed = seed ?? scenario.seed
    }

    var end: Double { scenario.start + scenario.duration }

    /// The planner as `drowsed` configures it for this scenario.
    public var planner: FetchPlanner {
        var p = FetchPlanner()
        p.dailyBudget = scenario.dailyBudget
        return p
    }

    // MARK: - Shared inputs

    /// How the k-th run of an app goes.
    func draw(app: Int, run k: Int) -> (duration: Double, outcome: Scenario.Outcome) {
        let a = scenario.apps[app]
        var outcome = a.results[k % a.results.count]
        var g = SplitMix64.stream(seed, 1, UInt64(app), UInt64(k))
        var d = g.uniform(a.duration)
        if outcome == .timeout || d >= scenario.handlerDeadline {
            outcome = .timeout
            d = scenario.handlerDeadline
        }
        return (d, outcome)
    }

    /// Every use of every app's data within the scenario, in time order.
    public func uses() -> [Use] {
        var out: [Use] = []
        let firstDay = (scenario.start / 86400).rounded(.down)
        let lastDay = (end / 86400).rounded(.down)
        for (i, app) in scenario.apps.enumerated() where !app.uses.isEmpty {
            var day = firstDay
            while day <= lastDay {
                // 1970-01-01 was a Thursday; 0 = Monday.
                let weekday = (Int(day) + 3) % 7
                if app.useDays.contains(weekday) {
                    for (u, time) in app.uses.enumerated() {
                        var g = SplitMix64.stream(seed, 2, UInt64(i), UInt64(day), UInt64(u))
                        let at = day * 86400 + time + (app.jitter > 0 ? g.uniform(-app.jitter...app.jitter) : 0)
                        if at >= scenario.start && at < end { out.append(Use(app: i, at: at)) }
                    }
                }
                day += 1
            }
        }
        return out.sorted { ($0.at, $0.app) < ($1.at, $1.app) }
    }

    /// The network at absolute time `t`.
    func network(at t: Double) -> Conditions.Network {
        scenario.network.last(where: { scenario.start + $0.at <= t })?.kind ?? scenario.initialNetwork
    }

    /// Offline stretches, in absolute time.
    func offlineIntervals() -> [(from: Double, to: Double)] {
        var out: [(from: Double, to: Double)] = []
        var since: Double? = scenario.initialNetwork == .none ? scenario.start : nil
        for c in scenario.network {
            let t = scenario.start + c.at
            if c.kind == .none, since == nil { since = t }
            if c.kind != .none, let s = since { out.append((s, t)); since = nil }
        }
        if let s = since { out.append((s, .infinity)) }
        return out
    }

    // MARK: - Drowse

    /// The runs `drowsed` makes with the real planner, in start order.
    public func runDrowse() -> [Run] { runDrowse(planner: planner) }

    /// The runs with another planner (configured by the caller, e.g. its daily budget).
    public func runDrowse<P: Planner>(planner: P) -> [Run] {
        let s = scenario
        let n = s.apps.count
        var planner = planner
        let tail = s.radio.tailSeconds
        var inputs = s.apps.map { app in
            FetchPlanner.AppInput(id: app.id, interval: s.intervalSeconds(app).map { Duration.milliseconds(Int64(($0 * 1000).rounded())) },
                                  lastFetch: nil, registeredAt: s.start)
        }
        var usage = Array(repeating: UsageModel(), count: n)
        // usage.nextUse(after:) stays the same until that use passes or a use is recorded.
        var predicted: [Double?] = Array(repeating: nil, count: n)
        var predictedValid = Array(repeating: false, count: n)
        var running: [Int: Int] = [:]  // app → index in runs
        var index: [String: Int] = [:]
        for (i, app) in s.apps.enumerated() { index[app.id] = i }
        var runCount = Array(repeating: 0, count: n)
        var recent: [[(start: Double, seconds: Double)]] = Array(repeating: [], count: n)
        var runs: [Run] = []
        let uses = self.uses()
        var ui = 0, ni = 0, pi = 0
        var network = s.initialNetwork
        var power = (source: Conditions.PowerSource.ac, battery: Int?.none)

        func plannable(_ t: Double) -> [FetchPlanner.AppInput] {
            (0..<n).filter { running[$0] == nil }.map { i in
                var input = inputs[i]
                recent[i].removeAll { $0.start < t - 86400 }
                input.runtimeToday = recent[i].reduce(0) { $0 + $1.seconds }
                if !predictedValid[i] || (predicted[i].map { t >= $0 } ?? true) {
                    predicted[i] = usage[i].nextUse(after: t)
                    predictedValid[i] = true
                }
                input.predictedUse = predicted[i]
                return input
            }
        }
        func awake(until t: Double) { planner.radioAwakeUntil = max(planner.radioAwakeUntil ?? -.infinity, t + tail) }

        // The one planned window, remade where drowsed calls replan(): at a run's start and end,
        // after a window and when conditions change — not when data is used, nor as time passes.
        var planned: FetchPlanner.Window?
        func replan(_ t: Double) {
            planner.lowBattery = power.source == .battery && (power.battery ?? 100) < s.batteryLowPercent
            planned = network != .none ? planner.nextWindow(plannable(t), now: t) : nil
        }

        var t = s.start
        replan(t)
        while true {
            let nextChange = min(ni < s.network.count ? s.start + s.network[ni].at : .infinity,
                                 pi < s.power.count ? s.start + s.power[pi].at : .infinity)
            let nextEnd = running.values.map { runs[$0].end }.min() ?? .infinity
            let nextUse = ui < uses.count ? uses[ui].at : .infinity
            let nextWindow = planned?.at ?? .infinity
            let next = min(nextChange, nextEnd, nextUse, nextWindow)
            guard next < end else { break }
            t = next
            if nextChange == t {
                while ni < s.network.count, s.start + s.network[ni].at <= t { network = s.network[ni].kind; ni += 1 }
                while pi < s.power.count, s.start + s.power[pi].at <= t { power = (s.power[pi].source, s.power[pi].battery); pi += 1 }
                replan(t)
                continue
            }
            if nextEnd == t {
                for i in running.keys.sorted() where runs[running[i]!].end <= t {
                    let r = runs[running[i]!]
                    // As the store records a run (Store+Apps.swift).
                    inputs[i].lastFetch = r.start
                    switch r.outcome {
                    case .new: inputs[i].consecutiveFailures = 0; inputs[i].consecutiveNoData = 0
                    case .no: inputs[i].consecutiveFailures = 0; inputs[i].consecutiveNoData += 1
                    case .failed, .timeout: inputs[i].consecutiveFailures += 1
                    }
                    inputs[i].lastTimedOut = r.outcome == .timeout
                    recent[i].append((r.start, r.end - r.start))
                    runs[running[i]!].nextInterval = planner.effectiveInterval(inputs[i])
                    running[i] = nil
                    awake(until: t)
                }
                replan(t)
                continue
            }
            if nextUse == t {
                while ui < uses.count, uses[ui].at <= t {
                    usage[uses[ui].app].record(uses[ui].at)
                    predictedValid[uses[ui].app] = false
                    ui += 1
                }
                continue
            }
            // The window opens: every app eligible now runs, together.
            for input in plannable(t) {
                guard let e = planner.eligibleAt(input), e <= t + 0.001, let i = index[input.id] else { continue }
                let (d, outcome) = draw(app: i, run: runCount[i])
                runCount[i] += 1
                running[i] = runs.count
                runs.append(Run(app: i, start: t, end: t + d, outcome: outcome, offline: false))
                awake(until: t)
            }
            replan(t)
        }
        return runs
    }

    // MARK: - Naive timers

    /// Each app on its own timer: a random phase in [0, interval), then every interval, online
    /// or not (offline the handler fails at once). A timer does not start a run while the
    /// previous one still runs (as a systemd timer would not).
    public func runNaive() -> [Run] {
        var runs: [Run] = []
        for (i, app) in scenario.apps.enumerated() {
            guard let interval = scenario.intervalSeconds(app) else { continue }
            var g = SplitMix64.stream(seed, 3, UInt64(i))
            let phase = g.unit() * interval
            var m = 0.0, k = 0
            var busyUntil = -Double.infinity
            while true {
                let t = scenario.start + phase + m * interval
                guard t < end else { break }
                m += 1
                guard t >= busyUntil else { continue }
                if network(at: t) == .none {
                    runs.append(Run(app: i, start: t, end: t, outcome: .failed, offline: true, nextInterval: interval))
                    continue
                }
                let (d, outcome) = draw(app: i, run: k)
                k += 1
                busyUntil = t + d
                runs.append(Run(app: i, start: t, end: t + d, outcome: outcome, offline: false, nextInterval: interval))
            }
        }
        return runs.sorted { ($0.start, $0.app) < ($1.start, $1.app) }
    }

    // MARK: - Report

    public func report() -> SimulationReport { report(planner: planner) }

    public func report<P: Planner>(planner: P) -> SimulationReport {
        let uses = self.uses()
        let drowse = measure(runDrowse(planner: planner), uses: uses)
        let naive = measure(runNaive(), uses: uses)
        return SimulationReport(
            scenario: scenario.name, seed: seed, radio: scenario.radio.name, start: scenario.start, duration: scenario.duration,
            warmup: scenario.warmup, drowse: drowse.total, naive: naive.total,
            apps: scenario.apps.indices.map { i in
                SimulationReport.AppRow(id: scenario.apps[i].id, interval: scenario.intervalSeconds(scenario.apps[i]),
                                        drowse: drowse.apps[i], naive: naive.apps[i])
            })
    }

    /// The figures for one strategy's runs: per app and in total.
    func measure(_ runs: [Run], uses: [Use]) -> (total: SimulationReport.Totals, apps: [SimulationReport.Totals]) {
        let n = scenario.apps.count
        var apps = Array(repeating: SimulationReport.Totals(), count: n)
        var stale: [[Double]] = Array(repeating: [], count: n)
        let offline = offlineIntervals()
        func onlineSeconds(_ a: Double, _ b: Double) -> Double {
            var off = 0.0
            for o in offline { off += max(0, min(b, o.to) - max(a, o.from)) }
            return b - a - off
        }

        for i in 0..<n {
            let mine = runs.filter { $0.app == i }
            var t = SimulationReport.Totals()
            t.fetches = mine.count
            for r in mine {
                if r.offline { t.offlineAttempts += 1; continue }
                t.handlerSeconds += r.end - r.start
                switch r.outcome {
                case .new: t.newData += 1
                case .no: t.noData += 1
                case .failed: t.failed += 1
                case .timeout: t.timedOut += 1
                }
            }
            if let interval = scenario.intervalSeconds(scenario.apps[i]) {
                for (a, b) in zip(mine, mine.dropFirst()) where b.start - a.start < interval - 0.001 { t.intervalViolations += 1 }
                // The longest wait for data while online, against the interval and against what the strategy itself asked.
                let real = mine.filter { !$0.offline }
                var previous: (at: Double, wait: Double) = (scenario.start, interval)
                var worst = 0.0, worstEffective = 0.0
                for point in real.map({ ($0.start, $0.nextInterval ?? interval) }) + [(end, interval)] {
                    let gap = onlineSeconds(previous.at, point.0)
                    worst = max(worst, gap / interval)
                    worstEffective = max(worstEffective, gap / previous.wait)
                    previous = (point.0, point.1)
                }
                t.maxGapRatio = worst
                t.maxGapRatioEffective = worstEffective
            }
            // Staleness at each use: since the newest new-data run that had finished by then.
            let fresh = mine.filter { $0.outcome == .new && !$0.offline }.map(\.end).sorted()
            for use in uses where use.app == i && use.at >= scenario.start + scenario.warmup {
                let last = Self.lastAtOrBefore(fresh, use.at) ?? scenario.start
                stale[i].append(use.at - last)
            }
            t.uses = stale[i].count
            t.stalenessMedian = Self.percentile(stale[i], 0.5)
            t.stalenessP90 = Self.percentile(stale[i], 0.9)
            apps[i] = t
        }

        // Radio: the whole by the model; each app's share by activity group (one promotion
        // and its tail): the group's promotion goes to the app whose run began it (split among
        // runs that began it together), its radio time and energy are split evenly among its runs.
        let radio = scenario.radio
        let active = runs.filter { !$0.offline }.sorted { ($0.start, $0.app) < ($1.start, $1.app) }
        var group: [Run] = []
        var tailUntil = -Double.infinity
        func close() {
            guard let first = group.first else { return }
            let u = radio.usage(of: group.map { ($0.start, $0.end) })
            let openers = group.filter { $0.start == first.start }
            for r in openers { apps[r.app].promotions += Double(u.promotions) / Double(openers.count) }
            for r in group {
                apps[r.app].radioOnSeconds += u.radioOnSeconds / Double(group.count)
                apps[r.app].energyJoules += u.joules / Double(group.count)
            }
            group = []
        }
        for r in active {
            if r.start > tailUntil { close() }
            group.append(r)
            tailUntil = max(tailUntil, r.end + radio.tailSeconds)
        }
        close()

        var total = SimulationReport.Totals()
        let u = radio.usage(of: active.map { ($0.start, $0.end) })
        total.promotions = Double(u.promotions)
        total.radioOnSeconds = u.radioOnSeconds
        total.energyJoules = u.joules
        for a in apps {
            total.fetches += a.fetches
            total.intervalViolations += a.intervalViolations
            total.uses += a.uses
            total.newData += a.newData
            total.noData += a.noData
            total.failed += a.failed
            total.timedOut += a.timedOut
            total.offlineAttempts += a.offlineAttempts
            total.handlerSeconds += a.handlerSeconds
            if let g = a.maxGapRatio { total.maxGapRatio = max(total.maxGapRatio ?? 0, g) }
            if let g = a.maxGapRatioEffective { total.maxGapRatioEffective = max(total.maxGapRatioEffective ?? 0, g) }
        }
        let pooled = stale.flatMap { $0 }
        total.stalenessMedian = Self.percentile(pooled, 0.5)
        total.stalenessP90 = Self.percentile(pooled, 0.9)
        return (total, apps)
    }

    /// Nearest-rank percentile (the median of an even count is the lower middle); nil when empty.
    static func percentile(_ values: [Double], _ p: Double) -> Double? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let rank = Int((p * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank - 1, 0), sorted.count - 1)]
    }

    /// The last value ≤ t in a sorted array.
    static func lastAtOrBefore(_ sorted: [Double], _ t: Double) -> Double? {
        var lo = 0, hi = sorted.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if sorted[mid] <= t { lo = mid + 1 } else { hi = mid }
        }
        return lo > 0 ? sorted[lo - 1] : nil
    }
}

extension FetchPlanner: Simulator.Planner {}
