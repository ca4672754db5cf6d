import DrowseCore
import Testing

/// The MQTT connection's decisions on a manual clock: the harness plays the session, keeping the
/// one timer the machine asks for and advancing time to it.
@Suite("MQTTConnectionMachine")
struct MQTTConnectionMachineTests {
    typealias M = MQTTConnectionMachine

    struct Harness {
        var m: M
        var now = 1000.0
        var timer: (at: Double, purpose: M.TimerPurpose)?
        /// Everything the machine asked for, in order.
        var log: [M.Action] = []

        init(keepalive: Double = 60, loopback: Bool = false, seed: UInt64 = 7) {
            m = M(keepalive: keepalive, peer: "broker:1883", peerIsLoopback: loopback, seed: seed)
        }

        @discardableResult
        mutating func feed(_ actions: [M.Action]) -> [M.Action] {
            for a in actions {
                switch a {
                case .setTimer(let at, let purpose): timer = (at, purpose)
                case .cancelTimer: timer = nil
                default: break
                }
            }
            log += actions
            // The harness's timer is always the machine's.
            #expect(timer?.at == m.currentTimer?.at && timer?.purpose == m.currentTimer?.purpose)
            return actions
        }

        /// Advances the clock to the timer and fires it.
        @discardableResult
        mutating func fire(expecting purpose: M.TimerPurpose, sourceLocation: SourceLocation = #_sourceLocation) -> [M.Action] {
            guard let t = timer else {
                Issue.record("no timer set", sourceLocation: sourceLocation)
                return []
            }
            #expect(t.purpose == purpose, sourceLocation: sourceLocation)
            now = max(now, t.at)
            return feed(m.timerFired(now: now))
        }

        mutating func advance(_ seconds: Double) { now += seconds }

        /// start, connection opened, CONNACK accepted, subscriptions confirmed.
        mutating func connect() {
            if m.currentTimer == nil, !m.isOpen { feed(m.start(now: now)) }
            feed(m.connectIssued(now: now))
            advance(0.05)
            feed(m.packetSent(now: now))
            advance(0.05)
            feed(m.packetReceived(now: now))
            feed(m.connack(rc: 0, reason: "Connection Accepted.", now: now))
            feed(m.subscriptionsConfirmed(now: now))
        }

        /// The delay of the latest reconnect timer from now.
        var retryDelay: Double? {
            guard let t = timer, t.purpose == .reconnect else { return nil }
            return t.at - now
        }
    }

    func reports(_ actions: [M.Action]) -> [M.Report] {
        actions.compactMap { if case .report(let r) = $0 { r } else { nil } }
    }

    @Test("first connect: start connects at once, CONNACK subscribes, publishes the status and reports")
    func firstConnect() {
        var h = Harness()
        #expect(h.feed(h.m.start(now: h.now)).first == .connect)
        let opened = h.feed(h.m.connectIssued(now: h.now))
        #expect(opened == [.setTimer(at: h.now + 30, purpose: .connack)])
        #expect(h.m.isOpen && !h.m.isConnected)
        h.advance(0.2)
        let accepted = h.feed(h.m.connack(rc: 0, reason: "Connection Accepted.", now: h.now))
        #expect(Array(accepted.prefix(2)) == [.subscribe, .publishStatus])
        #expect(reports(accepted) == [.connected])
        #expect(h.m.isConnected)
        // The next timer is the keepalive, a little past one period from the oldest traffic.
        #expect(h.timer?.purpose == .keepalive)
        #expect(h.timer!.at == 1000 + 60 + 0.05)
        // A second start does nothing.
        #expect(h.m.start(now: h.now).isEmpty)
    }

    @Test("no CONNACK: the connection is closed after min(30 s, keepalive) and retried with backoff")
    func connackTimeout() {
        var h = Harness(keepalive: 20)
        h.feed(h.m.start(now: h.now))
        h.feed(h.m.connectIssued(now: h.now))
        h.advance(5)
        h.feed(h.m.packetSent(now: h.now))  // the CONNECT left; nothing comes back
        #expect(h.timer?.at == 1020)
        let timedOut = h.fire(expecting: .connack)
        #expect(h.now == 1020)
        #expect(timedOut.first == .close(sendDisconnect: true))
        #expect(timedOut.contains(.log(.warning, "connection lost: no CONNACK from the broker")))
        #expect(reports(timedOut).isEmpty, "never connected: nothing to report")
        #expect(!h.m.isOpen)
        let delay = h.retryDelay!
        #expect(delay >= 0.5 && delay <= 1)
        #expect(h.fire(expecting: .reconnect).first == .connect)
    }

    @Test("a timer firing early decides nothing")
    func earlyTimer() {
        var h = Harness()
        h.connect()
        h.advance(10)
        #expect(h.feed(h.m.timerFired(now: h.now)).isEmpty)
        #expect(h.m.isConnected)
    }

    @Test("refused CONNACK: closed, and retried with backoff")
    func refused() {
        var h = Harness()
        h.feed(h.m.start(now: h.now))
        h.feed(h.m.connectIssued(now: h.now))
        let a = h.feed(h.m.connack(rc: 5, reason: "Connection Refused: not authorised.", now: h.now))
        #expect(a.first == .close(sendDisconnect: true))
        #expect(a.contains(.log(.warning, "connection lost: broker refused: Connection Refused: not authorised.")))
        #expect(!a.contains(.subscribe) && reports(a).isEmpty)
        #expect(h.retryDelay != nil)
    }

    @Test("backoff grows up to its 60 s cap and resets after a good connection")
    func backoffGrowthCapReset() {
        var h = Harness()
        h.feed(h.m.start(now: h.now))
        var ceilings: [Double] = []
        for _ in 0..<9 {
            #expect(h.log.last(where: { $0 == .connect }) != nil)
            h.feed(h.m.connectFailed(reason: "Connection refused", now: h.now))
            let d = h.retryDelay!
            ceilings.append(d)
            #expect(h.fire(expecting: .reconnect) == [.connect])
        }
        // Attempt n waits within [c/2, c] for c = 1, 2, 4, ... 60.
        let caps: [Double] = [1, 2, 4, 8, 16, 32, 60, 60, 60]
        for (d, c) in zip(ceilings, caps) { #expect(d >= c / 2 && d <= c, "delay \(d) outside [\(c / 2), \(c)]") }
        #expect(h.m.failedAttempts == 9)
        // A connection whose subscriptions the broker confirmed resets it: the next loss waits
        // about a second again. The CONNACK alone does not.
        h.feed(h.m.connectIssued(now: h.now))
        h.feed(h.m.connack(rc: 0, reason: "", now: h.now))
        #expect(h.m.failedAttempts == 9 && !h.m.confirmed)
        h.feed(h.m.subscriptionsConfirmed(now: h.now))
        #expect(h.m.failedAttempts == 0 && h.m.confirmed && h.m.lastLoss == nil)
        h.advance(100)
        let lost = h.feed(h.m.disconnected(reason: "Connection lost", now: h.now))
        #expect(lost.first == .close(sendDisconnect: false))
        #expect(reports(lost) == [.disconnected(reason: "Connection lost")])
        #expect(h.retryDelay! <= 1)
    }

    @Test("a broker that accepts and then drops before the SUBACK meets a growing backoff, not one retry a second")
    func dropBeforeSuback() {
        var h = Harness()
        h.feed(h.m.start(now: h.now))
        var delays: [Double] = []
        for _ in 0..<6 {
            h.feed(h.m.connectIssued(now: h.now))
            h.feed(h.m.connack(rc: 0, reason: "", now: h.now))
            h.advance(0.01)
            h.feed(h.m.disconnected(reason: "Connection lost", now: h.now))
            delays.append(h.retryDelay!)
            #expect(h.fire(expecting: .reconnect) == [.connect])
        }
        // Attempt n waits within [c/2, c] for c = 1, 2, 4, 8, 16, 32.
        for (d, c) in zip(delays, [1.0, 2, 4, 8, 16, 32]) { #expect(d >= c / 2 && d <= c, "delay \(d) outside [\(c / 2), \(c)]") }
        #expect(h.m.failedAttempts == 6 && h.m.lastLoss == "Connection lost")
    }

    @Test("a refused subscription (SUBACK 0x80) closes the session and backs off, with the topic as the reason")
    func refusedSubscription() {
        var h = Harness()
        h.feed(h.m.start(now: h.now))
        var delays: [Double] = []
        for _ in 0..<4 {
            h.feed(h.m.connectIssued(now: h.now))
            h.feed(h.m.connack(rc: 0, reason: "", now: h.now))
            let refused = h.feed(h.m.subscriptionRefused(topic: "drowse/dev/apps/a/notify", now: h.now))
            #expect(refused.first == .close(sendDisconnect: true))
            #expect(reports(refused) == [.disconnected(reason: "the broker refused the subscription to drowse/dev/apps/a/notify")])
            delays.append(h.retryDelay!)
            #expect(h.fire(expecting: .reconnect) == [.connect])
        }
        #expect(delays[3] > 4 && h.m.failedAttempts == 4)
        #expect(h.m.lastLoss == "the broker refused the subscription to drowse/dev/apps/a/notify")
        // Not while not connected: a late SUBACK of a closed connection changes nothing.
        #expect(h.m.subscriptionRefused(topic: "x", now: h.now).isEmpty)
    }

    @Test("a failed connect is logged with the broker's address")
    func connectFailedLog() {
        var h = Harness()
        h.feed(h.m.start(now: h.now))
        let a = h.feed(h.m.connectFailed(reason: "Connection refused", now: h.now))
        #expect(a.first == .log(.warning, "cannot connect to broker:1883: Connection refused"))
    }

    @Test("keepalive: PINGREQ after a quiet period; silence for half a keepalive more is a dead link")
    func deadLink() {
        var h = Harness(keepalive: 60)
        h.connect()
        let t0 = h.now
        let ping = h.fire(expecting: .keepalive)
        #expect(ping.first == .sendPing)
        #expect(abs(h.now - (t0 - 0.05 + 60.05)) < 0.2)
        let pingAt = h.now
        // The PINGREQ leaves; nothing comes back.
        h.advance(0.01)
        h.feed(h.m.packetSent(now: h.now))
        #expect(h.timer?.purpose == .pingAnswer && h.timer?.at == pingAt + 30)
        let dead = h.fire(expecting: .pingAnswer)
        #expect(dead.first == .close(sendDisconnect: true))
        #expect(reports(dead) == [.disconnected(reason: "no answer to PINGREQ within half a keepalive: the link is dead")])
        // Found within 1.5× keepalive of the last traffic.
        #expect(h.now - t0 <= 90.1)
        #expect(h.retryDelay != nil)
    }

    @Test("an MQTT 5 broker's shorter Server Keep Alive is the connection's keepalive; a longer one is not; the next connection asks again")
    func serverKeepalive() {
        var h = Harness(keepalive: 240)
        if h.m.currentTimer == nil, !h.m.isOpen { h.feed(h.m.start(now: h.now)) }
        h.feed(h.m.connectIssued(now: h.now))
        h.advance(0.05)
        h.feed(h.m.packetReceived(now: h.now))
        h.m.serverKeepalive(60)
        h.feed(h.m.connack(rc: 0, reason: "Connection Accepted.", now: h.now))
        h.feed(h.m.subscriptionsConfirmed(now: h.now))
        let t0 = h.now
        #expect(h.m.keepalive == 60)
        #expect(h.fire(expecting: .keepalive).first == .sendPing)
        #expect(abs(h.now - (t0 + 60.05)) < 0.01)
        // Not applied once connected, and never longer than asked for.
        h.m.serverKeepalive(30)
        #expect(h.m.keepalive == 60)
        h.feed(h.m.disconnected(reason: "gone", now: h.now))
        h.connect()
        #expect(h.m.keepalive == 240)
        h.feed(h.m.disconnected(reason: "gone", now: h.now))
        if let t = h.timer { h.now = t.at; h.feed(h.m.timerFired(now: h.now)) }
        h.feed(h.m.connectIssued(now: h.now))
        h.m.serverKeepalive(600)
        #expect(h.m.keepalive == 240)
    }

    @Test("keepalive: an answered ping keeps the connection, and the next ping is a period later")
    func answeredPing() {
        var h = Harness(keepalive: 60)
        h.connect()
        h.fire(expecting: .keepalive)
        h.advance(0.1)
        h.feed(h.m.packetReceived(now: h.now))  // PINGRESP
        #expect(h.timer?.purpose == .keepalive)
        let second = h.fire(expecting: .keepalive)
        #expect(second.first == .sendPing)
        #expect(h.m.isConnected)
        #expect(h.log.filter { $0 == .sendPing }.count == 2)
    }

    @Test("keepalive rides an open window: traffic goes in the window and no separate ping wakes the radio")
    func rideWindow() {
        var h = Harness(keepalive: 60)
        h.connect()
        let connectedAt = h.now
        // Early in the period a window changes nothing: the ping is not near.
        h.advance(20)
        #expect(h.feed(h.m.windowOpened(now: h.now)).isEmpty)
        // Past half the period, the window carries the status (QoS 1) instead.
        h.advance(20)
        let window = h.now
        let ride = h.feed(h.m.windowOpened(now: h.now))
        #expect(ride.first == .publishStatus)
        h.advance(0.05)
        h.feed(h.m.packetSent(now: h.now))
        h.advance(0.05)
        h.feed(h.m.packetReceived(now: h.now))  // PUBACK
        // The ping that was due at connectedAt + 60 now falls a whole keepalive after the window.
        #expect(h.timer?.purpose == .keepalive)
        #expect(h.timer!.at > connectedAt + 60)
        #expect(abs(h.timer!.at - (window + 60.1)) < 0.001)
        // Windows every 45 s keep it so: the radio never wakes for a ping on its own.
        for _ in 0..<10 {
            h.advance(45)
            #expect(h.timer!.at > h.now, "the keepalive timer would have fired outside a window")
            #expect(h.feed(h.m.windowOpened(now: h.now)).first == .publishStatus)
            h.feed(h.m.packetSent(now: h.now))
            h.feed(h.m.packetReceived(now: h.now))
        }
        #expect(!h.log.contains(.sendPing))
        // Not connected: a window does nothing.
        var idle = Harness()
        #expect(idle.m.windowOpened(now: idle.now).isEmpty)
    }

    @Test("offline: attempts go on with their backoff (a LAN broker needs no default route); back online: at once")
    func offlineOnline() {
        var h = Harness()
        h.feed(h.m.networkChanged(online: false, now: h.now))
        let start = h.feed(h.m.start(now: h.now))
        #expect(start.contains(.connect), "a broker on the LAN is reachable without a default route")
        h.feed(h.m.connectFailed(reason: "Network is unreachable", now: h.now))
        for _ in 0..<8 {
            h.fire(expecting: .reconnect)
            h.feed(h.m.connectFailed(reason: "Network is unreachable", now: h.now))
        }
        #expect(h.retryDelay! <= 60 + 0.001, "at most one attempt a minute")
        // Back online: at once, not at the end of the backoff.
        let back = h.feed(h.m.networkChanged(online: true, now: h.now))
        #expect(back.contains(.connect))
        // An open connection is left to its keepalive when the route goes.
        h.feed(h.m.connectIssued(now: h.now))
        h.feed(h.m.connack(rc: 0, reason: "", now: h.now))
        h.feed(h.m.networkChanged(online: false, now: h.now))
        #expect(h.m.isConnected, "an open connection is left to its keepalive")
    }

    @Test("back online resets the backoff the missing network built up")
    func onlineResetsBackoff() {
        var h = Harness()
        h.feed(h.m.start(now: h.now))
        for _ in 0..<6 {
            h.feed(h.m.connectFailed(reason: "Network is unreachable", now: h.now))
            h.fire(expecting: .reconnect)
        }
        h.feed(h.m.connectFailed(reason: "Network is unreachable", now: h.now))
        #expect(h.retryDelay! >= 30)
        h.feed(h.m.networkChanged(online: false, now: h.now))
        let back = h.feed(h.m.networkChanged(online: true, now: h.now))
        #expect(back.contains(.connect))
        h.feed(h.m.connectFailed(reason: "Connection refused", now: h.now))
        #expect(h.retryDelay! <= 1)
    }

    @Test("a broker on this machine is tried whatever the network says")
    func loopbackIgnoresOffline() {
        var h = Harness(loopback: true)
        h.feed(h.m.networkChanged(online: false, now: h.now))
        #expect(h.feed(h.m.start(now: h.now)).contains(.connect))
        #expect(M.isLoopback(host: "127.0.0.1") && M.isLoopback(host: "localhost") && M.isLoopback(host: "[::1]"))
        #expect(!M.isLoopback(host: "128.0.0.1") && !M.isLoopback(host: "broker.example") && !M.isLoopback(host: "127.0.0"))
    }

    @Test("a message that cannot be recorded drops the connection without writing; backoff grows until a record succeeds")
    func rejection() {
        var h = Harness()
        h.connect()
        let r1 = h.feed(h.m.messageRejected(now: h.now))
        #expect(r1.first == .close(sendDisconnect: false))
        #expect(reports(r1).count == 1)
        h.fire(expecting: .reconnect)
        h.feed(h.m.connectIssued(now: h.now))
        h.feed(h.m.connack(rc: 0, reason: "", now: h.now))
        #expect(h.m.failedAttempts == 1, "a good connection does not reset a rejection's backoff")
        h.feed(h.m.messageRejected(now: h.now))
        #expect(h.m.failedAttempts == 2)
        let second = h.retryDelay!
        #expect(second >= 1 && second <= 2)
        h.m.messageRecorded()
        #expect(h.m.failedAttempts == 0 && !h.m.lostToRejection)
    }

    @Test("subscriptions and publishes go only on an open connection")
    func subscribeAndPublish() {
        var h = Harness()
        #expect(h.m.subscriptionsChanged(now: h.now).isEmpty)
        #expect(h.m.publishRequested(now: h.now).isEmpty)
        h.connect()
        #expect(h.feed(h.m.subscriptionsChanged(now: h.now)).first == .subscribe)
        #expect(h.feed(h.m.publishRequested(now: h.now)).first == .publish)
    }

    @Test("stop: offline status and a clean DISCONNECT when connected; nothing written with an unsettled message")
    func stop() {
        var h = Harness()
        h.connect()
        #expect(h.feed(h.m.stop(mayWrite: true)) == [.cancelTimer, .publishOffline, .close(sendDisconnect: true), .finish])
        #expect(h.m.isStopped && h.timer == nil)
        // Stopped: nothing more happens.
        h.advance(1000)
        #expect(h.m.timerFired(now: h.now).isEmpty)
        #expect(h.m.windowOpened(now: h.now).isEmpty)
        #expect(h.m.networkChanged(online: true, now: h.now).isEmpty)
        #expect(h.m.stop(mayWrite: true).isEmpty)

        var unsettled = Harness()
        unsettled.connect()
        #expect(unsettled.m.stop(mayWrite: false) == [.cancelTimer, .close(sendDisconnect: false), .finish])

        var waiting = Harness()
        waiting.feed(waiting.m.start(now: waiting.now))
        waiting.feed(waiting.m.connectFailed(reason: "x", now: waiting.now))
        #expect(waiting.m.stop(mayWrite: true) == [.cancelTimer, .finish])
    }

    @Test("the same seed gives the same delays")
    func deterministic() {
        func delays(seed: UInt64) -> [Double] {
            var h = Harness(seed: seed)
            h.feed(h.m.start(now: h.now))
            var out: [Double] = []
            for _ in 0..<5 {
                h.feed(h.m.connectFailed(reason: "x", now: h.now))
                out.append(h.retryDelay!)
                h.fire(expecting: .reconnect)
            }
            return out
        }
        #expect(delays(seed: 1) == delays(seed: 1))
        #expect(delays(seed: 1) != delays(seed: 2))
    }
}
