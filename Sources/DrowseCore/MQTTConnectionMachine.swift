/// Every decision of the device's one MQTT connection: when to connect, how long to wait for
/// CONNACK, when the keepalive needs a PINGREQ and when a wake window can carry that traffic
/// instead, when a silent link is dead, how long to back off before the next attempt, and that
/// no attempt is made while the board has no network. Pure: the session feeds it what happened
/// (with the monotonic time it happened at) and carries out the actions it returns; the one
/// timer it asks for is always the last `setTimer` (or none after `cancelTimer`).
///
/// Keepalive: MQTT's keepalive restarts with traffic in either direction, and libmosquitto sends
/// PINGREQ once `keepalive` seconds have passed since the older of the last packet in and the
/// last packet out. A PINGREQ not answered within half a keepalive declares the link dead, so a
/// dead link is found within 1.5× keepalive of the last traffic. While a wake window has the
/// radio on anyway, the machine sends the retained status (QoS 1: its PUBACK restarts the
/// incoming side too) once half the keepalive has gone by, so the next ping falls a whole
/// keepalive later instead of waking the radio on its own.
///
/// More than one broker (`[mqtt] url` as a list, the preferred first): losing the broker (a
/// failed attempt or a dropped connection) moves to the next one in the list, with the usual
/// backoff. While connected to any but the first, the machine goes back to the first when a
/// keepalive ping falls due (or a wake window opens) and `failbackAt` has passed: make before
/// break. Beside the working session (whose ping goes as usual) it opens a plain TCP connection to
/// the preferred broker (`probePreferred`); only when that answers within `probeTimeout` does it
/// disconnect cleanly (the broker keeps the session) and connect to the preferred broker. A probe
/// that fails or times out leaves the working session alone, and the next try waits longer
/// (`failbackBackoff`: from one keepalive doubling to 30 minutes). If the preferred broker answers
/// the probe but then refuses MQTT (refused, no CONNACK), the machine returns to the broker it came
/// from at once, with no backoff. Why no timer of its own: an
/// idle device wakes for the keepalive anyway (the radio is up for that packet), so riding it
/// costs no extra wakeup; a timer of its own would wake an idle board just to ask. The price is
/// that moving back waits for the next keepalive (240 s by default) after `failbackAt`, and a
/// device whose link is never idle for a keepalive moves back at its next wake window.
package struct MQTTConnectionMachine: Sendable {
    package enum TimerPurpose: String, Sendable, Equatable {
        /// The backoff after a lost or failed connection is over: connect.
        case reconnect
        /// The probe of the preferred broker got no answer in time.
        case probe
        /// No CONNACK since the connection was opened.
        case connack
        /// A keepalive period passed without traffic: send PINGREQ.
        case keepalive
        /// A PINGREQ went unanswered for half a keepalive.
        case pingAnswer
    }

    package enum LogLevel: Sendable, Equatable { case info, warning }

    package enum Report: Sendable, Equatable {
        case connected
        case disconnected(reason: String)
    }

    package enum Action: Sendable, Equatable {
        /// Open a connection (TCP, then CONNECT); answer with `connectIssued` or `connectFailed`.
        case connect
        /// End the connection: send DISCONNECT first when `sendDisconnect`, then close the socket.
        case close(sendDisconnect: Bool)
        /// The keepalive is due: let the client library send PINGREQ.
        case sendPing
        /// (Re)subscribe the wanted topics.
        case subscribe
        /// Publish the retained status messages (QoS 1).
        case publishStatus
        /// Send the message the owner asked to publish.
        case publish
        /// At stop: publish the offline status ourselves (a clean DISCONNECT suppresses the will).
        case publishOffline
        /// Open a TCP connection to the preferred broker beside the session and report
        /// `probeAnswered` or `probeFailed` (make before break).
        case probePreferred
        /// Close the probe's connection (answered, failed, timed out, or the session went away).
        case endProbe
        case setTimer(at: Double, purpose: TimerPurpose)
        case cancelTimer
        /// Tell the owner.
        case report(Report)
        case log(LogLevel, String)
        /// Stopped: nothing more happens.
        case finish
    }

    enum Phase: Sendable, Equatable {
        /// Not started yet.
        case idle
        /// No connection; the next attempt is due at `nextAttempt` (if online).
        case waiting
        /// The connection is open; CONNACK has not come since `since`.
        case awaitingConnack(since: Double)
        case connected
        case stopped
    }

    /// The keepalive the session asks for in CONNECT.
    package let configuredKeepalive: Double
    /// The keepalive of the current connection: the configured one, or an MQTT 5 broker's
    /// shorter Server Keep Alive (`serverKeepalive`).
    package private(set) var keepalive: Double
    /// How long to wait for CONNACK: a hung broker accepts connections and says nothing.
    package var connackTimeout: Double { min(30, keepalive) }
    /// The brokers ("host:port", for log texts), the preferred first.
    package let peers: [String]
    let loopbackPeers: [Bool]
    /// The broker in use (or tried next): an index into `peers`.
    package private(set) var current = 0
    /// "host:port" of the broker in use, for log texts.
    package var peer: String { peers[current] }
    /// The broker in use is on this machine: reachable whatever the network says.
    package var peerIsLoopback: Bool { loopbackPeers[current] }
    /// While on a broker other than the first: not before this time does the machine try the first again.
    package private(set) var failbackAt: Double?
    /// A try of the preferred broker is under way; it came from this broker (index) and goes back
    /// there at once if the preferred one does not answer.
    package private(set) var failingBackFrom: Int?
    /// Spaces the tries of the preferred broker: a keepalive at first, doubling up to 30 minutes.
    var failbackBackoff: Backoff

    var phase: Phase = .idle
    var backoff: Backoff
    /// The broker confirmed the current connection's subscriptions.
    package private(set) var confirmed = false
    /// When the probe of the preferred broker started, while one runs.
    package private(set) var probeStartedAt: Double?
    /// How long a probe of the preferred broker may take to answer.
    package let probeTimeout = 5.0
    /// Why the last connection or attempt was lost (shown by `drowse status`); nil once a session
    /// is up again.
    package private(set) var lastLoss: String?
    var random: SplitMix64
    package private(set) var online = true
    package private(set) var nextAttempt = 0.0
    var lastIn = 0.0
    var lastOut = 0.0
    /// When PINGREQ went out, until any packet arrives.
    var pingSentAt: Double?
    /// The last connection was dropped because a received message could not be recorded: the
    /// backoff keeps growing across reconnects until a record succeeds again (a full disk must
    /// not make the device reconnect every second).
    package private(set) var lostToRejection = false
    var timer: (at: Double, purpose: TimerPurpose)?

    package init(keepalive: Double, peer: String, peerIsLoopback: Bool = false, backoff: Backoff = Backoff(base: 1, cap: 60), seed: UInt64) {
        self.init(keepalive: keepalive, brokers: [(peer, peerIsLoopback)], backoff: backoff, seed: seed)
    }

    /// `brokers`: "host:port" and whether it is this machine, the preferred first (at least one).
    package init(keepalive: Double, brokers: [(peer: String, loopback: Bool)], backoff: Backoff = Backoff(base: 1, cap: 60), seed: UInt64) {
        precondition(!brokers.isEmpty, "at least one broker")
        self.configuredKeepalive = keepalive
        self.keepalive = keepalive
        self.peers = brokers.map(\.peer)
        self.loopbackPeers = brokers.map(\.loopback)
        self.backoff = backoff
        self.failbackBackoff = Backoff(base: max(1, keepalive), cap: max(keepalive, 1800))
        self.random = SplitMix64(seed: seed)
    }

    package var isConnected: Bool { phase == .connected }
    /// A connection is open (connected or waiting for CONNACK).
    package var isOpen: Bool {
        switch phase {
        case .connected, .awaitingConnack: return true
        default: return false
        }
    }
    package var isStopped: Bool { phase == .stopped }
    /// The timer the owner should have set now, if any.
    package var currentTimer: (at: Double, purpose: TimerPurpose)? { timer }
    /// Attempts since the last good connection (what the backoff has counted).
    package var failedAttempts: Int { backoff.attempt }

    /// Attempts go on without a default route too: a broker on the LAN (or this machine) needs
    /// none, and towards any other one connect() fails at once (ENETUNREACH) without using the
    /// radio. The backoff keeps them to one a minute at most; the network's return retries at once.
    var mayConnect: Bool { true }

    /// Whether `host` names this machine ("localhost", 127.0.0.0/8, ::1), whose broker needs no network.
    package static func isLoopback(host: String) -> Bool {
        var h = host.lowercased()
        if h.hasPrefix("["), h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        if h == "localhost" || h.hasSuffix(".localhost") || h == "::1" || h == "0:0:0:0:0:0:0:1" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { p in UInt8(p) != nil }
    }

    // MARK: events

    package mutating func start(now: Double) -> [Action] {
        guard phase == .idle else { return [] }
        phase = .waiting
        nextAttempt = now
        let waiting: [Action] = mayConnect ? [] : [.log(.info, "no network: connecting once there is one")]
        return waiting + attemptIfDue(now: now) + timerActions(now: now)
    }

    /// The connection was opened (the CONNECT packet is queued).
    package mutating func connectIssued(now: Double) -> [Action] {
        guard phase == .waiting else { return [] }
        phase = .awaitingConnack(since: now)
        keepalive = configuredKeepalive
        lastIn = now
        lastOut = now
        pingSentAt = nil
        return timerActions(now: now)
    }

    /// Waiting for the CONNACK of an open connection.
    package var awaitingConnack: Bool {
        if case .awaitingConnack = phase { return true }
        return false
    }

    /// An MQTT 5 broker's CONNACK named a Server Keep Alive: the broker holds the connection that
    /// long without traffic, and the client must keep to it. A shorter one than asked for is the
    /// keepalive of this connection (the client library pings by it too). Call before `connack`.
    package mutating func serverKeepalive(_ seconds: Double) {
        guard awaitingConnack, seconds > 0 else { return }
        keepalive = min(configuredKeepalive, seconds)
    }

    /// Opening the connection failed (DNS, refused, unreachable...).
    package mutating func connectFailed(reason: String, now: Double) -> [Action] {
        guard phase == .waiting else { return [] }
        return [.log(.warning, "cannot connect to \(peer): \(reason)")] + lose(reason, now: now)
    }

    /// The broker to connect to, as an index into the brokers the machine was made with (the
    /// owner reads it when it carries out `.connect`).
    package var brokerToConnect: Int { current }

    /// CONNACK arrived: `rc` 0 accepts, anything else refuses (`reason` says why in words).
    package mutating func connack(rc: Int, reason: String, now: Double) -> [Action] {
        guard case .awaitingConnack = phase else { return [] }
        guard rc == 0 else {
            return [.close(sendDisconnect: true)] + lose("broker refused: \(reason)", now: now)
        }
        phase = .connected
        // Not up yet: the backoff resets once the broker has confirmed the subscriptions
        // (`subscriptionsConfirmed`). A broker that accepts the connection and then drops it, or
        // refuses a subscription, must meet a growing backoff, not a retry every second.
        confirmed = false
        if current == 0 {
            failbackAt = nil
            failbackBackoff.reset()
        } else if failbackAt == nil {
            failbackAt = now + failbackBackoff.next(unit: random.unit())
        }
        failingBackFrom = nil
        lastOut = now
        return [.subscribe, .publishStatus, .log(.info, "connected to \(peer)"), .report(.connected)] + timerActions(now: now)
    }

    /// Every SUBSCRIBE of the connection was answered with a granted QoS (or there was nothing to
    /// subscribe to): the session is up, and only now does the reconnect backoff start again.
    package mutating func subscriptionsConfirmed(now: Double) -> [Action] {
        guard phase == .connected, !confirmed else { return [] }
        confirmed = true
        lastLoss = nil
        if !lostToRejection { backoff.reset() }
        return []
    }

    /// A SUBACK refused a topic (0x80): the session does not work as configured. It is closed and
    /// tried again with the growing backoff; `reason` says which topic, for `drowse status`.
    package mutating func subscriptionRefused(topic: String, now: Double) -> [Action] {
        guard phase == .connected else { return [] }
        return [.close(sendDisconnect: true)] + lose("the broker refused the subscription to \(topic)", now: now)
    }

    /// The connection broke (a read or write failed, the broker closed it, the client library
    /// gave up on the keepalive).
    package mutating func disconnected(reason: String, now: Double) -> [Action] {
        guard isOpen else { return [] }
        return [.close(sendDisconnect: false)] + lose(reason, now: now)
    }

    /// A packet arrived: the broker is alive, and the keepalive's incoming side restarts.
    package mutating func packetReceived(now: Double) -> [Action] {
        guard isOpen else { return [] }
        lastIn = now
        pingSentAt = nil
        return timerActions(now: now)
    }

    /// A packet left.
    package mutating func packetSent(now: Double) -> [Action] {
        guard isOpen else { return [] }
        lastOut = now
        return timerActions(now: now)
    }

    /// The timer asked for last went off (or the owner woke early: nothing is due then).
    package mutating func timerFired(now: Double) -> [Action] {
        switch phase {
        case .idle, .stopped:
            return []
        case .waiting:
            return attemptIfDue(now: now) + timerActions(now: now)
        case .awaitingConnack(let since):
            if now >= since + connackTimeout { return connackTimeout(now: now) }
            return timerActions(now: now)
        case .connected:
            if let p = probeStartedAt, now >= p + probeTimeout {
                return probeFailed(reason: "no answer within \(Int(probeTimeout)) s", now: now)
            }
            if let p = pingSentAt, now >= p + keepalive / 2 { return deadLink(now: now) }
            if now >= min(lastIn, lastOut) + keepalive { return keepaliveDue(now: now) }
            return timerActions(now: now)
        }
    }

    /// No CONNACK within `connackTimeout` of opening the connection.
    package mutating func connackTimeout(now: Double) -> [Action] {
        guard case .awaitingConnack = phase else { return [] }
        return [.close(sendDisconnect: true)] + lose("no CONNACK from the broker", now: now)
    }

    /// A keepalive period passed without traffic: PINGREQ goes now.
    package mutating func keepaliveDue(now: Double) -> [Action] {
        guard phase == .connected else { return [] }
        // The radio wakes for this packet anyway: probe the preferred broker beside it, if it is time.
        let probe = pingSentAt == nil ? startProbeIfDue(now: now) : []
        if pingSentAt == nil { pingSentAt = now }
        // The client library restarts its own clock when it sends the ping.
        lastIn = now
        lastOut = now
        return probe + [.sendPing] + timerActions(now: now)
    }

    /// A wake window opened (the radio is on anyway): if the keepalive is past its half, send
    /// traffic now so the next ping falls a whole keepalive later.
    package mutating func windowOpened(now: Double) -> [Action] {
        let probe = phase == .connected && pingSentAt == nil ? startProbeIfDue(now: now) : []
        guard phase == .connected, now - min(lastIn, lastOut) > keepalive / 2 else { return probe.isEmpty ? [] : probe + timerActions(now: now) }
        lastOut = now
        return probe + [.publishStatus] + timerActions(now: now)
    }

    /// The owner changed the wanted topics.
    package mutating func subscriptionsChanged(now: Double) -> [Action] {
        guard phase == .connected else { return [] }
        lastOut = now
        return [.subscribe] + timerActions(now: now)
    }

    /// The owner wants a message published. It goes on an open connection (before CONNACK the
    /// client library queues it); without one it is dropped.
    package mutating func publishRequested(now: Double) -> [Action] {
        guard isOpen else { return [] }
        lastOut = now
        return [.publish] + timerActions(now: now)
    }

    /// Whether the board has a network (a default route). Offline, attempts go on with their
    /// backoff (see `mayConnect`); back online, a waiting session connects at once with a fresh backoff: the failures were the
    /// missing network's. An open connection is left alone (a roam keeps it; if it died, the
    /// keepalive finds out).
    package mutating func networkChanged(online: Bool, now: Double) -> [Action] {
        let was = self.online
        self.online = online
        guard phase == .waiting, online != was, !peerIsLoopback else { return [] }
        if online {
            if !lostToRejection { backoff.reset() }
            nextAttempt = now
            return [.log(.info, "network is back: connecting now")] + attemptIfDue(now: now) + timerActions(now: now)
        }
        return [.log(.info, "no default route: reconnect attempts go on with their backoff (a LAN broker needs none)")] + timerActions(now: now)
    }

    /// A received message could not be recorded: drop the connection without writing (its
    /// PUBACK dies with the socket and the broker delivers it again).
    package mutating func messageRejected(now: Double) -> [Action] {
        guard isOpen else { return [] }
        lostToRejection = true
        return [.close(sendDisconnect: false)]
            + lose("a received message could not be recorded; the broker will deliver it again", now: now)
    }

    /// A received message was recorded: records work again.
    package mutating func messageRecorded() {
        guard lostToRejection else { return }
        lostToRejection = false
        backoff.reset()
    }

    /// Stop: publish the offline status and disconnect cleanly if connected, then finish.
    /// `mayWrite` false (a received message is still unsettled): close without writing, so
    /// nothing is acknowledged that nobody recorded.
    /// The preferred broker took the probe's TCP connection: leave the working session cleanly and
    /// connect to the preferred one.
    package mutating func probeAnswered(now: Double) -> [Action] {
        guard phase == .connected, probeStartedAt != nil else { return [] }
        probeStartedAt = nil
        return [.endProbe] + failBack(now: now)
    }

    /// The probe failed (refused, unreachable) or timed out: the working session stays, and the
    /// preferred broker is tried again later, each time after a longer wait.
    package mutating func probeFailed(reason: String, now: Double) -> [Action] {
        guard probeStartedAt != nil else { return [] }
        probeStartedAt = nil
        guard phase == .connected else { return [.endProbe] }
        failbackAt = now + failbackBackoff.next(unit: random.unit())
        return [.endProbe, .log(.info, "the preferred broker \(peers[0]) does not answer (\(reason)): staying on \(peer)")] + timerActions(now: now)
    }

    package mutating func stop(mayWrite: Bool) -> [Action] {
        guard phase != .stopped else { return [] }
        let open = isOpen
        phase = .stopped
        timer = nil
        var actions: [Action] = [.cancelTimer]
        if probeStartedAt != nil {
            probeStartedAt = nil
            actions.append(.endProbe)
        }
        if open {
            actions += mayWrite ? [.publishOffline, .close(sendDisconnect: true)] : [.close(sendDisconnect: false)]
        }
        return actions + [.finish]
    }

    // MARK: decisions

    private mutating func attemptIfDue(now: Double) -> [Action] {
        guard phase == .waiting, mayConnect, now >= nextAttempt else { return [] }
        return [.connect]
    }

    private mutating func deadLink(now: Double) -> [Action] {
        [.close(sendDisconnect: true)] + lose("no answer to PINGREQ within half a keepalive: the link is dead", now: now)
    }

    /// Connected to a broker other than the preferred one, and the time to try that one has come.
    private func failbackDue(now: Double) -> Bool {
        guard current != 0, let at = failbackAt else { return false }
        return now >= at
    }

    /// On a non-preferred broker past `failbackAt`, with no probe running: start one.
    private mutating func startProbeIfDue(now: Double) -> [Action] {
        guard probeStartedAt == nil, failbackDue(now: now) else { return [] }
        probeStartedAt = now
        return [.probePreferred, .log(.info, "is the preferred broker \(peers[0]) back? (connected to \(peer))")]
    }

    /// Leave the broker in use (cleanly: it keeps the session) and connect to the preferred one now.
    private mutating func failBack(now: Double) -> [Action] {
        let from = current
        var actions: [Action] = [
            .log(.info, "trying the preferred broker \(peers[0]) again (connected to \(peers[from]))"),
            .report(.disconnected(reason: "moving back to the preferred broker")), .close(sendDisconnect: true),
        ]
        phase = .waiting
        pingSentAt = nil
        failingBackFrom = from
        current = 0
        nextAttempt = now
        actions += attemptIfDue(now: now)
        return actions + timerActions(now: now)
    }

    /// The connection is gone (or never came): tell, and back off before the next attempt. With
    /// more than one broker the next attempt goes to the next one; a failed try of the preferred
    /// broker goes straight back to the broker it left.
    private mutating func lose(_ why: String, now: Double) -> [Action] {
        var actions: [Action] = []
        lastLoss = why
        confirmed = false
        if probeStartedAt != nil {
            probeStartedAt = nil
            actions.append(.endProbe)
        }
        if phase == .connected { actions.append(.report(.disconnected(reason: why))) }
        if isOpen { actions.append(.log(.warning, "connection lost: \(why)")) }
        phase = .waiting
        pingSentAt = nil
        if let from = failingBackFrom {
            failingBackFrom = nil
            current = from
            nextAttempt = now
            failbackAt = now + failbackBackoff.next(unit: random.unit())
            actions.append(.log(.info, "the preferred broker did not answer: back to \(peers[from]) now"))
            return actions + attemptIfDue(now: now) + timerActions(now: now)
        }
        if peers.count > 1 {
            current = (current + 1) % peers.count
            // Set again (with the grown failback backoff) once connected to a non-preferred broker.
            failbackAt = nil
        }
        let delay = backoff.next(unit: random.unit())
        nextAttempt = now + delay
        if mayConnect {
            actions.append(.log(.info, "reconnecting\(peers.count > 1 ? " to \(peer)" : "") in \(Int(delay * 1000)) ms"))
        } else {
            actions.append(.log(.info, "no network: not reconnecting until there is one"))
        }
        return actions + timerActions(now: now)
    }

    /// The one timer the current state needs, as an action if it changed.
    private mutating func timerActions(now: Double) -> [Action] {
        let wanted: (at: Double, purpose: TimerPurpose)?
        switch phase {
        case .idle, .stopped:
            wanted = nil
        case .waiting:
            wanted = mayConnect ? (nextAttempt, .reconnect) : nil
        case .awaitingConnack(let since):
            wanted = (since + connackTimeout, .connack)
        case .connected:
            // A little past the keepalive, so the client library (whole seconds) sees it due too.
            let ping = (at: min(lastIn, lastOut) + keepalive + 0.05, purpose: TimerPurpose.keepalive)
            var next = ping
            if let p = pingSentAt, p + keepalive / 2 < next.at { next = (p + keepalive / 2, .pingAnswer) }
            if let p = probeStartedAt, p + probeTimeout < next.at { next = (p + probeTimeout, .probe) }
            wanted = next
        }
        let old = timer
        timer = wanted
        switch (old, wanted) {
        case (nil, nil): return []
        case (_?, nil): return [.cancelTimer]
        case (let o?, let w?) where o.at == w.at && o.purpose == w.purpose: return []
        case (_, let w?): return [.setTimer(at: w.at, purpose: w.purpose)]
        }
    }
}
