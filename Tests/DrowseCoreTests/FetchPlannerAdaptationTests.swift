@testable import DrowseCore
import Testing

/// The planner's adaptation, budgets, piggybacking and usage learning, on a manual clock.
@Suite("FetchPlanner adaptation")
struct FetchPlannerAdaptationTests {
    typealias App = FetchPlanner.AppInput

    static func app(_ id: String, every: Int64?, last: Double? = nil, failures: Int = 0, noData: Int = 0,
                    timedOut: Bool = false, runtime: Double = 0, use: Double? = nil) -> App {
        App(id: id, interval: every.map { .seconds($0) }, lastFetch: last, consecutiveFailures: failures, registeredAt: 0,
            consecutiveNoData: noData, lastTimedOut: timedOut, runtimeToday: runtime, predictedUse: use)
    }

    @Test("no-data results stretch the interval by half each, at most 4x; new data (0) restores it")
    func noDataStretch() {
        let p = FetchPlanner()
        #expect(p.effectiveInterval(Self.app("a", every: 600, noData: 0)) == 600)
        #expect(p.effectiveInterval(Self.app("a", every: 600, noData: 1)) == 900)
        #expect(p.effectiveInterval(Self.app("a", every: 600, noData: 4)) == 1800)
        #expect(p.effectiveInterval(Self.app("a", every: 600, noData: 100)) == 2400)
    }

    @Test("no-data stretches only the app's own window: it rides windows others open from its interval on")
    func noDataRidesAlong() throws {
        let p = FetchPlanner()
        // Two no-data results: eligible after its 600 s interval, due by its stretched 1200 s
        // plus the tolerance (300 s of the 600 s interval).
        let quiet = Self.app("quiet", every: 600, last: 0, noData: 2)
        #expect(p.eligibleInterval(quiet) == 600 && p.effectiveInterval(quiet) == 1200)
        #expect(p.eligibleAt(quiet) == 600 && p.dueBy(quiet) == 1500 && p.tolerance(quiet) == 300)
        // Alone it wakes the radio only when its stretched interval and tolerance have passed.
        #expect(p.nextWindow([quiet], now: 600) == FetchPlanner.Window(at: 1500, apps: ["quiet"]))
        // Another app's window at 700, after its interval: it rides along, no wake of its own.
        let busy = Self.app("busy", every: 300, last: 250)  // eligible 550, due by 700
        #expect(p.nextWindow([quiet, busy], now: 600) == FetchPlanner.Window(at: 700, apps: ["busy", "quiet"]))
        // A window before its interval has passed: it does not join (never before eligible).
        let early = Self.app("early", every: 300, last: 100)  // due by 550
        #expect(p.nextWindow([quiet, early], now: 500) == FetchPlanner.Window(at: 550, apps: ["early"]))
        let plan = p.plans([quiet], now: 600)[0]
        #expect(plan.eligibleAt == 600 && plan.dueBy == 1500 && plan.plannedAt == 1500)
        #expect(plan.reason.contains("2 no-data results in a row stretched the interval to 20m (it rides windows other apps open from 10m)"))
        // Failures still push eligibility itself back: a failing server is not asked sooner.
        let failing = Self.app("failing", every: 600, last: 0, failures: 2)
        #expect(p.eligibleAt(failing) == 2400 && p.dueBy(failing) == 2700)
        #expect(p.nextWindow([failing, busy], now: 600) == FetchPlanner.Window(at: 700, apps: ["busy"]))
    }

    @Test("a deadline kill costs one more doubling than a plain failure")
    func deadlinePenalty() {
        let p = FetchPlanner()
        #expect(p.effectiveInterval(Self.app("a", every: 600, failures: 1)) == 1200)
        #expect(p.effectiveInterval(Self.app("a", every: 600, failures: 1, timedOut: true)) == 2400)
        let plan = p.plans([Self.app("a", every: 600, last: 0, failures: 1, timedOut: true)], now: 10)[0]
        #expect(plan.reason.contains("killed at its deadline"))
    }

    @Test("an app past its daily budget opens no window but joins one another app opens")
    func budget() throws {
        var p = FetchPlanner()
        p.dailyBudget = 60
        let spent = Self.app("spent", every: 300, last: 0, runtime: 61)      // eligible 300
        let other = Self.app("other", every: 900, last: 0)                    // eligible 900, tolerance 450
        let w = try #require(p.nextWindow([spent, other], now: 310))
        #expect(w.at == 1350 && w.apps == ["other", "spent"])
        #expect(p.nextWindow([spent], now: 310) == nil)
        let plan = p.plans([spent], now: 310)[0]
        #expect(plan.reason.contains("budget"))
        // It promises nothing of its own: no due-by, no planned time.
        #expect(plan.dueBy == nil && plan.plannedAt == nil && plan.eligibleAt == 300)
        #expect(p.dueBy(spent) == nil && p.dueBy(other) == 1350)
        // Under the budget again, it opens its own window at the end of its tolerance.
        var fresh = spent
        fresh.runtimeToday = 59
        #expect(p.nextWindow([fresh], now: 310) == FetchPlanner.Window(at: 450, apps: ["spent"]))
    }

    @Test("while the radio is awake, apps that become eligible before its tail ends ride along")
    func piggyback() throws {
        var p = FetchPlanner()
        let a = Self.app("a", every: 600, last: 0)  // eligible 600, would wait until 900
        #expect(p.nextWindow([a], now: 590)?.at == 900)
        p.radioAwakeUntil = 605  // a notification handler is using the radio
        #expect(p.nextWindow([a], now: 590) == FetchPlanner.Window(at: 600, apps: ["a"]))
        // Already eligible while the radio is awake: at once.
        #expect(p.nextWindow([a], now: 602) == FetchPlanner.Window(at: 602, apps: ["a"]))
        p.radioAwakeUntil = 595  // the tail ends before it is eligible: no early wake
        #expect(p.nextWindow([a], now: 590)?.at == 900)
        // Piggybacking never runs an app before it is eligible.
        p.radioAwakeUntil = 10_000
        #expect(try #require(p.nextWindow([a], now: 100)).at >= 600)
    }

    @Test("a predicted use moves the fetch before it to run shortly before the use")
    func usagePrefetch() throws {
        var p = FetchPlanner()
        p.usageLead = 300
        let h = 3600.0
        // Hourly app, last fetch 11:40 → eligible 12:40 (tolerance 30 min → 13:10); used at 13:00:
        // it runs at 12:55, within its tolerance.
        let a = Self.app("a", every: 3600, last: 11 * h + 2400, use: 13 * h)
        let w = try #require(p.nextWindow([a], now: 12 * h + 2400))
        #expect(w.at == 13 * h - 300)
        #expect(p.plans([a], now: 12 * h + 2400)[0].reason.hasPrefix("prefetch for usage"))
        // Further ahead: fetch as usual while a chain of fetches can still land on the use.
        let far = Self.app("a", every: 3600, last: 11 * h + 1200, use: 15 * h)
        // (eligible 12:20, at the end of its tolerance 12:50; from there two fetches, each 1 h to
        // 1 h 30 min after the one before, can land on 14:55.)
        #expect(try #require(p.nextWindow([far], now: 12 * h + 1200)).at == 12 * h + 1200 + 1800)
        // ... and when the usual time would miss it, shift this fetch (within its tolerance) so a
        // later one can: last 11:20, eligible 12:20, use 14:40 so the fetch before it at 14:35.
        // From 12:50 that is 1 h 45 min: more than one interval plus its tolerance (1 h 30 min),
        // less than two intervals (2 h), so 12:50 would miss it. From 12:20 (eligibility, where an
        // app runs when others open windows) it is 2 h 15 min: two fetches can land on it. Run then.
        let shift = Self.app("a", every: 3600, last: 11 * h + 1200, use: 14 * h + 2400)
        let at = try #require(p.nextWindow([shift], now: 12 * h + 1200)).at
        #expect(at == 12 * h + 1200)
        #expect(at >= 12 * h + 1200 && at <= 12 * h + 1200 + 1800)
        #expect(p.plans([shift], now: 12 * h + 1200)[0].reason.hasPrefix("prefetch for usage"))
        // The chain then lands: at 12:20 + 1 h the next fetch is eligible (13:20) and runs at once
        // (the one after must be eligible by 14:35), and that one's successor runs at 14:35.
        let next = Self.app("a", every: 3600, last: at, use: 14 * h + 2400)
        #expect(try #require(p.nextWindow([next], now: at + 3600)).at == at + 3600)
        let last = Self.app("a", every: 3600, last: at + 3600, use: 14 * h + 2400)
        #expect(try #require(p.nextWindow([last], now: at + 7200)).at == 14 * h + 2100)
        // Never earlier than eligible: a use right after the last fetch does not pull it forward.
        let soon = Self.app("a", every: 3600, last: 12 * h + 3000, use: 13 * h)
        #expect(try #require(p.nextWindow([soon], now: 12 * h + 3000)).at >= 12 * h + 3000 + 3600)
    }

    @Test("a window waits for an app that becomes eligible just after, within its tolerance")
    func waitsForNeighbour() throws {
        let p = FetchPlanner()
        let h = 3600.0
        // a prefetches for a use at 13:00: eligible 12:40, planned 12:55, due by 13:10.
        let a = Self.app("a", every: 3600, last: 11 * h + 2400, use: 13 * h)
        #expect(p.nextWindow([a], now: 12 * h) == FetchPlanner.Window(at: 13 * h - 300, apps: ["a"]))
        // b becomes eligible at 12:57: a window held for a use does not wait past its moment (the
        // use may come early), so b is not in it.
        let b = Self.app("b", every: 600, last: 12 * h + 2820)
        #expect(p.nextWindow([a, b], now: 12 * h) == FetchPlanner.Window(at: 13 * h - 300, apps: ["a"]))
        // A window riding an awake radio waits for an app that becomes eligible before the radio
        // sleeps, as long as every member stays within its due-by: x (eligible 12:52, due by
        // 13:22) rides the radio awake until 12:58:20 and waits for y (eligible 12:54) ...
        var awake = p
        awake.radioAwakeUntil = 12 * h + 3500
        let x = Self.app("x", every: 3600, last: 11 * h + 3120)
        let y = Self.app("y", every: 3600, last: 11 * h + 3240)
        #expect(awake.nextWindow([x, y], now: 12 * h + 3000) == FetchPlanner.Window(at: 12 * h + 3240, apps: ["x", "y"]))
        // ... but not for c (eligible 12:59), after the radio has gone back to sleep.
        let c = Self.app("c", every: 3600, last: 11 * h + 3540)
        #expect(awake.nextWindow([x, c], now: 12 * h + 3000) == FetchPlanner.Window(at: 12 * h + 3120, apps: ["x"]))
        // ... and for no one past a member's due-by: d (due by 12:52:30, riding) caps the wait.
        let d = Self.app("d", every: 300, last: 12 * h + 2700)  // eligible 12:50, due by 12:52:30
        #expect(awake.nextWindow([d, y], now: 12 * h + 3000) == FetchPlanner.Window(at: 12 * h + 3000, apps: ["d"]))
        // A window at the end of a member's tolerance never waits: one second later is too late.
        let e = Self.app("e", every: 300, last: 0)    // eligible 300, tolerance 150 → 450
        let f = Self.app("f", every: 300, last: 151)  // eligible 451
        #expect(p.nextWindow([e, f], now: 0) == FetchPlanner.Window(at: 450, apps: ["e"]))
        let g = Self.app("g", every: 300, last: 150)  // eligible 450: joins
        #expect(p.nextWindow([e, g], now: 0) == FetchPlanner.Window(at: 450, apps: ["e", "g"]))
    }

    @Test("a low battery stretches tolerances")
    func lowBattery() throws {
        var p = FetchPlanner()
        let a = Self.app("a", every: 600, last: 0)
        #expect(p.nextWindow([a], now: 0)?.at == 900)
        #expect(p.dueBy(a) == 900)
        p.lowBattery = true
        #expect(p.nextWindow([a], now: 0)?.at == 1500)
        #expect(p.dueBy(a) == 1500)
    }
}

@Suite("UsageModel")
struct UsageModelTests {
    @Test("one use is no habit; the same time on two days is")
    func habit() throws {
        let day = 86400.0
        var m = UsageModel()
        m.record(13 * 3600)
        #expect(m.nextUse(after: 14 * 3600) == nil)
        m.record(day + 13 * 3600 + 120)
        let next = try #require(m.nextUse(after: day + 14 * 3600))
        #expect(abs(next - (2 * day + 13 * 3600)) <= 120)
    }

    @Test("a local time zone shifts time of day")
    func timezone() throws {
        let day = 86400.0
        var m = UsageModel(utcOffset: 3600)  // UTC+1: 13:00 local is 12:00 UTC
        m.record(12 * 3600)
        m.record(day + 12 * 3600)
        let next = try #require(m.nextUse(after: day + 13 * 3600))
        #expect(next == 2 * day + 12 * 3600)
    }

    @Test("a habit grows as its uses spread: uses within 20 min of a neighbour on other days join it, its earliest use is the prediction")
    func spreadingHabit() throws {
        let day = 86400.0
        // Read at 08:00, 07:45, 08:15, 07:50 on four days: 30 min wide, wider than the 20 min window.
        var m = UsageModel()
        for (d, minute) in [(0, 480.0), (1, 465), (2, 495), (3, 470)] { m.record(Double(d) * day + minute * 60) }
        let habits = m.habits(period: day)
        #expect(habits == [UsageModel.Habit(earliest: 465 * 60, spread: 30 * 60, periods: 4)])
        // The next use is expected from the earliest seen, 07:45, not from a typical day.
        #expect(m.nextUse(after: 3 * day + 12 * 3600) == 4 * day + 465 * 60)
        // Two habits of one app stay apart when nothing links them (07:40 and 08:10, 30 min apart).
        var t = UsageModel()
        for d in 0..<2 { t.record(Double(d) * day + 460 * 60); t.record(Double(d) * day + 490 * 60) }
        #expect(t.habits(period: day).map(\.earliest) == [460 * 60, 490 * 60])
        #expect(t.nextUse(after: day + 470 * 60) == day + 490 * 60)
        // A habit across midnight: 23:55 and 00:05 on different days are one habit starting at 23:55.
        var n = UsageModel()
        n.record(day - 300)
        n.record(2 * day + 300)
        #expect(n.habits(period: day) == [UsageModel.Habit(earliest: day - 300, spread: 600, periods: 2)])
        #expect(n.nextUse(after: 2 * day + 3600) == 3 * day - 300)
    }

    @Test("uses at different times of day make no habit")
    func noise() {
        var m = UsageModel()
        m.record(3 * 3600)
        m.record(86400 + 15 * 3600)
        #expect(m.nextUse(after: 2 * 86400) == nil)
    }
}

@Suite("RadioModel")
struct RadioModelTests {
    @Test("one isolated fetch on LTE costs one promotion and a full tail")
    func single() {
        let u = RadioModel.lte.usage(of: [(start: 100, end: 102)])
        #expect(u.promotions == 1)
        #expect(abs(u.radioOnSeconds - (0.260 + 2 + 11.576)) < 1e-9)
    }

    @Test("fetches inside each other's tail share a promotion; far apart they do not")
    func sharing() {
        let near = RadioModel.lte.usage(of: [(start: 0, end: 1), (start: 5, end: 6)])
        #expect(near.promotions == 1)
        #expect(abs(near.radioOnSeconds - (0.260 + 1 + 4 + 1 + 11.576)) < 1e-9)
        let far = RadioModel.lte.usage(of: [(start: 0, end: 1), (start: 100, end: 101)])
        #expect(far.promotions == 2)
        #expect(far.joules > near.joules)
    }

    @Test("Wi-Fi's short tail makes coalescing worth less than on LTE")
    func wifi() {
        let acts = [(start: 0.0, end: 1.0), (start: 60.0, end: 61.0)]
        #expect(RadioModel.wifi.usage(of: acts).radioOnSeconds < RadioModel.lte.usage(of: acts).radioOnSeconds)
    }
}
