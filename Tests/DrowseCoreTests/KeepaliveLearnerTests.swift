import DrowseCore
import Testing

/// The adaptive keepalive on a manual clock: the connection machine pings as seldom as its
/// learner allows, on a path whose NAT drops a connection idle longer than `nat` seconds (a ping
/// sent after more silence than that is never answered; the next connection comes up at once).
@Suite("The adaptive keepalive")
struct KeepaliveLearnerTests {
    typealias M = MQTTConnectionMachine

    struct Path {
        var m: M
        var now = 1000.0
        var timer: Double?
        /// The last packet either way on the connection (what the NAT's idle timer counts from).
        var lastTraffic = 1000.0
        let nat: Double
        var pings: [(at: Double, idle: Double, answered: Bool)] = []
        var deadLinks = 0
        var kept: [KeepaliveLearner] = []

        init(nat: Double, keepalive: Double = 240, max: Double = 1680, learned: KeepaliveLearner? = nil) {
            self.nat = nat
            m = M(keepalive: keepalive, maxKeepalive: max, peer: "broker:1883", seed: 3)
            _ = m.pathChanged(key: "wwan0", learned: learned, now: now)
            feed(m.networkChanged(online: true, now: now))
            feed(m.start(now: now))
        }

        mutating func feed(_ actions: [M.Action]) {
            var connect = false
            for a in actions {
                switch a {
                case .setTimer(let at, _): timer = at
                case .cancelTimer: timer = nil
                case .connect: connect = true
                case .keepaliveLearned: kept.append(m.learner)
                default: break
                }
            }
            if actions.contains(.sendPing) {
                let idle = now - lastTraffic
                let answered = idle <= nat
                pings.append((now, idle, answered))
                feed(m.packetSent(now: now))
                if answered {
                    now += 0.2
                    lastTraffic = now
                    feed(m.packetReceived(now: now))
                }
            }
            if connect {
                // A new connection: CONNECT, CONNACK and the subscriptions at once.
                feed(m.connectIssued(now: now))
                now += 0.2
                lastTraffic = now
                feed(m.packetReceived(now: now))
                feed(m.connack(rc: 0, reason: "Connection Accepted.", now: now))
                feed(m.subscriptionsConfirmed(now: now))
            }
        }

        /// Runs the clock for `hours`, the session idle but for its pings.
        mutating func run(hours: Double) {
            let end = now + hours * 3600
            while let t = timer, t <= end {
                now = max(now, t)
                let wasOpen = m.isConnected
                feed(m.timerFired(now: now))
                if wasOpen && !m.isOpen { deadLinks += 1 }
            }
            now = end
        }
    }

    @Test("it lengthens step by step to max_keepalive on a path that holds it, with no reconnect",
          arguments: [5000.0, 100_000])
    func lengthensToTheCeiling(nat: Double) {
        var p = Path(nat: nat)
        p.run(hours: 24)
        #expect(p.deadLinks == 0)
        #expect(p.m.learner.held == 1680 && p.m.pingInterval == 1680)
        // 240, 480, 960, 1680: each held twice before the next.
        #expect(p.pings.prefix(8).map { Int($0.idle.rounded()) } == [240, 240, 480, 480, 960, 960, 1680, 1680])
        #expect(p.kept.last?.held == 1680)
    }

    @Test("behind a NAT that drops idle connections it finds the longest interval the NAT holds, within a few tries",
          arguments: [300.0, 600, 1000, 1500, 250])
    func findsTheNATTimeout(nat: Double) {
        var p = Path(nat: nat)
        p.run(hours: 48)
        let held = p.m.learner.held
        #expect(held <= nat && held >= nat * 0.85, "held \(held) s behind a \(nat) s NAT")
        #expect(p.deadLinks <= 6, "\(p.deadLinks) reconnects to learn a \(nat) s NAT")
        #expect(p.deadLinks == p.m.learner.failures)
        // Settled: the last day has no failed ping and pings at what held.
        let lastDay = p.pings.filter { $0.at > p.now - 24 * 3600 }
        #expect(lastDay.allSatisfy { $0.answered })
        #expect(p.m.pingInterval == held)
        #expect(p.kept.last?.held == held && p.kept.last?.failed == p.m.learner.failed)
    }

    @Test("a ping goes a little after its interval: what fails is the interval, and the search stops within the resolution")
    func failsTheIntervalTried() {
        var l = KeepaliveLearner(base: 5, ceiling: 60, held: 10)
        #expect(l.interval == 20)
        _ = l.unanswered(idle: 20.06)
        #expect(l.failed == 20 && l.interval == 10)
        _ = [l.answered(idle: 10.05), l.answered(idle: 10.05), l.answered(idle: 15.05), l.answered(idle: 15.05)]
        // 20 - 15 is within max(5 s, 10 %): no try of 18, which a 17 s NAT would drop.
        #expect(l.held == 15 && l.interval == 15 && l.settled)
        // A ping much later than its interval (a board that slept) fails what it waited.
        var late = KeepaliveLearner(base: 5, ceiling: 60, held: 10)
        _ = late.unanswered(idle: 26)
        #expect(late.failed == 26)

        var p = Path(nat: 17, keepalive: 5, max: 60)
        p.run(hours: 1)
        #expect(p.deadLinks == 1 && p.m.learner.held == 15 && p.m.learner.failed == 20 && p.m.pingInterval == 15)
    }

    @Test("a NAT shorter than [mqtt] keepalive: the interval goes below it, and holds")
    func belowTheBase() {
        var p = Path(nat: 100)
        p.run(hours: 24)
        #expect(p.m.learner.held <= 100 && p.m.learner.held >= 60, "held \(p.m.learner.held)")
        #expect(p.pings.filter { $0.at > p.now - 6 * 3600 }.allSatisfy { $0.answered })
    }

    @Test("what a path held is kept: a restart goes on from there, not from [mqtt] keepalive")
    func restartsFromWhatHeld() {
        var first = Path(nat: 600)
        first.run(hours: 48)
        guard let kept = first.kept.last else { Issue.record("nothing kept"); return }
        var again = Path(nat: 600, learned: KeepaliveLearner(base: 240, ceiling: 1680, held: kept.held, failed: kept.failed))
        again.run(hours: 12)
        #expect(again.deadLinks == 0)
        #expect(again.pings.first.map { Int($0.idle.rounded()) } == Int(kept.held))
    }

    @Test("another network path starts from what is known of it, or from [mqtt] keepalive")
    func perPath() {
        var m = M(keepalive: 240, maxKeepalive: 1680, peer: "broker:1883", seed: 1)
        _ = m.pathChanged(key: "wlan0", learned: KeepaliveLearner(base: 240, ceiling: 1680, held: 960, failed: 1000), now: 0)
        #expect(m.pingInterval == 960 && m.pathKey == "wlan0")
        _ = m.pathChanged(key: "wwan0", learned: nil, now: 0)
        #expect(m.pingInterval == 240 && m.pathKey == "wwan0")
        // CONNECT asks the broker for the longest interval.
        #expect(m.configuredKeepalive == 1680)
    }

    @Test("a ping a wake window carried early says nothing about the interval; a fixed keepalive never changes")
    func earlyPingsAndFixed() {
        var l = KeepaliveLearner(base: 240, ceiling: 1680)
        let early = [l.answered(idle: 130), l.answered(idle: 130)]
        #expect(early == [false, false] && l.interval == 240)
        let full = [l.answered(idle: 240), l.answered(idle: 240)]
        #expect(full == [false, true] && l.interval == 480)
        var fixed = KeepaliveLearner(base: 240, ceiling: 240)
        let same = [fixed.answered(idle: 240), fixed.answered(idle: 240)]
        #expect(same == [false, false] && fixed.interval == 240 && fixed.settled)
    }
}
