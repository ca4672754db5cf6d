import DrowseCore

/// What `deploy/bench-radio.sh SCENARIO --compress K` runs, in the scenario's seconds, so that
/// `drowse simulate SCENARIO --compress K` predicts what the capture will show
/// (docs/benchmarks.md, "The push channel, simulated and on the wire"). The bench divides every
/// duration of drowsed's configuration by K, but some do not scale: the keepalive is at least 1 s and
/// max_keepalive whole seconds and at least 5,
/// the handler deadline at least 1 s, the planner's 30-minute cap on a tolerance is real
/// time, `[radio] tail` is the scenario's tail / K in whole milliseconds, and a handler run
/// takes its start-up (exec, connect) on top of its scaled duration, handlers that start
/// together one after another. The link acknowledges every segment at once (`quickack` on its
/// routes: the kernel's 40 ms delayed ACK is real time that K would stretch into seconds of
/// scenario). The bench replays no uses,
/// network or power changes, and its handlers move their bytes at their start. These rules
/// mirror `prepare` in deploy/bench-radio.py.
package struct WireScaling: Sendable, Equatable {
    package var compress: Double

    /// Real seconds from a wire handler's start to its first packet (spawned, then exec and
    /// connect: deploy/bench-handler.c), which its run also takes beyond its scaled duration:
    /// the SYN leaves about 0.5 ms after the exec in the bench's captures on a 2-core x86 machine.
    package static let handlerStartup = 0.001
    /// Handlers started at the same instant go one after another. drowsed starts each through
    /// its spawner: in the K = 144 capture each further handler of a window starts about 0.7 ms
    /// (median; mean 0.9) after the one before.
    package static let drowsedStagger = 0.001
    /// The baselines' driver (the bench's Python, `subprocess.Popen`): about 0.5 ms apart.
    package static let driverStagger = 0.0006
    /// Seconds from an exchange to its last ACK on the bench's link, which acknowledges at once.
    static let delayedAck = 0.0
    /// What the bench allows each run for that start-up in the daily budget.
    static let budgetStartup = 0.1
    /// drowsed's least `[mqtt] keepalive`, and the least `max_keepalive` (libmosquitto's 5 s,
    /// whole seconds: it is the keepalive asked for in CONNECT).
    static let minimumKeepalive = 1.0
    static let minimumMaxKeepalive = 5.0
    static let minimumDeadline = 1.0
    /// `FetchPlanner.maxTolerance`, which no key scales.
    static let maxTolerance = 1800.0

    package init(compress: Double) {
        precondition(compress >= 1 && compress.isFinite, "compress must be at least 1")
        self.compress = compress
    }

    /// drowsed's `[mqtt] keepalive` on the wire, in real seconds.
    package func keepalive(_ scenarioSeconds: Double) -> Double {
        max(Self.minimumKeepalive, scenarioSeconds / compress)
    }

    /// drowsed's `[mqtt] max_keepalive` on the wire, in real seconds: whole, at least 5.
    package func maxKeepalive(_ scenarioSeconds: Double) -> Double {
        max(Self.minimumMaxKeepalive, (scenarioSeconds / compress).rounded(.up))
    }

    /// The handler deadline, in scenario seconds.
    package func deadline(_ scenarioSeconds: Double) -> Double {
        max(Self.minimumDeadline, scenarioSeconds / compress) * compress
    }

    /// The daily budget, in scenario seconds: the scaled one plus the start-up allowance for
    /// each run the busiest app makes in a day, times the scenario days in 24 real hours.
    package func dailyBudget(_ s: Scenario) -> Double {
        let days = max(1, min(s.duration, 86400 * compress) / 86400)
        let runsPerDay = s.apps.compactMap { s.intervalSeconds($0).map { 86400 / $0 } }.max() ?? 0
        return max(Self.minimumDeadline, days * (s.dailyBudget / compress + Self.budgetStartup * runsPerDay)) * compress
    }

    /// drowsed's `[radio] tail` on the wire, in real seconds: the scenario's tail / K, in whole
    /// milliseconds.
    package func tail(_ radio: RadioModel) -> Double {
        (radio.tailSeconds / compress * 1000).rounded() / 1000
    }

    /// The radio tail drowsed plans with, in scenario seconds.
    package func schedulerTail(_ radio: RadioModel) -> Double {
        tail(radio) * compress
    }

    /// The scenario as the bench replays it: no uses, no network or power changes.
    package func replayed(_ s: Scenario) -> Scenario {
        var out = s
        for i in out.apps.indices { out.apps[i].uses = [] }
        out.network = []
        out.power = []
        return out
    }
}
