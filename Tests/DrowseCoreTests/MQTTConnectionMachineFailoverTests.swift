import DrowseCore
import Testing

/// More than one broker, on a manual clock: failover to the next broker with backoff, and the way
/// back to the preferred one riding keepalive pings and wake windows (never a timer of its own).
@Suite("MQTTConnectionMachine: failover")
struct MQTTConnectionMachineFailoverTests {
    typealias M = MQTTConnectionMachine

    struct Rig {
        var m: M
        var now = 1000.0
        var actions: [M.Action] = []

        init(keepalive: Double = 60, brokers: Int = 2) {
            m = M(keepalive: keepalive, brokers: (0..<brokers).map { ("b\($0):1883", false) }, seed: 3)
        }

        @discardableResult
        mutating func feed(_ a: [M.Action]) -> [M.Action] {
            actions += a
            return a
        }

        /// Plays the session for a `.connect`: the TCP connect succeeds, CONNACK accepts.
        mutating func connectOK() {
            feed(m.connectIssued(now: now))
            feed(m.connack(rc: 0, reason: "ok", now: now))
        }

        /// Advances to the machine's timer and fires it.
        @discardableResult
        mutating func fire() -> [M.Action] {
            guard let t = m.currentTimer else {
                Issue.record("no timer")
                return []
            }
            now = max(now, t.at)
            return feed(m.timerFired(now: now))
        }

        var timerPurposes: [M.TimerPurpose] {
            actions.compactMap { if case .setTimer(_, let p) = $0 { p } else { nil } }
        }
    }

    @Test("a failed attempt moves to the next broker after the usual backoff, and round the list")
    func failover() {
        var r = Rig(brokers: 3)
        #expect(r.feed(r.m.start(now: r.now)).contains(.connect))
        #expect(r.m.brokerToConnect == 0)
        r.feed(r.m.connectFailed(reason: "refused", now: r.now))
        #expect(r.m.brokerToConnect == 1)
        let t1 = try! #require(r.m.currentTimer)
        #expect(t1.purpose == .reconnect && t1.at > r.now && t1.at <= r.now + 1)
        #expect(r.fire() == [.connect])
        r.feed(r.m.connectFailed(reason: "refused", now: r.now))
        #expect(r.m.brokerToConnect == 2)
        let t2 = try! #require(r.m.currentTimer)
        #expect(t2.at - r.now > 0.99 && t2.at - r.now <= 2, "the backoff grows across brokers")
        r.fire()
        r.feed(r.m.connectFailed(reason: "refused", now: r.now))
        #expect(r.m.brokerToConnect == 0, "round the list")
    }

    @Test("a dropped connection moves to the next broker")
    func dropMoves() {
        var r = Rig()
        r.feed(r.m.start(now: r.now))
        r.connectOK()
        #expect(r.m.isConnected && r.m.brokerToConnect == 0 && r.m.failbackAt == nil)
        r.now += 5
        let a = r.feed(r.m.disconnected(reason: "EOF", now: r.now))
        #expect(a.contains(.report(.disconnected(reason: "EOF"))))
        #expect(r.m.brokerToConnect == 1)
        #expect(r.fire() == [.connect])
        r.connectOK()
        #expect(r.m.isConnected && r.m.peer == "b1:1883")
        let fb = try! #require(r.m.failbackAt)
        #expect(fb >= r.now + 30 && fb <= r.now + 60, "first try of the preferred broker after half to one keepalive")
    }

    @Test("on a non-preferred broker the keepalive ping after failbackAt also probes the preferred one; it answers: make, then break")
    func failbackAtKeepalive() {
        var r = Rig()
        r.feed(r.m.start(now: r.now))
        r.feed(r.m.connectFailed(reason: "refused", now: r.now))
        r.fire()
        r.connectOK()
        #expect(r.m.peer == "b1:1883")
        // The only timer is the keepalive: no timer is set for the failback itself.
        #expect(r.m.currentTimer?.purpose == .keepalive)
        let a = r.fire()
        #expect(r.now >= r.m.failbackAt ?? .infinity)
        // The working session stays: its ping goes, and the preferred broker is only probed.
        #expect(a.contains(.sendPing) && a.contains(.probePreferred))
        #expect(!a.contains(.close(sendDisconnect: true)) && !a.contains(.connect) && r.m.isConnected && r.m.peer == "b1:1883")
        // The probe has a deadline of its own.
        #expect(r.m.currentTimer?.purpose == .probe && r.m.currentTimer?.at == r.now + r.m.probeTimeout)
        // It answers: now the session moves.
        let moved = r.feed(r.m.probeAnswered(now: r.now + 0.01))
        #expect(moved.first == .endProbe && moved.contains(.close(sendDisconnect: true)) && moved.contains(.connect))
        #expect(moved.contains(.report(.disconnected(reason: "moving back to the preferred broker"))))
        #expect(r.m.brokerToConnect == 0 && r.m.failingBackFrom == 1)
        r.connectOK()
        #expect(r.m.isConnected && r.m.peer == "b0:1883" && r.m.failbackAt == nil && r.m.failingBackFrom == nil)
    }

    @Test("a keepalive before failbackAt is an ordinary ping")
    func pingBeforeFailback() {
        var r = Rig(keepalive: 60)
        r.feed(r.m.start(now: r.now))
        r.feed(r.m.connectFailed(reason: "refused", now: r.now))
        r.fire()
        r.connectOK()
        // Traffic keeps the keepalive off until just before failbackAt... then the ping is due early:
        // pretend the keepalive came due at once (the link was idle) before failbackAt.
        let fb = try! #require(r.m.failbackAt)
        r.now = fb - 0.5
        let a = r.feed(r.m.keepaliveDue(now: r.now))
        #expect(a.contains(.sendPing) && !a.contains(.connect))
        #expect(r.m.peer == "b1:1883")
    }

    @Test("the preferred broker does not answer the probe: the working session is never left, and the next probe waits longer")
    func failbackFails() {
        var r = Rig(keepalive: 60)
        r.feed(r.m.start(now: r.now))
        r.feed(r.m.connectFailed(reason: "refused", now: r.now))
        r.fire()
        r.connectOK()
        let attemptsBefore = r.m.failedAttempts
        var gaps: [Double] = []
        for _ in 0..<6 {
            // Keepalives before failbackAt are pings (answered); the first one after it tries b0.
            var pings = 0
            while r.m.probeStartedAt == nil {
                let a = r.fire()
                if a.contains(.sendPing) {
                    pings += 1
                    r.feed(r.m.packetReceived(now: r.now + 0.1))
                }
                #expect(pings < 100)
                if pings >= 100 { return }
            }
            #expect(r.now >= r.m.failbackAt ?? 0)
            let a = r.feed(r.m.probeFailed(reason: "Connection refused", now: r.now))
            #expect(a.first == .endProbe && !a.contains(.connect) && !a.contains(.close(sendDisconnect: true)))
            #expect(r.m.isConnected && r.m.brokerToConnect == 1 && r.m.failedAttempts == attemptsBefore)
            gaps.append(try! #require(r.m.failbackAt) - r.now)
        }
        #expect(gaps.last! > gaps.first!, "\(gaps)")
        #expect(gaps.allSatisfy { $0 <= 1800 })
        // A probe nobody answers times out on the machine's timer, and the session stays.
        r.now = try! #require(r.m.failbackAt)
        r.feed(r.m.keepaliveDue(now: r.now))
        #expect(r.m.probeStartedAt == r.now)
        r.feed(r.m.packetReceived(now: r.now + 0.1))
        let timedOut = r.fire()
        #expect(timedOut.first == .endProbe && r.m.isConnected && r.m.probeStartedAt == nil && r.m.brokerToConnect == 1)
        // The preferred broker takes the TCP connection but then gives no CONNACK: back at once.
        r.now = try! #require(r.m.failbackAt)
        r.feed(r.m.keepaliveDue(now: r.now))
        r.feed(r.m.probeAnswered(now: r.now))
        #expect(r.m.brokerToConnect == 0)
        r.feed(r.m.connectIssued(now: r.now))
        r.now += 100
        let a = r.feed(r.m.connackTimeout(now: r.now))
        #expect(a.contains(.connect) && r.m.brokerToConnect == 1)
    }

    @Test("a session lost while the probe runs ends the probe; a late answer changes nothing")
    func probeDuringLoss() {
        var r = Rig(keepalive: 60)
        r.feed(r.m.start(now: r.now))
        r.feed(r.m.connectFailed(reason: "refused", now: r.now))
        r.fire()
        r.connectOK()
        r.now = try! #require(r.m.failbackAt)
        #expect(r.feed(r.m.keepaliveDue(now: r.now)).contains(.probePreferred))
        let lost = r.feed(r.m.disconnected(reason: "EOF", now: r.now + 1))
        #expect(lost.contains(.endProbe) && r.m.probeStartedAt == nil)
        #expect(r.m.probeAnswered(now: r.now + 2).isEmpty)
    }

    @Test("a wake window past failbackAt probes the preferred broker, and moves when it answers")
    func failbackAtWindow() {
        var r = Rig(keepalive: 600)
        r.feed(r.m.start(now: r.now))
        r.feed(r.m.connectFailed(reason: "refused", now: r.now))
        r.fire()
        r.connectOK()
        #expect(r.feed(r.m.windowOpened(now: r.now + 1)).isEmpty, "too early")
        let fb = try! #require(r.m.failbackAt)
        r.now = fb + 1
        r.feed(r.m.packetReceived(now: r.now))  // a busy link: no keepalive due
        let a = r.feed(r.m.windowOpened(now: r.now))
        #expect(a.contains(.probePreferred) && !a.contains(.connect) && r.m.brokerToConnect == 1)
        let moved = r.feed(r.m.probeAnswered(now: r.now))
        #expect(moved.contains(.connect) && r.m.brokerToConnect == 0)
    }

    @Test("on the preferred broker nothing changes: pings stay pings, windows carry the status")
    func preferredStays() {
        var r = Rig(keepalive: 60)
        r.feed(r.m.start(now: r.now))
        r.connectOK()
        for _ in 0..<5 {
            let a = r.fire()
            #expect(a.contains(.sendPing) && !a.contains(.connect))
            r.feed(r.m.packetReceived(now: r.now + 0.1))
        }
        #expect(r.m.peer == "b0:1883" && r.m.failbackAt == nil)
    }

    @Test("one broker behaves as before: a drop reconnects to it")
    func single() {
        var r = Rig(brokers: 1)
        r.feed(r.m.start(now: r.now))
        r.connectOK()
        r.feed(r.m.disconnected(reason: "EOF", now: r.now))
        #expect(r.m.brokerToConnect == 0)
        r.fire()
        r.connectOK()
        #expect(r.m.failbackAt == nil)
        #expect(r.fire().contains(.sendPing))
    }
}
