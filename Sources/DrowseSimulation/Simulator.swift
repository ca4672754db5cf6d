import DrowseCore

/// `drowse simulate`: runs a `Scenario` on a virtual clock three ways — with the real
/// `FetchScheduler` (the very state machine `drowsed` runs, fed by `SchedulerDriver`), with
/// Android's inexact-alarm batching, and with naive independent per-app timers — and measures all
/// three the same way. Pure and deterministic: every random draw comes from `SplitMix64` streams
/// of the seed.
///
/// What the strategies share, so that only the scheduling differs:
/// - the k-th run of an app takes the same time and ends with the same result (the app's
///   `results` cycled, durations drawn from the stream `(seed, 1, app, k)`); a run that would
///   last the handler deadline or longer is killed there and counts as a timeout;
/// - the same uses of each app's data (times of day, jittered by `(seed, 2, app, day, use)`);
/// - the same network and power timeline.
///
/// For Drowse the simulator supplies only the clock, the handler outcomes, the uses and the
/// conditions timeline: it feeds the scheduler the events `drowsed` feeds it (`started`,
/// `handlerEnded`, `conditionsChanged`, `used`, `timerFired`) and carries out its actions
/// (`startFetch` starts runs, `setTimer` sets the next wake-up). Handler slots are not modelled:
/// every fetch a window starts runs at once.
package struct Simulator: Sendable {
    /// One handler run.
    package struct Run: Sendable, Equatable {
        /// Index into `scenario.apps`.
        package var app: Int
        package var start: Double
        package var end: Double
        package var outcome: Scenario.Outcome
        /// A naive timer fired while offline: the handler failed at once and used no radio.
        package var offline: Bool
        /// The interval the strategy waits after this run: the planner's effective interval
        /// (stretched by no-data, backed off by failures); for naive timers the configured one.
        package var nextInterval: Double?
    }

    /// One read of an app's data.
    package struct Use: Sendable, Equatable {
        package var app: Int
        package var at: Double
    }

    /// What the push channel did for one strategy.
    package struct PushRecord: Sendable {
        /// Every exchange on the link, in time order.
        package var packets: [(at: Double, kind: PushChannel.Packet)] = []
        /// The notification handlers' runs, in start order.
        package var runs: [Run] = []
        /// Notifications the provider published.
        package var published = 0
        /// Notifications held back by `max_per_hour` before they ran.
        package var deferred = 0
        package var sessions = 0
        package var pings = 0
    }

    package let scenario: Scenario
    package let seed: UInt64
    /// Set: predict `deploy/bench-radio.sh --compress K` (the scenario as the bench replays it).
    package let wire: WireScaling?

    package init(_ scenario: Scenario, seed: UInt64? = nil, compress: Double? = nil) {
        wire = compress.map { WireScaling(compress: $0) }
        self.scenario = wire.map { $0.replayed(scenario) } ?? scenario
        self.seed = seed ?? scenario.seed
    }

    var end: Double { scenario.start + scenario.duration }

    /// The scheduler's policy as `drowsed` configures it for this scenario.
    package var policy: FetchPlanner {
        var p = FetchPlanner()
        p.dailyBudget = wire?.dailyBudget(scenario) ?? scenario.dailyBudget
        if let t = scenario.tolerance { p.toleranceFraction = t }
        if let w = wire { p.maxTolerance = WireScaling.maxTolerance * w.compress }
        return p
    }

    /// The radio tail the scheduler plans with.
    var schedulerTail: Double { wire?.schedulerTail(scenario.radio) ?? scenario.radio.tailSeconds }

    /// Where a run uses the radio: for its whole length; on the wire (the bench's handler
    /// fetches, then sleeps) at an instant once its start-up is over, after the `queued` handlers
    /// started at the same instant before it, `stagger` real seconds each.
    func activity(_ r: Run, queued: Int = 0, stagger: Double = WireScaling.drowsedStagger) -> (start: Double, end: Double) {
        guard let w = wire else { return (r.start, r.end) }
        let t = r.start + (WireScaling.handlerStartup + Double(queued) * stagger) * w.compress
        return (t, t)
    }

    /// The activities of runs sorted by start, each after those that started at the same instant.
    func activities(_ runs: [Run], stagger: Double = WireScaling.drowsedStagger) -> [(start: Double, end: Double)] {
        var out: [(start: Double, end: Double)] = []
        var queued = 0
        for (k, r) in runs.enumerated() {
            queued = k > 0 && runs[k - 1].start == r.start ? queued + 1 : 0
            out.append(activity(r, queued: queued, stagger: stagger))
        }
        return out
    }

    // MARK: - Shared inputs

    /// How the k-th run of an app goes, when it starts at `start` and the app's last new-data
    /// run began at `lastNew` (nil: it has none yet).
    func draw(app: Int, run k: Int, start: Double, lastNew: Double?) -> (duration: Double, outcome: Scenario.Outcome) {
        let a = scenario.apps[app]
        var outcome = a.results[k % a.results.count]
        var g = SplitMix64.stream(seed, 1, UInt64(app), UInt64(k))
        var d = g.uniform(a.duration)
        if outcome == .timeout || d >= scenario.handlerDeadline {
            outcome = .timeout
            d = scenario.handlerDeadline
        }
        if let w = wire { d = outcome == .timeout ? w.deadline(scenario.handlerDeadline) : d + WireScaling.handlerStartup * w.compress }
        if let u = a.updates, outcome == .new || outcome == .no {
            // The source publishes at phase + m·u for every integer m (it had data before the start).
            var p = SplitMix64.stream(seed, 4, UInt64(app))
            let phase = scenario.start + p.unit() * u
            let published = { (t: Double) in ((t - phase) / u).rounded(.down) }
            outcome = lastNew.map { published(start) > published($0) } ?? true ? .new : .no
        }
        return (d, outcome)
    }

    /// The k-th run of an app at `start`, with the bookkeeping of its last new-data run.
    func run(app i: Int, count: inout [Int], lastNew: inout [Double?], at start: Double, nextInterval: Double? = nil) -> Run {
        let (d, outcome) = draw(app: i, run: count[i], start: start, lastNew: lastNew[i])
        count[i] += 1
        if outcome == .new { lastNew[i] = start }
        return Run(app: i, start: start, end: start + d, outcome: outcome, offline: false, nextInterval: nextInterval)
    }

    /// Every use of every app's data within the scenario, in time order.
    package func uses() -> [Use] {
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

    /// The runs `drowsed` makes with its scheduler, in start order.
    package func runDrowse() -> [Run] { drowse(policy: policy).runs }

    // MARK: - The baselines' push channel

    /// A baseline's push connection: a client with this keepalive (a plain MQTT client's rule,
    /// which the machine follows when no window is ever announced), each notification's handler
    /// started as it arrives, no budget.
    package func baselinePush(keepalive: Double) -> PushRecord? {
        guard scenario.pushChannel else { return nil }
        let s = scenario
        var channel = pushChannel(keepalive: keepalive, baseline: true)
        let notes = s.notifications(seed: seed)
        var push = PushRecord()
        var count = Array(repeating: 0, count: s.apps.count)
        var ni = 0, ci = 0
        let changes = s.network.map { (at: s.start + $0.at, online: $0.kind != .none) }
        channel.start(now: s.start)
        var lastT = s.start
        while true {
            let nextNote = ni < notes.count ? s.start + notes[ni].at : .infinity
            let nextChange = ci < changes.count ? changes[ci].at : .infinity
            let nextTimer = max(channel.timerAt ?? .infinity, lastT)
            let t = min(nextNote, nextChange, nextTimer)
            guard t < end else { break }
            lastT = t
            if nextChange == t {
                channel.networkChanged(online: changes[ci].online, now: t)
                ci += 1
            } else if nextNote == t {
                push.published += 1
                channel.notify(app: notes[ni].app, now: t)
                ni += 1
            } else {
                channel.timerFired(now: t)
            }
            for a in channel.takeArrived() {
                let k = count[a.app]
                count[a.app] += 1
                push.runs.append(Run(app: a.app, start: a.at, end: a.at + notificationDuration(app: a.app, run: k), outcome: .new,
                                     offline: false, nextInterval: nil))
            }
        }
        push.packets = channel.packets.filter { $0.at < end }
        push.sessions = channel.sessions
        push.pings = channel.pings
        return push
    }

    /// The naive baseline's push connection: mosquitto_sub's default keepalive.
    static let naiveKeepalive = 60.0
    /// The Android-style baseline's: the heartbeat of Android's push channel on mobile networks.
    static let androidHeartbeat = 28 * 60.0

    /// The runs, and how often the stated tolerance rule was broken, with a given policy (so a
    /// proposed change can be measured before it is made).
    package func drowse(policy: FetchPlanner) -> (runs: [Run], toleranceViolations: [Int], push: PushRecord?) {
        let s = scenario
        let n = s.apps.count
        let index = Dictionary(uniqueKeysWithValues: s.apps.enumerated().map { ($1.id, $0) })
        var driver = SchedulerDriver(FetchScheduler(policy: policy))
        var running: [Int: Int] = [:]  // app → index in runs
        var runCount = Array(repeating: 0, count: n)
        var lastNew: [Double?] = Array(repeating: nil, count: n)
        var runs: [Run] = []
        let uses = self.uses()
        var ui = 0, ni = 0, pi = 0
        var network = s.initialNetwork
        var power = (source: Conditions.PowerSource.ac, battery: Int?.none)
        let offline = offlineIntervals()
        // The stated rule, checked: each app runs by the latest due-by the scheduler stated since
        // its last start, offline time not counted; none while it only joins others' windows.
        var lastStart = Array(repeating: s.start, count: n)
        var due: [Double?] = Array(repeating: nil, count: n)
        var exempt = Array(repeating: false, count: n)
        var violations = Array(repeating: 0, count: n)
        // The push channel (docs/benchmarks.md, "The push channel, simulated and on the wire").
        var channel = s.pushChannel ? pushChannel(keepalive: s.keepalive) : nil
        let notes = s.pushChannel ? s.notifications(seed: seed) : []
        var push = PushRecord()
        var nti = 0
        var noteRunning: [Int] = []  // indices into push.runs
        var noteCount = Array(repeating: 0, count: n)
        var budgetUsed: [[Double]] = Array(repeating: [], count: n)
        var deferred: [Int] = []  // apps, oldest first
        let budget = NotificationBudget(maxPerHour: s.maxPerHour)
        // What drowsed last published of each app in its status (its last run failed).
        var lastFailed = Array(repeating: false, count: n)

        func conditions() -> FetchScheduler.Conditions {
            FetchScheduler.Conditions(
                online: network != .none,
                lowBattery: power.source == .battery && (power.battery ?? 100) < s.batteryLowPercent,
                radioTail: schedulerTail)
        }
        func late(_ i: Int, at t: Double) -> Bool {
            guard !exempt[i], let d = due[i] else { return false }
            return t > d + Self.overlap(offline, lastStart[i], t) + 0.001
        }
        func feed(_ event: FetchScheduler.Event) {
            let t = event.now
            var window = false
            for action in driver.feed(event) {
                guard case .startFetch(let ids, let trigger) = action else { continue }
                if trigger == .scheduled { window = true }
                for id in ids {
                    guard let i = index[id] else { continue }
                    if late(i, at: t) { violations[i] += 1 }
                    lastStart[i] = t
                    due[i] = nil
                    exempt[i] = false
                    running[i] = runs.count
                    runs.append(run(app: i, count: &runCount, lastNew: &lastNew, at: t))
                }
            }
            for i in 0..<n where running[i] == nil {
                guard let promise = driver.scheduler.promise(s.apps[i].id, now: t) else { continue }
                if let d = promise.dueBy { due[i] = max(due[i] ?? d, d) } else { exempt[i] = true }
            }
            if window, channel != nil {
                // The status names the window (a new status to publish), and the keepalive rides it;
                // notifications held back by their budget go now, as far as it allows.
                channel?.publish(now: t)
                channel?.windowOpened(now: t)
                release(at: t)
            }
        }
        /// A handler ended: drowsed publishes its status again when the app's failed flag changed.
        func ended(_ i: Int, failed: Bool, at t: Double) {
            guard lastFailed[i] != failed else { return }
            lastFailed[i] = failed
            channel?.publish(now: t)
        }
        func startNotification(_ i: Int, at t: Double) {
            budgetUsed[i].append(t)
            let k = noteCount[i]
            noteCount[i] += 1
            noteRunning.append(push.runs.count)
            push.runs.append(Run(app: i, start: t, end: t + notificationDuration(app: i, run: k), outcome: .new, offline: false, nextInterval: nil))
            // The arrival woke the radio: due fetches may ride along.
            feed(.radioUsed(now: t))
        }
        func release(at t: Double) {
            var still: [Int] = []
            for i in deferred {
                if budget.admits(priority: 5, used: budgetUsed[i], now: t) { startNotification(i, at: t) } else { still.append(i) }
            }
            deferred = still
        }
        func nextRelease(_ t: Double) -> Double {
            deferred.map { budget.nextRoom(used: budgetUsed[$0], now: t) }.min() ?? .infinity
        }
        func takeArrivals() {
            guard let arrived = channel?.takeArrived() else { return }
            for a in arrived {
                if deferred.isEmpty || !deferred.contains(a.app), budget.admits(priority: 5, used: budgetUsed[a.app], now: a.at) {
                    startNotification(a.app, at: a.at)
                } else {
                    push.deferred += 1
                    deferred.append(a.app)
                }
            }
        }

        let apps = s.apps.map { FetchScheduler.App(id: $0.id, interval: s.intervalSeconds($0), registeredAt: s.start) }
        channel?.networkChanged(online: network != .none, now: s.start)
        channel?.start(now: s.start)
        feed(.started(apps: apps, conditions: conditions(), now: s.start))
        var lastT = s.start
        while true {
            let nextChange = min(ni < s.network.count ? s.start + s.network[ni].at : .infinity,
                                 pi < s.power.count ? s.start + s.power[pi].at : .infinity)
            let nextEnd = running.values.map { runs[$0].end }.min() ?? .infinity
            let nextUse = ui < uses.count ? uses[ui].at : .infinity
            let nextTimer = driver.timerAt ?? .infinity
            let nextNote = nti < notes.count ? s.start + notes[nti].at : .infinity
            let nextNoteEnd = noteRunning.map { push.runs[$0].end }.min() ?? .infinity
            let nextPush = max(channel?.timerAt ?? .infinity, lastT)
            let nextDeferred = max(nextRelease(lastT), lastT)
            let t = min(nextChange, nextEnd, nextUse, nextTimer, nextNote, nextNoteEnd, nextPush, nextDeferred)
            guard t < end else { break }
            lastT = t
            if nextChange == t {
                while ni < s.network.count, s.start + s.network[ni].at <= t { network = s.network[ni].kind; ni += 1 }
                while pi < s.power.count, s.start + s.power[pi].at <= t { power = (s.power[pi].source, s.power[pi].battery); pi += 1 }
                channel?.networkChanged(online: network != .none, now: t)
                feed(.conditionsChanged(conditions(), now: t))
            } else if nextEnd == t {
                for i in running.keys.sorted() where runs[running[i]!].end <= t {
                    let k = running[i]!
                    running[i] = nil
                    let r = runs[k]
                    let ending = FetchScheduler.FetchEnding(result: r.outcome.result, timedOut: r.outcome == .timeout)
                    feed(.handlerEnded(app: s.apps[i].id, fetch: ending, startedAt: r.start, endedAt: r.end))
                    runs[k].nextInterval = driver.scheduler.promise(s.apps[i].id, now: t).map { $0.eligibleAt - r.start }
                    ended(i, failed: r.outcome.result == .failed, at: t)
                }
            } else if nextUse == t {
                while ui < uses.count, uses[ui].at <= t {
                    feed(.used(app: s.apps[uses[ui].app].id, now: t))
                    ui += 1
                }
            } else if nextNoteEnd == t {
                for k in noteRunning where push.runs[k].end <= t {
                    let r = push.runs[k]
                    feed(.handlerEnded(app: s.apps[r.app].id, fetch: nil, startedAt: r.start, endedAt: r.end))
                    ended(r.app, failed: false, at: t)
                }
                noteRunning.removeAll { push.runs[$0].end <= t }
            } else if nextNote == t {
                while nti < notes.count, s.start + notes[nti].at <= t {
                    push.published += 1
                    channel?.notify(app: notes[nti].app, now: t)
                    nti += 1
                }
            } else if nextPush == t {
                let pings = channel?.pings ?? 0
                channel?.timerFired(now: t)
                // A ping wakes the radio on its own: drowsed posts radioUsed, and fetches whose
                // tolerance allows ride it (docs/design.md, "The adaptive keepalive").
                if (channel?.pings ?? 0) > pings { feed(.radioUsed(now: t)) }
            } else if nextDeferred == t {
                release(at: t)
            } else {
                feed(.timerFired(now: t))
            }
            takeArrivals()
        }
        // Due before the end and never run: also a breach.
        for i in 0..<n where running[i] == nil && late(i, at: end) { violations[i] += 1 }
        guard let channel else { return (runs, violations, nil) }
        push.packets = channel.packets.filter { $0.at < end }
        push.sessions = channel.sessions
        push.pings = channel.pings
        return (runs, violations, push)
    }

    /// The device's push channel at the scenario's start, with this keepalive (scenario seconds).
    /// On the wire, drowsed's is the bench's whole seconds on a clock K times slower; a
    /// baseline's (`baseline`) is the bench's Python client, which pings at its keepalive exactly,
    /// where `MQTTConnectionMachine` sets its timer `machineTimerMargin` past it (for the client
    /// library's whole seconds): the machine gets that much less.
    func pushChannel(keepalive: Double, baseline: Bool = false) -> PushChannel {
        let online = scenario.initialNetwork != .none
        // drowsed's keepalive adapts up to max_keepalive; a baseline's client keeps its own.
        let most = baseline ? nil : scenario.maxKeepalive
        guard let w = wire else { return PushChannel(keepalive: keepalive, maxKeepalive: most, online: online, seed: seed) }
        let real = baseline ? keepalive / w.compress - Self.machineTimerMargin : w.keepalive(keepalive)
        return PushChannel(keepalive: real, maxKeepalive: most.map { w.maxKeepalive($0) }, scale: w.compress,
                           delayedAck: WireScaling.delayedAck, online: online, seed: seed)
    }

    /// How far past the keepalive `MQTTConnectionMachine` sets its ping timer, in seconds.
    static let machineTimerMargin = 0.05

    /// How long the n-th notification handler run of an app takes: a draw from its `duration`
    /// (the stream `(seed, 7, app, n)`); on the wire the bench's handler fetches and exits, so
    /// its start-up alone.
    func notificationDuration(app: Int, run k: Int) -> Double {
        if let w = wire { return WireScaling.handlerStartup * w.compress }
        var g = SplitMix64.stream(seed, 7, UInt64(app), UInt64(k))
        return min(g.uniform(scenario.apps[app].duration), scenario.handlerDeadline)
    }

    /// Seconds of [a, b] inside the given intervals.
    static func overlap(_ intervals: [(from: Double, to: Double)], _ a: Double, _ b: Double) -> Double {
        var sum = 0.0
        for o in intervals { sum += max(0, min(b, o.to) - max(a, o.from)) }
        return sum
    }

    // MARK: - Android-style batching

    /// Android's inexact repeating alarms (AlarmManager.setInexactRepeating): each app's alarm is
    /// nominally due at a random phase in [0, interval) and then every interval after that nominal
    /// time; it may be delivered anywhere in a window of 75 % of its interval after it. An alarm
    /// joins the first pending batch (in time order) whose window overlaps its own, narrowing the
    /// batch to the overlap; a batch is delivered at the start of its window, all its alarms
    /// together (as AlarmManagerService delivers a batch at its start). Like naive timers, an
    /// alarm fires online or not (offline the handler fails at once, no radio), and does not start
    /// a run while the app's previous one still runs.
    package func runAndroid() -> [Run] {
        struct Batch { var start: Double; var end: Double; var apps: [Int] }
        var batches: [Batch] = []  // pending, in creation order (Android scans its list in order)
        var nominal: [Double] = Array(repeating: .infinity, count: scenario.apps.count)
        var interval: [Double] = Array(repeating: 0, count: scenario.apps.count)
        func place(_ i: Int) {
            let from = nominal[i], to = nominal[i] + 0.75 * interval[i]
            if let k = batches.firstIndex(where: { $0.start <= to && from <= $0.end }) {
                batches[k].start = max(batches[k].start, from)
                batches[k].end = min(batches[k].end, to)
                batches[k].apps.append(i)
            } else {
                batches.append(Batch(start: from, end: to, apps: [i]))
            }
        }
        for (i, app) in scenario.apps.enumerated() {
            guard let iv = scenario.intervalSeconds(app) else { continue }
            var g = SplitMix64.stream(seed, 3, UInt64(i))
            interval[i] = iv
            nominal[i] = scenario.start + g.unit() * iv
            place(i)
        }
        var runs: [Run] = []
        var k = Array(repeating: 0, count: scenario.apps.count)
        var lastNew: [Double?] = Array(repeating: nil, count: scenario.apps.count)
        var busyUntil = Array(repeating: -Double.infinity, count: scenario.apps.count)
        while let b = batches.indices.min(by: { batches[$0].start < batches[$1].start }) {
            let batch = batches.remove(at: b)
            let t = batch.start
            guard t < end else { break }
            for i in batch.apps.sorted() {
                if t >= busyUntil[i] {
                    if network(at: t) == .none {
                        runs.append(Run(app: i, start: t, end: t, outcome: .failed, offline: true, nextInterval: interval[i]))
                    } else {
                        let r = run(app: i, count: &k, lastNew: &lastNew, at: t, nextInterval: interval[i])
                        busyUntil[i] = r.end
                        runs.append(r)
                    }
                }
                // The next nominal time after this delivery, on the app's fixed schedule.
                repeat { nominal[i] += interval[i] } while nominal[i] <= t
                place(i)
            }
        }
        return runs.sorted { ($0.start, $0.app) < ($1.start, $1.app) }
    }

    // MARK: - Naive timers

    /// Each app on its own timer: a random phase in [0, interval), then every interval, online
    /// or not (offline the handler fails at once). A timer does not start a run while the
    /// previous one still runs (as a systemd timer would not).
    package func runNaive() -> [Run] {
        var runs: [Run] = []
        var count = Array(repeating: 0, count: scenario.apps.count)
        var lastNew: [Double?] = Array(repeating: nil, count: scenario.apps.count)
        for (i, app) in scenario.apps.enumerated() {
            guard let interval = scenario.intervalSeconds(app) else { continue }
            var g = SplitMix64.stream(seed, 3, UInt64(i))
            let phase = g.unit() * interval
            var m = 0.0
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
                let r = run(app: i, count: &count, lastNew: &lastNew, at: t, nextInterval: interval)
                busyUntil = r.end
                runs.append(r)
            }
        }
        return runs.sorted { ($0.start, $0.app) < ($1.start, $1.app) }
    }

    // MARK: - Report

    package func report() -> SimulationReport { report(policy: policy) }

    package func report(policy: FetchPlanner) -> SimulationReport { record(policy: policy).report }

    /// What one simulation did, beside its report: each strategy's runs and the uses, the very
    /// ones the report measured (`TimelineSVG` draws them).
    package struct Recording: Sendable {
        package var report: SimulationReport
        package var drowse: [Run]
        package var android: [Run]
        package var naive: [Run]
        package var uses: [Use]
        /// Each strategy's push channel, when the scenario has one.
        package var drowsePush: PushRecord?
        package var androidPush: PushRecord?
        package var naivePush: PushRecord?
    }

    package func record() -> Recording { record(policy: policy) }

    package func record(policy: FetchPlanner) -> Recording {
        let uses = self.uses()
        let run = drowse(policy: policy)
        var drowse = measure(run.runs, uses: uses, push: run.push, stagger: WireScaling.drowsedStagger)
        for i in drowse.apps.indices { drowse.apps[i].toleranceViolations = run.toleranceViolations[i] }
        drowse.total.toleranceViolations = run.toleranceViolations.reduce(0, +)
        let androidRuns = runAndroid(), naiveRuns = runNaive()
        let androidPush = baselinePush(keepalive: Self.androidHeartbeat), naivePush = baselinePush(keepalive: Self.naiveKeepalive)
        let android = measure(androidRuns, uses: uses, push: androidPush, stagger: WireScaling.driverStagger)
        let naive = measure(naiveRuns, uses: uses, push: naivePush, stagger: WireScaling.driverStagger)
        let report = SimulationReport(
            scenario: scenario.name, seed: seed, radio: scenario.radio.name, start: scenario.start, duration: scenario.duration,
            warmup: scenario.warmup, compress: wire?.compress, drowse: drowse.total, naive: naive.total, android: android.total,
            apps: scenario.apps.indices.map { i in
                SimulationReport.AppRow(id: scenario.apps[i].id, interval: scenario.intervalSeconds(scenario.apps[i]),
                                        drowse: drowse.apps[i], naive: naive.apps[i], android: android.apps[i])
            })
        return Recording(report: report, drowse: run.runs, android: androidRuns, naive: naiveRuns, uses: uses,
                         drowsePush: run.push, androidPush: androidPush, naivePush: naivePush)
    }

    /// The radio-on periods of a strategy's runs, as `measure` counts them (runs that fired
    /// offline used no radio).
    package func radioPeriods(_ runs: [Run]) -> [RadioModel.Period] {
        scenario.radio.periods(of: activities(runs.filter { !$0.offline }.sorted { ($0.start, $0.app) < ($1.start, $1.app) }))
    }

    /// The figures for one strategy's runs: per app and in total.
    func measure(_ runs: [Run], uses: [Use], push: PushRecord? = nil, stagger: Double = WireScaling.drowsedStagger)
        -> (total: SimulationReport.Totals, apps: [SimulationReport.Totals])
    {
        let n = scenario.apps.count
        var apps = Array(repeating: SimulationReport.Totals(), count: n)
        var stale: [[Double]] = Array(repeating: [], count: n)
        let offline = offlineIntervals()
        func onlineSeconds(_ a: Double, _ b: Double) -> Double { b - a - Self.overlap(offline, a, b) }

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
        let acts = self.activities(active, stagger: stagger)
        var group: [Int] = []  // indices into active
        var tailUntil = -Double.infinity
        func close() {
            guard let first = group.first else { return }
            let u = radio.usage(of: group.map { acts[$0] })
            let openers = group.filter { active[$0].start == active[first].start }
            for k in openers { apps[active[k].app].promotions += Double(u.promotions) / Double(openers.count) }
            for k in group {
                apps[active[k].app].radioOnSeconds += u.radioOnSeconds / Double(group.count)
                apps[active[k].app].energyJoules += u.joules / Double(group.count)
            }
            group = []
        }
        for k in active.indices {
            if active[k].start > tailUntil { close() }
            group.append(k)
            tailUntil = max(tailUntil, acts[k].end + radio.tailSeconds)
        }
        close()

        var total = SimulationReport.Totals()
        var activities = acts.map { ($0, keepalive: false) }
        if let push {
            activities += self.activities(push.runs, stagger: stagger).map { ($0, keepalive: false) }
            activities += push.packets.map { ((start: $0.at, end: $0.at), keepalive: $0.kind == .keepalive) }
        }
        let u = radio.usage(of: activities.map(\.0))
        total.promotions = Double(u.promotions)
        total.radioOnSeconds = u.radioOnSeconds
        total.energyJoules = u.joules
        if let push {
            var p = SimulationReport.PushTotals()
            p.published = push.published
            p.handled = push.runs.count
            p.deferred = push.deferred
            p.pings = push.pings
            p.sessions = push.sessions
            p.handlerSeconds = push.runs.reduce(0) { $0 + $1.end - $1.start }
            // Wakes made of keepalive pings alone, as `drowse radio` counts them in a capture.
            let sorted = activities.sorted { $0.0.start < $1.0.start }
            var i = 0
            for period in radio.periods(of: sorted.map(\.0)) {
                var onlyPings = true
                while i < sorted.count, sorted[i].0.start <= period.lastActivityEnd {
                    if !sorted[i].keepalive { onlyPings = false }
                    i += 1
                }
                if onlyPings {
                    p.keepaliveWakes += 1
                    p.keepaliveRadioOnSeconds += period.radioOnSeconds
                    p.keepaliveJoules += period.joules
                }
            }
            total.push = p
        }
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

