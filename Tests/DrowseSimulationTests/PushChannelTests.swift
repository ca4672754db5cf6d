@testable import DrowseSimulation
import DrowseCore
import Testing

@Suite("The simulated push channel")
struct PushChannelTests {
    static func scenario(_ body: String, duration: String = "1h") throws -> Scenario {
        try Scenario.parse("name = \"push\"\nduration = \"\(duration)\"\nseed = 3\nradio = \"lte\"\n" + body, file: "push.toml")
    }

    static let quiet = """
        [mqtt]
        keepalive = "240s"

        [[app]]
        id = "chat"
        interval = "never"

        """

    @Test("an idle device pings at the keepalive, then ever less often while the path holds (the adaptive keepalive); each ping a wake of its own")
    func idlePings() throws {
        let r = Simulator(try Self.scenario(Self.quiet)).report()
        let push = try #require(r.drowse.push)
        // Connected at 0: pings at 240, 480 (each answered after 240 s), then 960, 1440 (480 s),
        // then 2400, 3360 (960 s) before 3600 s.
        #expect(push.pings == 6)
        #expect(push.keepaliveWakes == 6)
        #expect(push.sessions == 1)
        #expect(r.drowse.promotions == 7)  // the connection's own wake, then the pings
        #expect(abs(push.keepaliveRadioOnSeconds - 6 * (RadioModel.lte.promotionSeconds + RadioModel.lte.tailSeconds)) < 1e-6)
        // A fixed keepalive (max_keepalive = keepalive) pings every 240 s: 14 before 3600 s.
        let fixed = Simulator(try Self.scenario(Self.quiet.replacing("keepalive = \"240s\"", with: "keepalive = \"240s\"\nmax_keepalive = \"240s\""))).report()
        #expect(fixed.drowse.push?.pings == 14 && fixed.drowse.promotions == 15)
    }

    @Test("fetch windows closer than the keepalive carry it: no ping wakes the radio on its own")
    func pingsRideWindows() throws {
        let r = Simulator(try Self.scenario(Self.quiet + """
            [[app]]
            id = "meter"
            interval = "2m"

            """)).report()
        let push = try #require(r.drowse.push)
        #expect(r.drowse.fetches >= 20)
        #expect(push.keepaliveWakes == 0)
        // The naive baseline's client pings every 60 s whatever its timers do.
        let naive = try #require(r.naive.push)
        #expect(naive.pings >= 50 && naive.keepaliveWakes > 0)
    }

    @Test("each notification reaches its handler as it arrives and wakes the radio")
    func notifications() throws {
        let s = try Self.scenario(Self.quiet + """
            [[notification]]
            app = "chat"
            every = "10m"

            """)
        let sim = Simulator(s)
        let run = sim.drowse(policy: sim.policy)
        let push = try #require(run.push)
        let arrivals = s.notifications(seed: sim.seed).map { s.start + $0.at }
        #expect(push.runs.map(\.start) == arrivals)
        #expect(push.published == 6)
        let r = sim.report()
        #expect(r.drowse.push?.notificationsHandledMatch == true)
        // Six arrivals 10 minutes apart: six wakes besides the connection's and the pings'.
        #expect(r.drowse.promotions >= 7)
    }

    @Test("a link lost while offline is found dead by its ping, and the session comes back with the network; what was published meanwhile arrives then")
    func reconnect() throws {
        let s = try Self.scenario(Self.quiet + """
            [[notification]]
            app = "chat"
            every = "20m"
            first = "25m"

            [[network]]
            at = "20m"
            kind = "none"

            [[network]]
            at = "30m"
            kind = "cellular"

            """)
        let sim = Simulator(s)
        let push = try #require(sim.drowse(policy: sim.policy).push)
        #expect(push.sessions == 2)
        #expect(push.published == 2)
        #expect(push.runs.count == 2)
        // The one published at 25 min, offline, ran when the session was back at 30 min.
        #expect(push.runs.first.map { $0.start - s.start } == 1800)
        // Nothing went over the air while offline.
        #expect(!push.packets.contains { $0.at > s.start + 1200 && $0.at < s.start + 1800 })
    }

    @Test("past max_per_hour notifications wait for the next window or room in the budget")
    func budget() throws {
        let s = try Self.scenario(Self.quiet + """
            [notifications]
            max_per_hour = 2

            [[notification]]
            app = "chat"
            every = "5m"

            """)
        let r = Simulator(s).report()
        let push = try #require(r.drowse.push)
        #expect(push.published == 12)
        #expect(push.deferred > 0)
        #expect(push.handled == 2)  // no window releases the rest, and the hour has no room again before the end
    }

    @Test("a scenario without notifications or [mqtt] has no push channel")
    func noPush() throws {
        let s = try Self.scenario("""
            [[app]]
            id = "meter"
            interval = "15m"

            """)
        let r = Simulator(s).report()
        #expect(r.drowse.push == nil && r.naive.push == nil && r.android.push == nil)
        #expect(r.drowse.json["push"] == nil)
        #expect(r.json["compress"] == nil)
    }

    @Test("the same scenario and seed give the same push channel")
    func determinism() throws {
        let s = try SimulatorTests.shipped("twenty-apps-lte-push.toml")
        #expect(Simulator(s).report() == Simulator(s).report())
        #expect(Simulator(s, compress: 144).report() == Simulator(s, compress: 144).report())
        #expect(Simulator(s).report().drowse.push != nil)
    }

    @Test("the wire benchmark's settings at K: keepalive of 1 s or more, max_keepalive whole seconds of 5 or more, 1 s deadline, the tail / K in whole ms")
    func wireScaling() {
        #expect(WireScaling(compress: 24).keepalive(240) == 10)
        #expect(abs(WireScaling(compress: 36).keepalive(240) - 240.0 / 36) < 1e-9)
        #expect(abs(WireScaling(compress: 144).keepalive(240) - 240.0 / 144) < 1e-9)
        #expect(WireScaling(compress: 480).keepalive(240) == 1)
        #expect(WireScaling(compress: 144).maxKeepalive(1680) == 12)
        #expect(WireScaling(compress: 1000).maxKeepalive(1680) == 5)
        #expect(WireScaling(compress: 144).deadline(30) == 144)
        #expect(WireScaling(compress: 10).deadline(30) == 30)
        #expect(WireScaling(compress: 144).tail(.lte) == 0.08)
        #expect(abs(WireScaling(compress: 144).schedulerTail(.lte) - 0.08 * 144) < 1e-9)
        #expect(abs(WireScaling(compress: 60).schedulerTail(.lte) - 0.193 * 60) < 1e-9)
        #expect(WireScaling(compress: 1).schedulerTail(.lte) == RadioModel.lte.tailSeconds)
    }

    @Test("the wire benchmark's ratios do not depend on K: the shipped push day at K = 144, 72 and 24 within 5 %, each above the radio goals")
    func ratiosIndependentOfCompression() throws {
        // What made them depend on K (docs/benchmarks.md, "The push channel, simulated and on the
        // wire"): a 40 ms delayed ACK or a radio tail that does not scale is stretched K times.
        let s = try SimulatorTests.shipped("twenty-apps-lte-push.toml")
        var android: [Double] = [], naive: [Double] = []
        for k in [144.0, 72, 24] {
            let r = Simulator(s, compress: k).report()
            let a = try #require(SimulationReport.ratio(r.android.radioOnSeconds, r.drowse.radioOnSeconds))
            let n = try #require(SimulationReport.ratio(r.naive.radioOnSeconds, r.drowse.radioOnSeconds))
            #expect(a >= 1.3, "K = \(k): Android-style / drowse \(a)")
            #expect(n >= 4, "K = \(k): naive / drowse \(n)")
            android.append(a)
            naive.append(n)
        }
        #expect(android.max()! / android.min()! <= 1.05, "Android-style / drowse at K = 144, 72, 24: \(android)")
        #expect(naive.max()! / naive.min()! <= 1.05, "naive / drowse at K = 144, 72, 24: \(naive)")
    }

    @Test("--compress K: the keepalive the bench gives drowsed, on the scenario's clock")
    func compressedPings() throws {
        // 240 s / 144 = 1.67 real seconds, max_keepalive 12: the same pings as uncompressed, each
        // 50 ms of drowsed's clock (7.2 s of the scenario) late.
        let r = Simulator(try Self.scenario(Self.quiet), compress: 144).report()
        let push = try #require(r.drowse.push)
        #expect(push.pings == 6)
        #expect(r.compress == 144)
    }
}

extension SimulationReport.PushTotals {
    var notificationsHandledMatch: Bool { handled == published }
}
