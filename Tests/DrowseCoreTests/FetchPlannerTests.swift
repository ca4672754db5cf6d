@testable import DrowseCore
import Testing

@Suite("FetchPlanner")
struct FetchPlannerTests {
    typealias App = FetchPlanner.AppInput
    let planner = FetchPlanner()

    static func app(_ id: String, every seconds: Int64?, last: Double? = nil, failures: Int = 0, registered: Double = 0) -> App {
        App(id: id, interval: seconds.map { .seconds($0) }, lastFetch: last, consecutiveFailures: failures, registeredAt: registered)
    }

    // MARK: - Building blocks

    @Test("the effective interval doubles per failure, up to maxBackoffDoublings")
    func effectiveInterval() {
        #expect(planner.effectiveInterval(Self.app("a", every: 900)) == 900)
        #expect(planner.effectiveInterval(Self.app("a", every: 900, failures: 1)) == 1800)
        #expect(planner.effectiveInterval(Self.app("a", every: 900, failures: 3)) == 7200)
        #expect(planner.effectiveInterval(Self.app("a", every: 900, failures: 5)) == 28_800)
        #expect(planner.effectiveInterval(Self.app("a", every: 900, failures: 50)) == 28_800)
        #expect(planner.effectiveInterval(Self.app("a", every: nil, failures: 3)) == nil)
        var p = FetchPlanner()
        p.maxBackoffDoublings = 2
        #expect(p.effectiveInterval(Self.app("a", every: 60, failures: 9)) == 240)
        p.maxBackoffDoublings = 0
        #expect(p.effectiveInterval(Self.app("a", every: 60, failures: 9)) == 60)
    }

    @Test("a never-fetched app is eligible when registered; afterwards one effective interval after its last fetch")
    func eligibility() {
        #expect(planner.eligibleAt(Self.app("a", every: 600, registered: 42)) == 42)
        #expect(planner.eligibleAt(Self.app("a", every: 600, last: 1000, registered: 42)) == 1600)
        #expect(planner.eligibleAt(Self.app("a", every: 600, last: 1000, failures: 2)) == 3400)
        #expect(planner.eligibleAt(Self.app("a", every: nil, last: 1000)) == nil)
        #expect(planner.eligibleAt(Self.app("a", every: nil)) == nil)
    }

    @Test("tolerance is toleranceFraction (50 %) of the base interval, at least 1 s and at most maxTolerance (30 min)")
    func tolerance() {
        #expect(planner.toleranceFraction == 0.5 && planner.maxTolerance == 1800)
        #expect(planner.tolerance(Self.app("a", every: 900)) == 450)
        #expect(planner.tolerance(Self.app("a", every: 1)) == 1)
        #expect(planner.tolerance(Self.app("a", every: 3)) == 1.5)
        #expect(planner.tolerance(Self.app("a", every: 3600)) == 1800)
        #expect(planner.tolerance(Self.app("a", every: 3601)) == 1800)
        #expect(planner.tolerance(Self.app("a", every: 86_400)) == 1800)
        #expect(planner.tolerance(Self.app("a", every: nil)) == 0)
        // Failures stretch the interval, not the tolerance.
        #expect(planner.tolerance(Self.app("a", every: 900, failures: 4)) == 450)
        var p = FetchPlanner()
        p.maxTolerance = 60
        #expect(p.tolerance(Self.app("a", every: 3600)) == 60)
        p = FetchPlanner()
        p.toleranceFraction = 0.2
        #expect(p.tolerance(Self.app("a", every: 900)) == 180)
        p.toleranceFraction = 0.001
        #expect(p.tolerance(Self.app("a", every: 900)) == 1)
    }

    @Test("lateness is the tolerance, and due-by is eligibility plus it (none over the daily budget or for never apps)")
    func latenessAndDueBy() {
        for every: Int64 in [1, 60, 900, 3600, 86_400] {
            let a = Self.app("a", every: every, last: 1000)
            #expect(planner.lateness(a) == planner.tolerance(a))
            #expect(planner.dueBy(a) == 1000 + Double(every) + planner.tolerance(a))
        }
        // From the stretched eligibility, with the base tolerance.
        #expect(planner.dueBy(Self.app("a", every: 600, last: 1000, failures: 2)) == 3700.0)  // 1000 + 2400 + 300
        #expect(planner.dueBy(Self.app("a", every: 600, registered: 42)) == 342.0)  // 42 + 300
        #expect(planner.dueBy(Self.app("a", every: nil, last: 1000)) == nil)
        var spent = Self.app("a", every: 600, last: 1000)
        spent.runtimeToday = planner.dailyBudget
        #expect(planner.dueBy(spent) == nil)
        spent.runtimeToday = planner.dailyBudget - 1
        #expect(planner.dueBy(spent) == 1900)
        var low = planner
        low.lowBattery = true
        #expect(low.lateness(Self.app("a", every: 600)) == 900)
        #expect(low.dueBy(Self.app("a", every: 600, last: 1000)) == 2500)
    }

    // MARK: - Windows

    @Test("nothing to plan without apps or with only never apps")
    func noWindow() {
        #expect(planner.nextWindow([], now: 0) == nil)
        #expect(planner.nextWindow([Self.app("a", every: nil), Self.app("b", every: nil, last: 5)], now: 100) == nil)
    }

    @Test("a single app is planned at the end of its tolerance, not before it is eligible")
    func singleApp() {
        let a = Self.app("a", every: 900, last: 100)  // eligible 1000, tolerance 450
        #expect(planner.nextWindow([a], now: 200) == FetchPlanner.Window(at: 1450, apps: ["a"]))
    }

    @Test("a brand-new app is planned from now")
    func newApp() {
        let a = Self.app("a", every: 900, registered: 50)
        // Registered at 50, so overdue by now: it runs at once.
        #expect(planner.nextWindow([a], now: 500) == FetchPlanner.Window(at: 500, apps: ["a"]))
    }

    @Test("apps due close together share one window")
    func coalescing() throws {
        let apps = [
            Self.app("weather", every: 900, last: 100),     // eligible 1000, tolerance 450 → 1450
            Self.app("news", every: 3600, last: -2500),     // eligible 1100, tolerance 1800 → 2900
            Self.app("mail", every: 600, last: 560),        // eligible 1160, tolerance 300 → 1460
        ]
        let w = try #require(planner.nextWindow(apps, now: 0))
        #expect(w.at == 1450)
        #expect(w.apps == ["mail", "news", "weather"])
    }

    @Test("the window opens at the last moment that keeps every app within its tolerance")
    func windowIsTheTightestDeadline() throws {
        let apps = [
            Self.app("slow", every: 3600, last: 0),         // eligible 3600, tolerance 1800 → 5400
            Self.app("fast", every: 300, last: 3500),       // eligible 3800, tolerance 150  → 3950
        ]
        let w = try #require(planner.nextWindow(apps, now: 0))
        #expect(w.at == 3950)
        #expect(w.apps == ["fast", "slow"])
    }

    @Test("apps eligible after the window wait for a later one")
    func farApartAppsDoNotShare() throws {
        let apps = [Self.app("a", every: 900, last: 100), Self.app("b", every: 900, last: 1100)]
        let w = try #require(planner.nextWindow(apps, now: 0))
        #expect(w == FetchPlanner.Window(at: 1450, apps: ["a"]))
        // After a runs at 1450, b is next: eligible 2000, window 2450, and a (eligible 2350) rides along.
        let after = [Self.app("a", every: 900, last: 1450), Self.app("b", every: 900, last: 1100)]
        #expect(planner.nextWindow(after, now: 1450) == FetchPlanner.Window(at: 2450, apps: ["a", "b"]))
    }

    @Test("never apps are never planned, even beside due apps")
    func neverAppsSkipped() throws {
        let apps = [Self.app("off", every: nil, last: 0), Self.app("on", every: 60, last: 0), Self.app("off2", every: nil)]
        let w = try #require(planner.nextWindow(apps, now: 10_000))
        #expect(w.apps == ["on"])
        let plans = planner.plans(apps, now: 10_000)
        for p in plans where p.id.hasPrefix("off") {
            #expect(p.plannedAt == nil)
            #expect(p.eligibleAt == nil)
            #expect(p.reason.contains("never"))
        }
    }

    @Test("failures stretch the interval: a failing app is planned later than a healthy one")
    func backoffStretches() throws {
        let healthy = Self.app("a", every: 600, last: 0)
        let w0 = try #require(planner.nextWindow([healthy], now: 0))
        #expect(w0.at == 900)
        for failures in 1...7 {
            let failing = Self.app("a", every: 600, last: 0, failures: failures)
            let w = try #require(planner.nextWindow([failing], now: 0))
            let stretched = 600.0 * Double(1 << min(failures, 5))
            #expect(w.at == stretched + 300)  // the tolerance of the base interval
            #expect(w.at > w0.at)
        }
    }

    @Test("a failing app does not drag a healthy one early, and is not run before its stretched interval")
    func backoffWithNeighbours() throws {
        let apps = [Self.app("ok", every: 600, last: 0), Self.app("bad", every: 600, last: 0, failures: 2)]
        let w = try #require(planner.nextWindow(apps, now: 0))
        #expect(w == FetchPlanner.Window(at: 900, apps: ["ok"]))
        #expect(planner.eligibleAt(apps[1]) == 2400)
        #expect(planner.dueBy(apps[1]) == 2700)
    }

    @Test("overdue apps are planned from now, never in the past")
    func overdue() throws {
        let apps = [Self.app("a", every: 60, last: 0), Self.app("b", every: 60, last: 10)]
        let w = try #require(planner.nextWindow(apps, now: 5000))
        #expect(w.at >= 5000)
        #expect(w.apps == ["a", "b"])
    }

    @Test("an app eligible exactly at the window joins it")
    func eligibleAtWindowBoundary() throws {
        let apps = [Self.app("a", every: 900, last: 100), Self.app("b", every: 1000, last: 450)]
        // a: eligible 1000 → 1450. b: eligible 1450, exactly the window.
        let w = try #require(planner.nextWindow(apps, now: 0))
        #expect(w == FetchPlanner.Window(at: 1450, apps: ["a", "b"]))
        // One second later, it waits for the next window.
        let later = [Self.app("a", every: 900, last: 100), Self.app("b", every: 1000, last: 451)]
        #expect(planner.nextWindow(later, now: 0) == FetchPlanner.Window(at: 1450, apps: ["a"]))
    }

    @Test("a window, recomputed before it opens, does not move later")
    func windowDoesNotRecede() throws {
        let a = Self.app("a", every: 900, last: 100)  // eligible 1000, tolerance 450
        let first = try #require(planner.nextWindow([a], now: 900))
        #expect(first.at == 1450)
        // Recomputing once the app is already eligible (say a config reload at 1100, or the timer
        // firing at 1450) must not push the window past eligibility + tolerance.
        #expect(planner.nextWindow([a], now: 1100)?.at == 1450)
        #expect(planner.nextWindow([a], now: 1450)?.at == 1450)
    }

    @Test("invariants hold for many random sets of apps")
    func randomInvariants() throws {
        var rng = SplitMix(seed: 0xD70_5E)
        for _ in 0..<2000 {
            var planner = FetchPlanner()
            planner.lowBattery = rng.next() % 4 == 0
            planner.toleranceFraction = [0.1, 0.2, 0.5, 1.0][Int(rng.next() % 4)]
            let now = Double(rng.next() % 100_000)
            let n = Int(rng.next() % 8)
            let apps = (0..<n).map { i -> App in
                let never = rng.next() % 5 == 0
                let interval = Int64(1 + rng.next() % 20_000)
                let last: Double? = rng.next() % 4 == 0 ? nil : now - Double(rng.next() % 40_000)
                return Self.app("app\(i)", every: never ? nil : interval, last: last,
                    failures: Int(rng.next() % 8), registered: now - Double(rng.next() % 1000))
            }
            let planned = apps.filter { $0.interval != nil }
            guard let w = planner.nextWindow(apps, now: now) else {
                #expect(planned.isEmpty)
                continue
            }
            #expect(!w.apps.isEmpty)
            #expect(w.at >= now)
            #expect(w.apps == w.apps.sorted())
            for app in apps {
                guard let eligible = planner.eligibleAt(app) else {
                    #expect(!w.apps.contains(app.id), "never app \(app.id) planned")
                    continue
                }
                // No app runs before it is eligible (the interval floor).
                if w.apps.contains(app.id) { #expect(eligible <= w.at) }
                // Every app eligible by then rides along.
                if eligible <= w.at { #expect(w.apps.contains(app.id)) }
                // No app waits past its tolerance, even when the window waits for another app
                // (lateness is the tolerance); an app already overdue runs now.
                #expect(planner.lateness(app) == planner.tolerance(app))
                let dueBy = try #require(planner.dueBy(app))
                #expect(dueBy == eligible + planner.tolerance(app))
                #expect(w.at <= max(dueBy, now), "\(app) window \(w) now \(now)")
            }
        }
    }

    // MARK: - Plans

    @Test("plans explain due, shared, waiting and backing-off apps")
    func plans() throws {
        let apps = [
            Self.app("due", every: 600, last: 0),                    // eligible 600
            Self.app("soon", every: 900, last: 0),                   // eligible 900, tolerance 450
            Self.app("later", every: 3600, last: 0),                 // eligible 3600
            Self.app("failing", every: 300, last: 0, failures: 1),   // eligible 600 (stretched)
            Self.app("off", every: nil),
        ]
        let now = 750.0
        // Tolerances run from eligibility: due 600+300=900, failing 600+150=750, soon 900+450=1350;
        // failing is due by now (750), so the window opens now, with both eligible apps.
        let w = try #require(planner.nextWindow(apps, now: now))
        #expect(w == FetchPlanner.Window(at: 750, apps: ["due", "failing"]))
        let plans = planner.plans(apps, now: now)
        #expect(plans.map(\.id) == apps.map(\.id))
        let byID = Dictionary(uniqueKeysWithValues: plans.map { ($0.id, $0) })

        let due = try #require(byID["due"])
        #expect(due.eligibleAt == 600)
        #expect(due.plannedAt == 750)
        #expect(due.tolerance == 300 && due.dueBy == 900)
        #expect(due.reason == "due now (shared with 1 other app)")

        let failing = try #require(byID["failing"])
        #expect(failing.plannedAt == 750)
        #expect(failing.tolerance == 150 && failing.dueBy == 750)
        #expect(failing.reason == "due now (shared with 1 other app); backing off after 1 failure (interval stretched to 10m)")

        let soon = try #require(byID["soon"])
        #expect(soon.eligibleAt == 900)
        #expect(soon.plannedAt == 1350)
        #expect(soon.dueBy == 1350)
        #expect(soon.reason == "waiting for its 15m interval")

        let later = try #require(byID["later"])
        #expect(later.plannedAt == 5400)
        #expect(later.tolerance == 1800 && later.dueBy == 5400)
        #expect(later.reason == "waiting for its 1h interval")

        let off = try #require(byID["off"])
        #expect(off.plannedAt == nil)
        #expect(off.reason == "background fetch is off (minimum_interval = never)")
        #expect(off.tolerance == nil && off.dueBy == nil)
    }

    @Test("a lone app in a future window is 'in the next wake window'")
    func planNextWindow() throws {
        let plans = planner.plans([Self.app("a", every: 600, last: 0)], now: 100)
        #expect(plans == [FetchPlanner.AppPlan(id: "a", eligibleAt: 600, plannedAt: 900, reason: "in the next wake window",
                                               tolerance: 300, dueBy: 900)])
    }

    @Test("a backing-off app outside the window says how far its interval stretched")
    func planBackingOff() throws {
        let apps = [Self.app("ok", every: 60, last: 0), Self.app("bad", every: 60, last: 0, failures: 3)]
        let plans = planner.plans(apps, now: 60)
        let bad = try #require(plans.first { $0.id == "bad" })
        #expect(bad.eligibleAt == 480)
        #expect(bad.plannedAt == 510)
        #expect(bad.dueBy == 510)
        #expect(bad.reason == "waiting for its 1m interval; backing off after 3 failures (interval stretched to 8m)")
    }

    @Test("shared windows count the other apps in the plural")
    func planPlural() throws {
        let apps = (0..<4).map { Self.app("a\($0)", every: 600, last: 0) }
        let plans = planner.plans(apps, now: 600)
        #expect(plans.allSatisfy { $0.reason == "eligible; waiting for the wake window (shared with 3 other apps)" })
        #expect(Set(plans.compactMap(\.plannedAt)) == [900])
    }
}

/// A small deterministic generator, so the random test is repeatable.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
