@testable import DrowseSimulation
import DrowseCore
import Testing

@Suite("Scenario notifications and the wire plan")
struct WirePlanTests {
    static let base = """
        duration = "1d"
        seed = 3
        [[app]]
        id = "weather"
        interval = "15m"
        duration = "1s-3s"
        results = ["new", "no", "timeout"]
        size = "20K"
        [[app]]
        id = "chat"
        interval = "never"
        size = 3000

        """

    func parseError(_ text: String) -> String? {
        do { _ = try Scenario.parse(text, file: "s.toml"); return nil } catch { return error.description }
    }

    @Test("parses sizes and notification schedules, and draws the same notifications for the same seed")
    func schedules() throws {
        let s = try Scenario.parse(Self.base + """
            [[notification]]
            app = "chat"
            every = "20m"
            jitter = "9m"
            [[notification]]
            app = "weather"
            every = "6h"
            first = "1h"
            """, file: "s.toml")
        #expect(s.apps.map(\.size) == [20480, 3000])
        #expect(s.notificationSchedules == [
            .init(app: 1, every: 1200, first: 600, jitter: 540), .init(app: 0, every: 21600, first: 3600, jitter: 0),
        ])
        let n = s.notifications()
        #expect(n == s.notifications())
        #expect(n != s.notifications(seed: 4))
        #expect(n.filter { $0.app == 0 }.map(\.at) == [3600, 25200, 46800, 68400])
        let chat = n.filter { $0.app == 1 }.map(\.at)
        #expect(chat.count == 72)
        #expect(chat.allSatisfy { $0 >= 0 && $0 < 86400 })
        for (m, at) in chat.enumerated() { #expect(abs(at - (600 + Double(m) * 1200)) <= 540) }
        #expect(n.map(\.at) == n.map(\.at).sorted())
    }

    @Test("refuses a schedule for an unknown app, a jitter of half the period, a bad size")
    func errors() {
        #expect(parseError(Self.base + "[[notification]]\napp = \"mail\"\nevery = \"1h\"\n")?.contains("'mail' is not the id of an [[app]]") == true)
        #expect(parseError(Self.base + "[[notification]]\napp = \"chat\"\nevery = \"1h\"\njitter = \"30m\"\n")?.contains("under half of every") == true)
        #expect(parseError(Self.base + "[[notification]]\napp = \"chat\"\n")?.contains("notification[1].every") == true)
        #expect(parseError(Self.base + "[[notification]]\napp = \"chat\"\nevery = \"1h\"\nat = \"2h\"\n")?.contains("unknown key") == true)
        #expect(parseError(Self.base + "[notification]\napp = \"chat\"\n")?.contains("[[notification]]") == true)
        #expect(parseError("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"1h\"\nsize = \"lots\"\n")?.contains("app[1].size") == true)
        #expect(parseError("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"1h\"\nsize = \"2G\"\n")?.contains("at most 1G") == true)
    }

    @Test("the plan holds the simulator's own draws and baseline schedules")
    func plan() throws {
        let s = try Scenario.parse(Self.base + "[[notification]]\napp = \"chat\"\nevery = \"20m\"\n", file: "s.toml")
        let sim = Simulator(s)
        let plan = WirePlan(sim)
        #expect(plan.runs[0].count == 96 + 2)
        #expect(plan.runs[1].isEmpty)
        #expect(plan.runs[0].map(\.outcome).prefix(4) == [.new, .no, .timeout, .new])
        #expect(plan.runs[0][2].duration == s.handlerDeadline)
        // The naive runs are the simulator's, from the scenario's start, and run the same draws.
        let naive = sim.runNaive()
        #expect(plan.naive.map(\.at) == naive.map { $0.start - s.start })
        #expect(plan.naive.count == 96)
        for (k, r) in naive.enumerated() { #expect(abs(r.end - r.start - plan.runs[0][k].duration) < 1e-6) }
        #expect(plan.android.map(\.at) == sim.runAndroid().map { $0.start - s.start })
        #expect(plan.notifications.count == 72)
        let j = plan.json
        #expect(j["apps"]?.arrayValue?.map { $0["notified"]?.boolValue } == [false, true])
        #expect(j["apps"]?.arrayValue?.first?["size"]?.intValue == 20480)
        #expect(j["naive"]?.arrayValue?.count == 96)
        #expect(j["scheduler"]?["handler_deadline"]?.doubleValue == 30)
    }

    @Test("sizes leave drowse simulate's report as it was; notifications add the push channel and leave the baselines' fetches alone")
    func simulateWithPush() throws {
        let plain = try Scenario.parse(Self.base, file: "s.toml")
        var sized = plain
        for i in sized.apps.indices { sized.apps[i].size = 1 << 20 }
        #expect(Simulator(plain).report() == Simulator(sized).report())
        let pushed = try Scenario.parse(Self.base + "[[notification]]\napp = \"chat\"\nevery = \"20m\"\n", file: "s.toml")
        let a = Simulator(plain).report(), b = Simulator(pushed).report()
        #expect(a.drowse.push == nil && b.drowse.push?.handled == 72)
        #expect(Simulator(plain).runNaive() == Simulator(pushed).runNaive())
        #expect(Simulator(plain).runAndroid() == Simulator(pushed).runAndroid())
        // The push channel costs radio time in every strategy.
        #expect(b.naive.radioOnSeconds > a.naive.radioOnSeconds && b.drowse.radioOnSeconds > a.drowse.radioOnSeconds)
    }

    @Test("the push scenario is the twenty apps' day with two push-only apps")
    func pushScenario() throws {
        let push = try Scenario.parse(try RepoFile.read("deploy/scenarios/twenty-apps-lte-push.toml"), file: "twenty-apps-lte-push.toml")
        let day = try Scenario.parse(try RepoFile.read("deploy/scenarios/twenty-apps-lte.toml"), file: "twenty-apps-lte.toml")
        #expect(push.apps.count == 22)
        #expect(push.apps.prefix(20).map(\.id) == day.apps.map(\.id))
        #expect(push.apps.prefix(20).map(\.interval) == day.apps.map(\.interval))
        #expect(push.apps.allSatisfy { $0.size != nil })
        let perHour = Double(push.notifications().count) / 24
        #expect(perHour >= 3 && perHour <= 6)
        // The same draws: the baselines' 20 apps fetch as in twenty-apps-lte.toml (Drowse's windows
        // also hear the notifications, which keep the radio awake).
        let a = Simulator(push), b = Simulator(day)
        #expect(a.runNaive().map(\.start) == b.runNaive().map(\.start))
        #expect(a.runAndroid().map(\.start) == b.runAndroid().map(\.start))
    }
}
