import DrowseCore

/// The device's MQTT connection on the simulator's clock (docs/benchmarks.md, "The push channel,
/// simulated and on the wire"): the real `MQTTConnectionMachine`, fed what happened as
/// `MQTTSession`'s driver feeds it, with a broker that answers at once (CONNACK, SUBACK, PUBACK,
/// PINGRESP at the instant of the packet they answer) whenever the board is online. Each exchange is an instant of radio
/// activity; a keepalive ping is kept apart, so that wakes made of pings alone can be counted.
///
/// The broker keeps the session (clean session off, as drowsed connects): a notification
/// published while the device has no session waits there and arrives at the next CONNACK.
/// Offline, nothing leaves: a connection the board had stays open until its unanswered ping
/// declares it dead, and attempts fail at once without the radio (no route), as
/// `MQTTConnectionMachine` expects.
///
/// An exchange that is not a ping ends with a bare TCP ACK `delayedAck` seconds later: Linux
/// acknowledges a segment it has nothing to answer with after its 40 ms delayed-ACK timer, and
/// the captures show that last ACK about 45 ms after a PUBLISH and its PUBACK (the PINGRESP is
/// acknowledged at once). It costs nothing against a real tail, but a wire run K times faster
/// would stretch it K times: the bench's link acknowledges at once (`delayedAck` 0).
///
/// `scale`: scenario seconds per second of the machine's clock. A scenario run on the wire with
/// time compressed K times (`drowse simulate --compress K`) gives the machine a clock K times
/// slower than the scenario's, so that its constants (the CONNACK timeout, the backoff, the
/// margin past the keepalive) are the seconds drowsed lives them in.
package struct PushChannel: Sendable {
    /// What one instant of radio activity was.
    package enum Packet: Sendable, Equatable {
        /// PINGREQ and its PINGRESP.
        case keepalive
        /// Anything else: CONNECT, SUBSCRIBE, PUBLISH, their answers, DISCONNECT.
        case other
    }

    package private(set) var machine: MQTTConnectionMachine
    let scale: Double
    /// When the machine's one timer goes off, in scenario time.
    package private(set) var timerAt: Double?
    /// Every exchange on the link and its last ACK.
    package private(set) var packets: [(at: Double, kind: Packet)] = []
    package private(set) var online: Bool
    /// Sessions the broker accepted (the first one included).
    package private(set) var sessions = 0
    /// PINGREQs that went over the air.
    package private(set) var pings = 0
    /// Notifications the broker holds for the device (app indices, oldest first).
    var held: [Int] = []
    /// Notifications that reached the device since the caller last took them.
    var arrived: [(app: Int, at: Double)] = []
    /// The machine was told to start.
    var started = false

    /// Seconds from an exchange to the last ACK of it, on the machine's clock.
    package static let linuxDelayedAck = 0.045
    let delayedAck: Double

    /// `keepalive` in seconds of the machine's clock.
    /// `maxKeepalive`: drowsed's adaptive keepalive grows up to it (nil: a fixed keepalive, as a
    /// plain client's).
    package init(keepalive: Double, maxKeepalive: Double? = nil, scale: Double = 1, delayedAck: Double = linuxDelayedAck,
                 online: Bool, seed: UInt64) {
        self.delayedAck = delayedAck
        var g = SplitMix64.stream(seed, 6)
        machine = MQTTConnectionMachine(keepalive: keepalive, maxKeepalive: maxKeepalive, peer: "broker:1883", seed: g.next())
        self.scale = scale
        self.online = online
    }

    package var isConnected: Bool { machine.isConnected }

    /// An exchange at `t`: a ping alone, anything else and its delayed ACK.
    mutating func record(_ kind: Packet, _ t: Double) {
        packets.append((t, kind))
        if kind == .other { packets.append((t + delayedAck * scale, .other)) }
    }

    func clock(_ t: Double) -> Double { t / scale }

    // MARK: what happens to the device

    package mutating func start(now t: Double) {
        started = true
        perform(machine.networkChanged(online: online, now: clock(t)), t)
        perform(machine.start(now: clock(t)), t)
    }

    package mutating func timerFired(now t: Double) {
        timerAt = nil
        perform(machine.timerFired(now: clock(t)), t)
    }

    package mutating func networkChanged(online: Bool, now t: Double) {
        guard online != self.online else { return }
        self.online = online
        guard started else { return }
        perform(machine.networkChanged(online: online, now: clock(t)), t)
    }

    /// drowsed publishes a retained status (`MQTTLink.republishStatusIfChanged`).
    package mutating func publish(now t: Double) {
        perform(machine.publishRequested(now: clock(t)), t)
    }

    /// A fetch window opened: the keepalive may ride it.
    package mutating func windowOpened(now t: Double) {
        perform(machine.windowOpened(now: clock(t)), t)
    }

    /// The provider publishes a notification to the device.
    package mutating func notify(app: Int, now t: Double) {
        held.append(app)
        deliverHeld(t)
    }

    /// Notifications that reached the device since the last call, in order.
    package mutating func takeArrived() -> [(app: Int, at: Double)] {
        defer { arrived = [] }
        return arrived
    }

    // MARK: the broker and the link

    /// The broker passes on what it holds while a session is up and the link carries it: each a
    /// PUBLISH in, its PUBACK out.
    mutating func deliverHeld(_ t: Double) {
        guard online, machine.isConnected, !held.isEmpty else { return }
        let passing = held
        held = []
        for app in passing {
            record(.other, t)
            arrived.append((app, t))
            perform(machine.packetReceived(now: clock(t)), t)
            perform(machine.packetSent(now: clock(t)), t)
        }
    }

    /// Carries out the machine's actions the way `MQTTSession.Driver` does, feeding back what
    /// the broker answers; actions an answer brings run after the rest of the batch.
    mutating func perform(_ actions: [MQTTConnectionMachine.Action], _ t: Double) {
        var batch = actions
        while !batch.isEmpty {
            var next: [MQTTConnectionMachine.Action] = []
            for a in batch { next += carryOut(a, t) }
            batch = next
        }
        deliverHeld(t)
    }

    mutating func carryOut(_ action: MQTTConnectionMachine.Action, _ t: Double) -> [MQTTConnectionMachine.Action] {
        let now = clock(t)
        switch action {
        case .connect:
            // No route: connect() fails at once, without the radio.
            guard online else { return machine.connectFailed(reason: "network is unreachable", now: now) }
            var out = machine.connectIssued(now: now)
            record(.other, t)  // SYN, CONNECT and CONNACK
            out += machine.packetReceived(now: now)
            out += machine.connack(rc: 0, reason: "accepted", now: now)
            return out
        case .close(let sendDisconnect):
            if sendDisconnect, online { record(.other, t) }
        case .sendPing:
            // PINGRESP comes back at once when the link carries it; else the machine's
            // ping-answer timer finds the link dead.
            if online {
                pings += 1
                record(.keepalive, t)
                return machine.packetReceived(now: now)
            }
        case .subscribe:
            if online {
                record(.other, t)
                return machine.subscriptionsConfirmed(now: now)
            }
            return []
        case .publishStatus, .publish, .publishOffline:
            // The PUBLISH leaves (the machine counted it); its PUBACK comes back.
            if online {
                record(.other, t)
                return machine.packetSent(now: now) + machine.packetReceived(now: now)
            }
        case .probePreferred, .endProbe:
            break  // One broker: never asked.
        case .keepaliveLearned:
            break  // drowsed keeps it in state.db; a simulation starts afresh.
        case .setTimer(let at, _):
            timerAt = at * scale
        case .cancelTimer:
            timerAt = nil
        case .report(.connected):
            sessions += 1
        case .report(.disconnected), .log, .finish:
            break
        }
        return []
    }
}
