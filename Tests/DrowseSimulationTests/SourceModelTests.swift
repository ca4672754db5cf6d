@testable import DrowseSimulation
import DrowseCore
import Testing

/// `updates = ...`: a run finds new data exactly when the source published since the app's last
/// new-data run began, for every strategy alike.
@Suite("Simulator source model")
struct SourceModelTests {
    static func scenario(interval: Int64, updates: Double?, results: [Scenario.Outcome] = [.new]) -> Scenario {
        var app = Scenario.App(id: "src", interval: .every(.seconds(interval)), duration: 1...1, results: results)
        app.updates = updates
        return Scenario(duration: 86400, apps: [app])
    }

    @Test("fetching four times per update finds new data once per update, whatever the strategy")
    func newOncePerUpdate() {
        let sim = Simulator(Self.scenario(interval: 900, updates: 3600))
        for runs in [sim.runNaive(), sim.runAndroid(), sim.runDrowse()] {
            let fresh = runs.filter { $0.outcome == .new }
            // 24 publications in the day, plus the first fetch (the app had nothing yet).
            #expect(fresh.count >= 23 && fresh.count <= 25, "\(fresh.count) new-data runs")
            #expect(runs.count > fresh.count + 20)
        }
        let naive = sim.runNaive()
        #expect(naive.filter { $0.outcome == .no }.count >= 60)
    }

    @Test("failures still come from results; without updates, results decide new and no")
    func failuresStay() {
        let flaky = Simulator(Self.scenario(interval: 600, updates: 60, results: [.new, .failed]))
        let runs = flaky.runNaive()
        #expect(runs.filter { $0.outcome == .failed }.count == runs.count / 2)
        #expect(runs.filter { $0.outcome == .new }.count == runs.count - runs.count / 2)
        let plain = Simulator(Self.scenario(interval: 600, updates: nil, results: [.new, .no])).runNaive()
        #expect(plain.filter { $0.outcome == .no }.count == plain.count / 2)
    }

    @Test("a run finds new data iff the source published since the last new-data run began")
    func drawRule() {
        let sim = Simulator(Self.scenario(interval: 600, updates: 1000))
        let first = sim.draw(app: 0, run: 0, start: sim.scenario.start + 10, lastNew: nil)
        #expect(first.outcome == .new)
        let t = sim.scenario.start + 5000
        #expect(sim.draw(app: 0, run: 1, start: t, lastNew: t - 1).outcome == .no)
        #expect(sim.draw(app: 0, run: 1, start: t, lastNew: t - 1001).outcome == .new)
    }
}
