@testable import DrowseCore
import Testing

/// The fetch scheduler as a state machine on a manual clock: times are plain seconds, events go
/// in, and the tests check the actions that come out (and the promises it states).
@Suite("FetchScheduler")
struct FetchSchedulerTests {
    typealias S = FetchScheduler
    static let online = S.Conditions(online: true, radioTail: 0)

    static func app(_ id: String, every: Double?, registered: Double = 0, last: Double? = nil, failures: Int = 0, noData: Int = 0,
                    timedOut: Bool = false, runs: [S.Span] = [], uses: [Double] = []) -> S.App {
        S.App(id: id, interval: every, registeredAt: registered,
              record: S.Record(lastFetch: last, lastResult: last == nil ? nil : .newData, consecutiveFailures: failures,
                               consecutiveNoData: noData, lastTimedOut: timedOut),
              recentRuns: runs, uses: uses)
    }

    /// A scheduler started with `apps` at `now`, and the actions the start gave.
    static func started(_ apps: [S.App], now: Double = 0, conditions: S.Conditions = online, policy: FetchPlanner = FetchPlanner(),
                        utcOffset: Double = 0) -> (S, [S.Action]) {
        var s = S(policy: policy, utcOffset: utcOffset)
        let actions = s.handle(.started(apps: apps, conditions: conditions, now: now))
        return (s, actions)
    }

    static func timers(_ actions: [S.Action]) -> [Double] {
        actions.compactMap { if case .setTimer(let at) = $0 { at } else { nil } }
    }

    static func fetches(_ actions: [S.Action]) -> [S.Action] {
        actions.filter { if case .startFetch = $0 { true } else { false } }
    }

    static func reason(_ actions: [S.Action], _ id: String) -> String? {
        actions.compactMap { if case .explain(id, let r) = $0 { r } else { nil } }.last
    }

    static func ended(_ id: String, _ result: FetchResult, _ start: Double, _ end: Double, timedOut: Bool = false) -> S.Event {
        .handlerEnded(app: id, fetch: S.FetchEnding(result: result, timedOut: timedOut), startedAt: start, endedAt: end)
    }

    // MARK: - Windows

    @Test("a brand-new app is eligible when registered, and its first window opens by its due-by and starts it")
    func newApp() throws {
        var (s, actions) = Self.started([Self.app("a", every: 600, registered: 100)], now: 100)
        // Eligible at once (registered at 100), due by the end of its tolerance (50 % of 10 min).
        #expect(actions == [.setTimer(at: 400), .explain(app: "a", reason: "on schedule")])
        let promise = try #require(s.promise("a", now: 100))
        #expect(promise.eligibleAt == 100 && promise.dueBy == 400)
        #expect(s.planned == FetchPlanner.Window(at: 400, apps: ["a"]))
        #expect(s.handle(.timerFired(now: 400)) == [.startFetch(apps: ["a"], trigger: .scheduled)])
        #expect(s.running == ["a"])
        #expect(s.promise("a", now: 400) == nil)

        // drowsed starting after a new app's due-by has passed: at once.
        (s, actions) = Self.started([Self.app("a", every: 600, registered: 100)], now: 5000)
        #expect(Self.timers(actions) == [5000])
        #expect(s.handle(.timerFired(now: 5000)) == [.startFetch(apps: ["a"], trigger: .scheduled)])
    }

    @Test("apps whose windows overlap share one startFetch; one eligible later waits for the next window")
    func sharedWindow() {
        var (s, actions) = Self.started([
            Self.app("a", every: 600, last: 0),     // eligible 600, due by 900
            Self.app("b", every: 900, last: -100),  // eligible 800, due by 1250
            Self.app("c", every: 600, last: 350),   // eligible 950, due by 1250
        ])
        #expect(Self.timers(actions) == [900])
        #expect(s.handle(.timerFired(now: 900)) == [.startFetch(apps: ["a", "b"], trigger: .scheduled), .setTimer(at: 1250)])
        // Ends that do not move the window set no timer.
        #expect(s.handle(Self.ended("a", .newData, 900, 902)) == [.save(app: "a", record: S.Record(lastFetch: 900, lastResult: .newData))])
        #expect(s.handle(Self.ended("b", .newData, 900, 903)) == [.save(app: "b", record: S.Record(lastFetch: 900, lastResult: .newData))])
        // c runs alone at its due-by; a (eligible 1500, due by 1800) and b (eligible 1800) share the next.
        #expect(s.handle(.timerFired(now: 1250)) == [.startFetch(apps: ["c"], trigger: .scheduled), .setTimer(at: 1800)])
        #expect(s.planned == FetchPlanner.Window(at: 1800, apps: ["a", "b"]))
    }

    @Test("a fetch that ends with new data saves its record (last fetch = its start) and sets the timer to the next window")
    func newData() {
        var (s, actions) = Self.started([Self.app("a", every: 600, last: 0)])
        #expect(Self.timers(actions) == [900])
        #expect(Self.fetches(s.handle(.timerFired(now: 900))) == [.startFetch(apps: ["a"], trigger: .scheduled)])
        #expect(s.handle(Self.ended("a", .newData, 900, 905)) == [
            .save(app: "a", record: S.Record(lastFetch: 900, lastResult: .newData)),
            .setTimer(at: 900 + 600 + 300),
        ])
        #expect(s.running.isEmpty)
        #expect(s.apps["a"]?.recentRuns == [S.Span(start: 900, seconds: 5)])
        #expect(s.apps["a"]?.record.lastFetch == 900)
    }

    @Test("no-data results stretch the interval: the save counts them, each next timer comes later; new data restores it")
    func noData() {
        var (s, _) = Self.started([Self.app("a", every: 600, last: 0)])
        var start = 900.0
        var gaps: [Double] = []
        for (n, result) in [FetchResult.noData, .noData, .noData, .newData].enumerated() {
            #expect(Self.fetches(s.handle(.timerFired(now: start))) == [.startFetch(apps: ["a"], trigger: .scheduled)])
            let actions = s.handle(Self.ended("a", result, start, start + 1))
            let streak = result == .noData ? n + 1 : 0
            #expect(actions.first == .save(app: "a", record: S.Record(lastFetch: start, lastResult: result, consecutiveNoData: streak)))
            // 600 s stretched by half per no-data result, then the tolerance (of the base interval).
            let next = start + 600 * (1 + 0.5 * Double(streak)) + 300
            #expect(Self.timers(actions) == [next])
            if streak > 0 {
                #expect(Self.reason(actions, "a")?.hasPrefix("\(streak) no-data result\(streak == 1 ? "" : "s") in a row stretched the interval to ") == true)
            } else {
                #expect(Self.reason(actions, "a") == "on schedule")
            }
            gaps.append(next - start)
            start = next
        }
        #expect(gaps == [1200, 1500, 1800, 900])
        // The stretch stops at 4×.
        let (capped, _) = Self.started([Self.app("a", every: 600, last: 0, noData: 50)])
        // Eligible after the interval itself (it rides windows others open), due by the
        // stretched interval plus the tolerance.
        let promise = capped.promise("a", now: 0)
        #expect(promise?.eligibleAt == 600 && promise?.dueBy == 2700)
    }

    @Test("a failure backs off by doubling, a deadline kill by one doubling more; new data ends it")
    func failures() {
        var (s, _) = Self.started([Self.app("a", every: 600, last: 0)])
        _ = s.handle(.timerFired(now: 900))
        var actions = s.handle(Self.ended("a", .failed, 900, 901))
        #expect(actions.first == .save(app: "a", record: S.Record(lastFetch: 900, lastResult: .failed, consecutiveFailures: 1)))
        #expect(Self.timers(actions) == [900 + 1200 + 300])
        #expect(Self.reason(actions, "a") == "backing off after 1 failure (interval stretched to 20m)")

        // The second failure, killed at its deadline: 2 doublings + 1 = 8× the interval.
        var plain = s
        _ = s.handle(.timerFired(now: 2400))
        actions = s.handle(Self.ended("a", .failed, 2400, 2430, timedOut: true))
        #expect(actions.first == .save(app: "a", record: S.Record(lastFetch: 2400, lastResult: .failed, consecutiveFailures: 2, lastTimedOut: true)))
        #expect(Self.timers(actions) == [2400 + 4800 + 300])
        let why = Self.reason(actions, "a") ?? ""
        #expect(why.hasPrefix("backing off after 2 failures") && why.contains("killed at its deadline"))
        // The same failure without the kill: 4×.
        _ = plain.handle(.timerFired(now: 2400))
        #expect(Self.timers(plain.handle(Self.ended("a", .failed, 2400, 2430))) == [2400 + 2400 + 300])

        _ = s.handle(.timerFired(now: 7500))
        actions = s.handle(Self.ended("a", .newData, 7500, 7501))
        #expect(actions.first == .save(app: "a", record: S.Record(lastFetch: 7500, lastResult: .newData)))
        #expect(Self.timers(actions) == [7500 + 600 + 300])
        #expect(Self.reason(actions, "a") == "on schedule")
    }

    // MARK: - Manual fetches

    @Test("fetchRequested: an idle app starts at once (manual), a running or unknown one is refused")
    func manual() {
        var (s, _) = Self.started([Self.app("a", every: 600, last: 0), Self.app("b", every: 600, last: 0)])
        // Before it is eligible, too: a person asked.
        #expect(s.handle(.fetchRequested(app: "a", now: 100)) == [.startFetch(apps: ["a"], trigger: .manual)])
        #expect(s.handle(.fetchRequested(app: "a", now: 101)) == [.refuseFetch(app: "a", reason: "a fetch of 'a' is already running")])
        #expect(s.handle(.fetchRequested(app: "zzz", now: 101)) == [.refuseFetch(app: "zzz", reason: "no app 'zzz'")])
        // It ends; a is eligible at 700, so it joins b's window at 900.
        #expect(s.handle(Self.ended("a", .newData, 100, 102)) == [.save(app: "a", record: S.Record(lastFetch: 100, lastResult: .newData))])
        #expect(s.planned == FetchPlanner.Window(at: 900, apps: ["a", "b"]))
        // A scheduled fetch that is running refuses a manual one too.
        _ = s.handle(.timerFired(now: 900))
        #expect(s.handle(.fetchRequested(app: "b", now: 901)) == [.refuseFetch(app: "b", reason: "a fetch of 'b' is already running")])

        // The only app fetching by hand: no window is left to wait for.
        var (one, _) = Self.started([Self.app("c", every: 600, last: 0)])
        #expect(one.handle(.fetchRequested(app: "c", now: 10)) == [.startFetch(apps: ["c"], trigger: .manual), .cancelTimer])
    }

    @Test("fetchAbandoned frees the app without touching its record")
    func abandoned() throws {
        let a = Self.app("a", every: 600, last: 0)
        var (s, _) = Self.started([a])
        #expect(s.handle(.fetchRequested(app: "a", now: 100)) == [.startFetch(apps: ["a"], trigger: .manual), .cancelTimer])
        #expect(s.handle(.fetchAbandoned(app: "a", now: 101)) == [.setTimer(at: 900)])
        #expect(s.apps["a"] == a)
        #expect(s.running.isEmpty)
        let promise = try #require(s.promise("a", now: 101))
        #expect(promise.eligibleAt == 600 && promise.dueBy == 900)
        #expect(Self.fetches(s.handle(.fetchRequested(app: "a", now: 102))) == [.startFetch(apps: ["a"], trigger: .manual)])
        _ = s.handle(.fetchAbandoned(app: "a", now: 103))
        // A scheduled fetch abandoned after its due-by: planned again at once.
        _ = s.handle(.timerFired(now: 900))
        #expect(s.handle(.fetchAbandoned(app: "a", now: 905)) == [.setTimer(at: 905)])
        #expect(s.apps["a"] == a)
    }

    // MARK: - Conditions

    @Test("offline: the timer is cancelled and the apps are explained offline; back online, overdue apps get a timer at once")
    func offline() {
        var (s, _) = Self.started([Self.app("a", every: 600, last: 0), Self.app("b", every: 3600, last: 0)])
        #expect(s.planned?.at == 900)
        let reason = "offline: fetches wait for the network"
        #expect(s.handle(.conditionsChanged(S.Conditions(online: false, radioTail: 0), now: 500)) == [
            .cancelTimer, .explain(app: "a", reason: reason), .explain(app: "b", reason: reason),
        ])
        #expect(s.planned == nil)
        // A timer that fires anyway starts nothing offline, and none is set.
        #expect(s.handle(.timerFired(now: 900)) == [])
        #expect(s.handle(.fetchRequested(app: "a", now: 950)).first == .startFetch(apps: ["a"], trigger: .manual))
        #expect(s.handle(.fetchAbandoned(app: "a", now: 951)) == [])
        #expect(s.plans(now: 1000).first { $0.id == "a" }?.reason.hasPrefix("waiting for network; ") == true)
        // Back at 2000: a (due by 900) at once; b (eligible 3600) is not due yet.
        #expect(s.handle(.conditionsChanged(Self.online, now: 2000)) == [
            .setTimer(at: 2000), .explain(app: "a", reason: "on schedule"), .explain(app: "b", reason: "on schedule"),
        ])
        #expect(s.handle(.timerFired(now: 2000)) == [.startFetch(apps: ["a"], trigger: .scheduled), .setTimer(at: 5400)])
    }

    @Test("an app eligible while the radio is awake anyway rides along: its window opens then, not at its tolerance end")
    func radioUsed() {
        let awake = S.Conditions(online: true, radioTail: 10)
        let a = Self.app("a", every: 600, last: 0)  // eligible 600, due by 900
        var (s, _) = Self.started([a], conditions: awake)
        #expect(s.planned?.at == 900)
        // The tail (until 510) ends before it is eligible: no change.
        #expect(s.handle(.radioUsed(now: 500)) == [])
        // The tail (until 605) covers its eligibility: the window opens at 600.
        #expect(s.handle(.radioUsed(now: 595)) == [.setTimer(at: 600)])
        #expect(s.handle(.timerFired(now: 600)) == [.startFetch(apps: ["a"], trigger: .scheduled)])

        // Already eligible: at once.
        (s, _) = Self.started([a], conditions: awake)
        #expect(s.handle(.radioUsed(now: 700)) == [.setTimer(at: 700)])
        #expect(s.handle(.timerFired(now: 700)) == [.startFetch(apps: ["a"], trigger: .scheduled)])

        // Another kind of handler (a notification's) ending keeps the radio awake too; it saves nothing.
        (s, _) = Self.started([a], conditions: awake)
        #expect(s.handle(.handlerEnded(app: "a", fetch: nil, startedAt: 590, endedAt: 598)) == [.setTimer(at: 600)])
        #expect(s.apps["a"]?.record == a.record)
    }

    @Test("a low battery stretches due-by (the tolerance ×3); its end shrinks it back")
    func lowBattery() throws {
        var (s, _) = Self.started([Self.app("a", every: 600, last: 0)])
        #expect(s.promise("a", now: 0)?.dueBy == 900)
        let low = S.Conditions(online: true, lowBattery: true, radioTail: 0)
        #expect(s.handle(.conditionsChanged(low, now: 100)) == [.setTimer(at: 1500), .explain(app: "a", reason: "battery low: tolerance stretched 3×")])
        #expect(s.promise("a", now: 100)?.dueBy == 1500)
        // Charged again at 1000, past the usual due-by: at once.
        #expect(s.handle(.conditionsChanged(Self.online, now: 1000)) == [.setTimer(at: 1000), .explain(app: "a", reason: "on schedule")])
        #expect(s.promise("a", now: 1000)?.dueBy == 900)
    }

    // MARK: - Budget and usage

    @Test("an app over its daily budget opens no window but joins another's; a notification handler's time counts")
    func budget() throws {
        // 400 s + 200 s in the last day: the 10 min budget is spent.
        let runs = [S.Span(start: -1000, seconds: 400), S.Span(start: -500, seconds: 200)]
        let spent = Self.app("spent", every: 300, last: 0, runs: runs)  // eligible 300
        var (s, actions) = Self.started([spent])
        // No window; only a wake for when its budget frees (see budgetFrees).
        #expect(Self.timers(actions) == [86400 - 1000 + 0.001])
        #expect(s.planned == nil)
        #expect(Self.reason(actions, "spent") == "daily budget of 10m spent: joins windows others open")
        let promise = try #require(s.promise("spent", now: 0))
        #expect(promise.eligibleAt == 300 && promise.dueBy == nil)

        (s, actions) = Self.started([spent, Self.app("other", every: 900, last: 0)])  // other: due by 1350
        #expect(Self.timers(actions) == [1350])
        #expect(Self.fetches(s.handle(.timerFired(now: 1350))) == [.startFetch(apps: ["other", "spent"], trigger: .scheduled)])

        // A notification handler of 10 min spends the budget of an app that had none spent.
        (s, actions) = Self.started([Self.app("n", every: 300, last: 0)])
        #expect(Self.timers(actions) == [450])
        #expect(s.handle(.handlerEnded(app: "n", fetch: nil, startedAt: 100, endedAt: 700)) == [
            .setTimer(at: 86400 + 100 + 0.001), .explain(app: "n", reason: "daily budget of 10m spent: joins windows others open"),
        ])
        #expect(s.planned == nil)
        #expect(s.apps["n"]?.recentRuns == [S.Span(start: 100, seconds: 600)])
        #expect(s.apps["n"]?.record == Self.app("n", every: 300, last: 0).record)
    }

    @Test("an app over its daily budget wakes the scheduler when its runs of the last day fall under it, and then runs")
    func budgetFrees() throws {
        // 400 s at -1000 and 200 s at -500: 600 s, the whole budget. Just after -1000 + 1 day, 200 s.
        let runs = [S.Span(start: -1000, seconds: 400), S.Span(start: -500, seconds: 200)]
        var (s, actions) = Self.started([Self.app("spent", every: 300, last: 0, runs: runs)])
        #expect(s.planned == nil)
        // On a quiet board nothing else may ever happen: without a timer of its own, a lone app
        // (or every app) over its budget would never fetch again.
        let wake = try #require(Self.timers(actions).first, "no timer: the app waits for an event that may never come")
        #expect(wake > 85_400 && wake <= 85_400.01)
        // At the wake the budget is free: re-planned at once (it is long overdue), then it runs.
        #expect(s.handle(.timerFired(now: wake)) == [.setTimer(at: wake), .explain(app: "spent", reason: "on schedule")])
        #expect(s.handle(.timerFired(now: wake)) == [.startFetch(apps: ["spent"], trigger: .scheduled)])

        // When one aged run is not enough, the wake is when enough of them have aged.
        let three = [S.Span(start: -3000, seconds: 100), S.Span(start: -2000, seconds: 400), S.Span(start: -500, seconds: 250)]
        (s, actions) = Self.started([Self.app("spent", every: 300, last: 0, runs: three)])
        let second = try #require(Self.timers(actions).first)
        #expect(second > 86_400 - 2000 && second <= 86_400 - 2000 + 0.01)
        // A window another app opens before then comes first; the wake is still set after it.
        (s, actions) = Self.started([Self.app("spent", every: 300, last: 0, runs: runs), Self.app("other", every: 900, last: 0)])
        #expect(Self.timers(actions) == [1350])
        #expect(s.handle(.timerFired(now: 1350)) == [.startFetch(apps: ["other", "spent"], trigger: .scheduled)])
        // Offline, no timer at all.
        (s, actions) = Self.started([Self.app("spent", every: 300, last: 0, runs: runs)], conditions: S.Conditions(online: false, radioTail: 0))
        #expect(Self.timers(actions).isEmpty)
    }

    @Test("uses at the same time on two days: the fetch before the third day's use runs usageLead before it")
    func usage() throws {
        let day = 86400.0, h = 3600.0
        func run(uses: Bool) -> (S, [S.Action]) {
            var (s, _) = Self.started([Self.app("a", every: 3600, last: 11 * h)], now: 11 * h)
            if uses {
                #expect(s.handle(.used(app: "a", now: 13 * h)).allSatisfy { if case .startFetch = $0 { false } else { true } })
                _ = s.handle(.used(app: "a", now: day + 13 * h))
            }
            // Day 3, 11:40: a fetch ends; the next is eligible at 12:40, due by 13:10.
            let t = 2 * day + 11 * h + 2400
            _ = s.handle(.fetchRequested(app: "a", now: t))
            let actions = s.handle(Self.ended("a", .newData, t, t + 2))
            return (s, actions)
        }
        let (learned, actions) = run(uses: true)
        #expect(learned.apps["a"]?.uses == [13 * h, day + 13 * h])
        #expect(Self.timers(actions) == [2 * day + 13 * h - FetchPlanner().usageLead])
        var plans = learned
        #expect(plans.plans(now: 2 * day + 12 * h).first?.reason.hasPrefix("prefetch for usage") == true)
        // Without the habit: at the end of its tolerance, after the use.
        #expect(Self.timers(run(uses: false).1) == [2 * day + 13 * h + 600])
        // One use is no habit.
        var (one, _) = Self.started([Self.app("a", every: 3600, last: 2 * day + 11 * h + 2400)], now: 2 * day + 11 * h + 2400)
        _ = one.handle(.used(app: "a", now: 2 * day + 11 * h + 2401))
        #expect(one.planned?.at == 2 * day + 13 * h + 600)
    }

    @Test("a timer that fires before the planned window starts nothing and is set again; one a hair early counts")
    func staleTimer() {
        var (s, _) = Self.started([Self.app("a", every: 600, last: 0)])
        #expect(s.handle(.timerFired(now: 500)) == [.setTimer(at: 900)])
        #expect(s.running.isEmpty)
        #expect(s.handle(.timerFired(now: 899.9995)) == [.startFetch(apps: ["a"], trigger: .scheduled)])
    }

    @Test("promise: eligibility and due-by; none for running, unknown or never apps; no due-by over the budget")
    func promise() throws {
        let (s, _) = Self.started([
            Self.app("a", every: 600, last: 1000),
            Self.app("never", every: nil, last: 1000),
            Self.app("spent", every: 600, last: 1000, runs: [S.Span(start: 900, seconds: 600)]),
            Self.app("failing", every: 600, last: 1000, failures: 1, timedOut: true),
        ], now: 1000)
        let a = try #require(s.promise("a", now: 1000))
        #expect(a.eligibleAt == 1600 && a.dueBy == 1900)
        #expect(s.promise("never", now: 1000) == nil)
        #expect(s.promise("ghost", now: 1000) == nil)
        let spent = try #require(s.promise("spent", now: 1000))
        #expect(spent.eligibleAt == 1600 && spent.dueBy == nil)
        // The budget is a rolling day: the run at 900 no longer counts a day later.
        #expect(s.promise("spent", now: 900 + 86400 + 1)?.dueBy == 1900)
        let failing = try #require(s.promise("failing", now: 1000))
        #expect(failing.eligibleAt == 1000 + 2400 && failing.dueBy == 1000 + 2400 + 300)
        var running = s
        _ = running.handle(.fetchRequested(app: "a", now: 1001))
        #expect(running.promise("a", now: 1001) == nil)
    }

    // MARK: - The stated rule, on random events

    /// SplitMix64 (Vigna), so the random test is repeatable.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func unit() -> Double { Double(next() >> 11) * 0x1p-53 }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
        mutating func pick<T>(_ xs: [T]) -> T { xs[below(xs.count)] }
    }

    @Test("random events: no app starts before it is eligible, and none online within its budget waits past its due-by",
          arguments: 0..<40)
    func statedRule(seed: UInt64) throws {
        var g = Random(state: seed &* 0x2545_F491_4F6C_DD1D)
        var policy = FetchPlanner()
        policy.dailyBudget = g.pick([60, 600, 3600])
        policy.toleranceFraction = g.pick([0.05, 0.2, 0.5, 1])
        var t = 1_767_571_200 + g.unit() * 86400
        let ids = (0..<(1 + g.below(5))).map { "app\($0)" }
        let apps = ids.map { id -> S.App in
            let last: Double? = g.below(3) == 0 ? nil : t - g.unit() * 20000
            let habit = g.unit() * 86400
            return S.App(
                id: id, interval: g.pick([nil, 60, 300, 600, 900, 3600, 7200]), registeredAt: t - g.unit() * 7200,
                record: S.Record(lastFetch: last, lastResult: last == nil ? nil : g.pick([.newData, .noData, .failed]),
                                 consecutiveFailures: g.below(4), consecutiveNoData: g.below(4), lastTimedOut: g.below(4) == 0),
                recentRuns: (0..<g.below(3)).map { _ in S.Span(start: t - g.unit() * 86400, seconds: g.unit() * 400) }.sorted { $0.start < $1.start },
                uses: g.below(2) == 0 ? [t - 2 * 86400 + habit, t - 86400 + habit] : [])
        }
        func randomConditions() -> S.Conditions {
            S.Conditions(online: g.below(4) != 0, lowBattery: g.below(4) == 0, radioTail: g.pick([0, 0.24, 11.576]))
        }
        var s = S(policy: policy, utcOffset: g.pick([0, 3600, -18000]))
        var conditions = randomConditions()
        var timerAt: Double?
        var running: [String: (start: Double, end: Double)] = [:]
        // What the scheduler stated after the previous event (nil while running), and when.
        var stated: [String: (eligibleAt: Double, dueBy: Double?)] = [:]
        var statedAt = t
        var statedOnline = conditions.online
        var starts = 0

        func feed(_ event: S.Event, ending: (id: String, start: Double)? = nil) {
            let now = event.now
            let before = running
            // Nothing idle, online and within budget was left past its due-by (or past the
            // moment it was stated, when it was overdue already).
            if statedOnline {
                for (id, p) in stated where before[id] == nil {
                    if let d = p.dueBy { #expect(now <= max(d, statedAt) + 0.001, "seed \(seed): \(id) due by \(d), idle at \(now)") }
                }
            }
            let actions = s.handle(event)
            for action in actions {
                switch action {
                case let .startFetch(list, trigger):
                    #expect(!list.isEmpty)
                    for id in list {
                        #expect(before[id] == nil, "seed \(seed): \(id) started twice")
                        starts += 1
                        if trigger == .scheduled {
                            let p = try? #require(stated[id], "seed \(seed): \(id) started without a promise at \(event)")
                            if let p {
                                #expect(p.eligibleAt <= now + 0.001, "seed \(seed): \(id) started at \(now), eligible at \(p.eligibleAt)")
                                if statedOnline, let d = p.dueBy {
                                    #expect(now <= max(d, statedAt) + 0.001, "seed \(seed): \(id) started at \(now), due by \(d)")
                                }
                            }
                            #expect(conditions.online)
                        } else {
                            guard case .fetchRequested(id, _) = event else {
                                Issue.record("seed \(seed): a manual start without a request")
                                continue
                            }
                        }
                        running[id] = (now, now + g.unit() * 60)
                    }
                case let .setTimer(at):
                    #expect(at >= now - 0.001)
                    timerAt = at
                case .cancelTimer:
                    timerAt = nil
                case let .save(id, record):
                    #expect(id == ending?.id && record.lastFetch == ending?.start, "seed \(seed): \(id) saved a record of another run")
                    #expect(record == s.apps[id]?.record)
                case let .refuseFetch(id, _):
                    #expect(before[id] != nil || !ids.contains(id))
                    #expect(s.running.contains(id) || !ids.contains(id))
                case .explain:
                    break
                }
            }
            // The driver's one timer is the scheduler's: the planned window, or earlier when an
            // app's daily budget frees before it.
            #expect(timerAt == s.timerAt, "seed \(seed) at \(now)")
            if let at = s.planned?.at { #expect(timerAt.map { $0 <= at } == true, "seed \(seed) at \(now)") }
            if !conditions.online { #expect(timerAt == nil) }
            // The driver and the scheduler agree on what runs.
            #expect(Set(running.keys) == s.running, "seed \(seed) at \(now)")
            stated = [:]
            for id in ids where running[id] == nil {
                if let p = s.promise(id, now: now) { stated[id] = p }
            }
            statedAt = now
            statedOnline = conditions.online
            // An app that only joins others' windows still gets a wake of its own (when its budget frees).
            if conditions.online, stated.values.contains(where: { $0.dueBy == nil }) {
                #expect(timerAt != nil, "seed \(seed) at \(now): an app over its budget and no timer")
            }
        }

        feed(.started(apps: apps, conditions: conditions, now: t))
        for _ in 0..<400 {
            let random = t + (g.below(4) == 0 ? 0 : g.unit() * 900)
            let end = running.min { $0.value.end < $1.value.end }
            let next = min(random, end?.value.end ?? .infinity, timerAt ?? .infinity)
            t = next
            if next == timerAt {
                timerAt = nil
                feed(.timerFired(now: next))
            } else if let end, next == end.value.end {
                running[end.key] = nil
                let result = g.pick([FetchResult.newData, .noData, .failed])
                let ending = S.FetchEnding(result: result, timedOut: result == .failed && g.below(2) == 0)
                feed(.handlerEnded(app: end.key, fetch: ending, startedAt: end.value.start, endedAt: next), ending: (end.key, end.value.start))
            } else {
                switch g.below(8) {
                case 0: feed(.fetchRequested(app: g.below(6) == 0 ? "ghost" : g.pick(ids), now: next))
                case 1:
                    if let id = running.keys.sorted().first {
                        running[id] = nil
                        feed(.fetchAbandoned(app: id, now: next))
                    }
                case 2: feed(.handlerEnded(app: g.pick(ids), fetch: nil, startedAt: next - g.unit() * 300, endedAt: next))
                case 3:
                    conditions = randomConditions()
                    feed(.conditionsChanged(conditions, now: next))
                case 4: feed(.radioUsed(now: next))
                case 5: feed(.used(app: g.pick(ids), now: next))
                case 6: feed(.timerFired(now: next))  // stale, or one that raced a replacement
                default:
                    // drowsed restarts: running fetches are gone, the scheduler starts from what it kept.
                    running = [:]
                    conditions = randomConditions()
                    feed(.started(apps: s.order.compactMap { s.apps[$0] }, conditions: conditions, now: next))
                }
            }
        }
        _ = starts
    }

    // MARK: - Traces

    static let everyEvent: [S.Event] = [
        .started(apps: [
            S.App(id: "weather", interval: 900.5, registeredAt: 1_767_571_200.123_456_7,
                  record: S.Record(lastFetch: 1_767_572_000.000_001, lastResult: .noData, consecutiveFailures: 3, consecutiveNoData: 2,
                                   lastTimedOut: true),
                  recentRuns: [S.Span(start: 1_767_571_300.25, seconds: 0.1 + 0.2), S.Span(start: 1_767_571_400, seconds: 86400)],
                  uses: [1_767_600_000.5, 1_767_686_400]),
            S.App(id: "off", interval: nil, registeredAt: 0),
            S.App(id: "fresh", interval: 60, registeredAt: 5, record: S.Record(lastFetch: nil, lastResult: .failed)),
        ], conditions: S.Conditions(online: false, lowBattery: true, radioTail: 11.576), now: 1_767_571_200.987_654_3),
        .started(apps: [], conditions: S.Conditions(online: true, radioTail: 0), now: 0),
        .fetchRequested(app: "weather", now: 1e9 + 1.0 / 3),
        .fetchAbandoned(app: "weather", now: 2),
        .handlerEnded(app: "weather", fetch: S.FetchEnding(result: .newData), startedAt: 10.1, endedAt: 12.7),
        .handlerEnded(app: "weather", fetch: S.FetchEnding(result: .failed, timedOut: true), startedAt: 10, endedAt: 40),
        .handlerEnded(app: "weather", fetch: S.FetchEnding(result: .noData), startedAt: 10, endedAt: 10),
        .handlerEnded(app: "weather", fetch: nil, startedAt: 10, endedAt: 11),
        .conditionsChanged(S.Conditions(online: true, lowBattery: true, radioTail: 0.238), now: 3),
        .radioUsed(now: 4.000_000_000_1),
        .used(app: "weather", now: 5),
        .timerFired(now: 1_767_571_200.1),
    ]

    @Test("every event encodes to JSON and decodes back equal, also through its text")
    func eventJSON() throws {
        for event in Self.everyEvent {
            #expect(try S.Event(json: event.json) == event)
            let text = event.json.serialized
            #expect(try S.Event(json: try JSON.parse(text)) == event, "\(text)")
            #expect(event.json["now"]?.doubleValue == (event.json["type"]?.stringValue == "handler_ended" ? nil : event.now))
        }
        // Every kind is covered.
        let types = Set(Self.everyEvent.compactMap { $0.json["type"]?.stringValue })
        #expect(types == ["started", "fetch_requested", "fetch_abandoned", "handler_ended", "conditions_changed", "radio_used", "used", "timer_fired"])
    }

    @Test("a trace event of an unknown type or without a field it needs is refused, saying which")
    func eventJSONErrors() throws {
        func error(_ text: String) throws -> String? {
            do {
                _ = try S.Event(json: try JSON.parse(text))
                return nil
            } catch let e as S.TraceError {
                return e.description
            }
        }
        #expect(try error(#"{"type": "teleport", "now": 1}"#) == "unknown event type 'teleport'")
        #expect(try error(#"{"now": 1}"#) == "unknown event type ''")
        #expect(try error(#"{"type": "timer_fired"}"#) == "timer_fired: 'now' is missing")
        #expect(try error(#"{"type": "used", "now": 1}"#) == "used: 'app' is missing")
        #expect(try error(#"{"type": "handler_ended", "app": "a", "fetch": {"result": "maybe"}, "started_at": 1, "ended_at": 2}"#)
            == "handler_ended: 'fetch.result' is missing")
        #expect(try error(#"{"type": "conditions_changed", "now": 1, "conditions": {"online": true}}"#)
            == "conditions: expected online, low_battery, radio_tail")
        #expect(try error(#"{"type": "started", "now": 1, "conditions": {"online": true, "low_battery": false, "radio_tail": 0}, "apps": [{"id": "a"}]}"#)
            == "app: expected id, registered_at, record")
    }

    @Test("fromTrace(header:) makes a scheduler with the same policy and time zone, which answers events alike")
    func traceHeader() throws {
        var policy = FetchPlanner()
        policy.toleranceFraction = 0.3
        policy.maxTolerance = 1234.5
        policy.maxBackoffDoublings = 3
        policy.maxNoDataStretch = 2.5
        policy.dailyBudget = 77
        policy.usageLead = 120
        policy.lowBatteryStretch = 4
        let original = S(policy: policy, utcOffset: -18000)
        let copy = try S.fromTrace(header: original.traceHeader)
        #expect(copy.utcOffset == -18000)
        let p = copy.policy
        #expect(p.toleranceFraction == 0.3 && p.maxTolerance == 1234.5 && p.maxBackoffDoublings == 3 && p.maxNoDataStretch == 2.5)
        #expect(p.dailyBudget == 77 && p.usageLead == 120 && p.lowBatteryStretch == 4)
        // Through the header's text as well, and the defaults too.
        let viaText = try S.fromTrace(header: try JSON.parse(original.traceHeader.serialized))
        #expect(viaText.traceHeader == original.traceHeader)
        #expect(try S.fromTrace(header: S().traceHeader).traceHeader == S().traceHeader)
        // Same events, same actions.
        var a = original, b = copy
        let events: [S.Event] = [
            .started(apps: [Self.app("x", every: 600, last: 0), Self.app("y", every: 900, last: 100, failures: 2)],
                     conditions: S.Conditions(online: true, lowBattery: true, radioTail: 5), now: 0),
            .timerFired(now: 2000), Self.ended("x", .noData, 2000, 2003), .radioUsed(now: 2500), .used(app: "x", now: 3000),
        ]
        for e in events { #expect(a.handle(e) == b.handle(e)) }
        // A header that is not one, or lacks a setting, is refused.
        #expect(throws: S.TraceError("the first line is not a scheduler config")) { try S.fromTrace(header: .object([("type", "started")])) }
        guard case .object(let members) = original.traceHeader else { throw S.TraceError("the header is not an object") }
        let partial = JSON.object(members.filter { $0.0 != "daily_budget" })
        #expect(throws: S.TraceError("config: 'daily_budget' is missing")) { try S.fromTrace(header: partial) }
    }
}
