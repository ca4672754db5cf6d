import DrowseCore
import Testing

@Suite("RolloutPlan")
struct RolloutPlanTests {
    static let fleet = (1...20).map { "dev-\($0 < 10 ? "0" : "")\($0)" }

    @Test("stages are cumulative shares, at least one device each, every device once, in seed order")
    func stages() {
        let plan = RolloutPlan(id: "u1", devices: Self.fleet.reversed(), shares: [0.05, 1], abortAfter: 1)
        #expect(plan.stages.map(\.count) == [1, 19])
        #expect(Set(plan.stages.flatMap { $0 }) == Set(Self.fleet))
        let seeds = plan.stages.flatMap { $0 }.map { RolloutDelay.seed(deviceID: $0, notificationID: "u1") }
        #expect(seeds == seeds.sorted())
        // A rerun of the same push (any order of the listing) picks the same first stage; another
        // push another one, not the first names.
        #expect(RolloutPlan(id: "u1", devices: Self.fleet, shares: [0.05, 1], abortAfter: 1) == plan)
        let others = (1...20).map { RolloutPlan(id: "u\($0)", devices: Self.fleet, shares: [0.05, 1], abortAfter: 1).stages[0] }
        #expect(Set(others).count > 1)
        #expect(RolloutPlan(id: "x", devices: Self.fleet, shares: [0.25, 0.5, 1], abortAfter: 1).stages.map(\.count) == [5, 5, 10])
        // Small groups: a stage adds a device at least, and stops when none is left.
        #expect(RolloutPlan(id: "x", devices: ["a", "b"], shares: [0.01, 0.02, 0.5, 1], abortAfter: 1).stages.map(\.count) == [1, 1])
        #expect(RolloutPlan(id: "x", devices: ["a", "a"], shares: [1], abortAfter: 1).stages == [["a"]])
    }

    @Test("--stages text", arguments: [("5%,100%", [0.05, 1.0] as [Double]?), ("100%", [1]), (" 10% , 50%,100%", [0.1, 0.5, 1]),
                                       ("5%", nil), ("50%,10%,100%", nil), ("0%,100%", nil), ("5,100", nil), ("5%,,100%", nil),
                                       ("100%,100%", nil), ("nan%,100%", nil), ("", nil)])
    func shares(text: String, want: [Double]?) {
        #expect(RolloutPlan.parseShares(text) == want)
    }

    @Test("a stage waits for every device's final state, goes on below the threshold, stops at it")
    func decide() {
        let plan = RolloutPlan(id: "u1", devices: Self.fleet, shares: [0.25, 1], abortAfter: 2)
        let first = plan.stages[0]
        let ok = UpdateReport(id: "u1", state: .committed)
        var r: [String: UpdateReport] = [:]
        #expect(plan.decide(stage: 0, reports: r, timedOut: false) == .wait)
        for d in first { r[d] = UpdateReport(id: "u1", state: .checking) }
        #expect(plan.decide(stage: 0, reports: r, timedOut: false) == .wait)
        r[first[0]] = UpdateReport(id: "u1", state: .rolledBack, reason: "unhealthy")
        for d in first.dropFirst() { r[d] = ok }
        #expect(plan.decide(stage: 0, reports: r, timedOut: false) == .next(silent: []))
        r[first[1]] = UpdateReport(id: "u1", state: .failed)
        #expect(plan.decide(stage: 0, reports: r, timedOut: false) == .abort(failed: [first[0], first[1]]))
        #expect(plan.untouched(after: 0) == plan.stages[1])
        // The threshold stops a stage before its other devices are over.
        var early: [String: UpdateReport] = [first[3]: UpdateReport(id: "u1", state: .failed), first[4]: UpdateReport(id: "u1", state: .rolledBack)]
        #expect(plan.decide(stage: 0, reports: early, timedOut: false) == .abort(failed: [first[3], first[4]]))
        // At the timeout the stage is over with what it has; the silent devices are named.
        early[first[4]] = ok
        #expect(plan.decide(stage: 0, reports: early, timedOut: true) == .next(silent: [first[0], first[1], first[2]]))
        let last = Dictionary(uniqueKeysWithValues: plan.stages[1].map { ($0, ok) })
        #expect(plan.decide(stage: 1, reports: last, timedOut: false) == .done(silent: []))
    }

    @Test("a device's report of this rollout is the one with its id, in any package")
    func report() {
        let plan = RolloutPlan(id: "u2", devices: ["a"], shares: [1], abortAfter: 1)
        var s = FleetStatus(online: true)
        #expect(plan.report(in: s) == nil && plan.report(in: nil) == nil)
        s.updates["drowse"] = UpdateReport(id: "u1", state: .failed)
        #expect(plan.report(in: s) == nil)
        s.updates["weather-app"] = UpdateReport(id: "u2", state: .installing)
        #expect(plan.report(in: s) == UpdateReport(id: "u2", state: .installing))
    }
}
