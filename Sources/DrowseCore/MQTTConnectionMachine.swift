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
package struct MQTTConnectionMachine: Sendable {
    package enum TimerPurpose: String, Sendable, Equatable {
        /// The backoff after a lost or failed connection is over: connect.
        case reconnect
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

    package let keepalive: Double
    /// How long to wait for CONNACK: a hung broker accepts connections and says nothing.
    package var connackTimeout: Double { min(30, keepalive) }
    /// "host:port", for log texts.
    package let peer: String
    /// The broker is on this machine: reachable whatever the network says.
    package let peerIsLoopback: Bool

    var phase: Phase = .idle
    var backoff: Backoff
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
        self.keepalive = keepalive
        self.peer = peer
        self.peerIsLoopback = peerIsLoopback
        self.backoff = backoff
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
        lastIn = now
        lastOut = now
        pingSentAt = nil
        return timerActions(now: now)
    }

    /// Opening the connection failed (DNS, refused, unreachable...).
    package mutating func connectFailed(reason: String, now: Double) -> [Action] {
        guard phase == .waiting else { return [] }
        return [.log(.warning, "cannot connect to \(peer): \(reason)")] + lose(reason, now: now)
    }

    /// CONNACK arrived: `rc` 0 accepts, anything else refuses (`reason` says why in words).
    package mutating func connack(rc: Int, reason: String, now: Double) -> [Action] {
        guard case .awaitingConnack = phase else { return [] }
        guard rc == 0 else {
            return [.close(sendDisconnect: true)] + lose("broker refused: \(reason)", now: now)
        }
        phase = .connected
        if !lostToRejection { backoff.reset() }
        lastOut = now
        return [.subscribe, .publishStatus, .log(.info, "connected to \(peer)"), .report(.connected)] + timerActions(now: now)
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
        if pingSentAt == nil { pingSentAt = now }
        // The client library restarts its own clock when it sends the ping.
        lastIn = now
        lastOut = now
        return [.sendPing] + timerActions(now: now)
    }

    /// A wake window opened (the radio is on anyway): if the keepalive is past its half, send
    /// traffic now so the next ping falls a whole keepalive later.
    package mutating func windowOpened(now: Double) -> [Action] {
        guard phase == .connected, now - min(lastIn, lastOut) > keepalive / 2 else { return [] }
        lastOut = now
        return [.publishStatus] + timerActions(now: now)
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
    package mutating func stop(mayWrite: Bool) -> [Action] {
        guard phase != .stopped else { return [] }
        let open = isOpen
        phase = .stopped
        timer = nil
        var actions: [Action] = [.cancelTimer]
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

    /// The connection is gone (or never came): tell, and back off before the next attempt.
    private mutating func lose(_ why: String, now: Double) -> [Action] {
        var actions: [Action] = []
        if phase == .connected { actions.append(.report(.disconnected(reason: why))) }
        if isOpen { actions.append(.log(.warning, "connection lost: \(why)")) }
        phase = .waiting
        pingSentAt = nil
        let delay = backoff.next(unit: random.unit())
        nextAttempt = now + delay
        if mayConnect {
            actions.append(.log(.info, "reconnecting in \(Int(delay * 1000)) ms"))
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
            if let p = pingSentAt, p + keepalive / 2 < ping.at {
                wanted = (p + keepalive / 2, .pingAnswer)
            } else {
                wanted = ping
            }
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
