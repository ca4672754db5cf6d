#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import CMQTTGate
import DrowseCore
import DrowseSystem
import Logging
import Synchronization

/// Settings for the device's one persistent MQTT session.
package struct MQTTSessionOptions: Sendable {
    package var host: String
    package var port: Int
    package var clientID: String
    /// Seconds: where the adaptive keepalive starts (may be under libmosquitto's 5 s when
    /// `maxKeepalive`, the keepalive asked for in CONNECT, is not).
    package var keepalive: Double
    package var tls: Bool
    package var username: String?
    package var password: String?
    package var caFile: String?
    package var certFile: String?
    package var keyFile: String?
    package var will: (topic: String, payload: [UInt8])?
    /// Every broker, the preferred (`host`, `port`) first; the others are used when it is lost
    /// (see `MQTTConnectionMachine`). One client id, credentials and TLS setting for all.
    package var brokers: [(host: String, port: Int)]
    /// The largest remaining length of a packet from the broker that libmosquitto may read
    /// (`[notifications] max_payload` plus room for the topic): a PUBLISH over it is cut to its
    /// topic and refused, anything else over it fails the connection (`CMQTTGate`).
    package var maxPacket: Int = MQTTSessionOptions.packetBound(maxPayload: 4096)
    /// MQTT 5 first (announcing `maxPacket` as the Maximum Packet Size, so the broker never sends
    /// more), falling back to 3.1.1 for a broker that refuses it; or 3.1.1 only.
    package var protocolChoice: MQTTProtocolChoice = .mqtt5WithFallback
    /// The longest interval the keepalive may adapt to (`[mqtt] max_keepalive`); the session asks
    /// the broker for it in CONNECT and pings as seldom as the path allows (`KeepaliveLearner`).
    /// nil or `keepalive`: a fixed keepalive.
    package var maxKeepalive: Int?
    /// What each network path was seen to hold before (kept across restarts by the owner).
    package var learnedPaths: [String: LearnedPath] = [:]
    /// A topic filter the session never subscribes to: a ping between CONNECT keepalives is an
    /// UNSUBSCRIBE of it (the broker answers UNSUBACK; nothing changes there).
    package var pingTopic = "drowse/ping"

    /// The bound for notifications of up to `maxPayload` bytes: the payload, the topic (up to
    /// 1 KiB: drowse's own topics are far shorter) and the packet id.
    package static func packetBound(maxPayload: Int) -> Int { maxPayload + 1024 + 4 }

    package init(host: String, port: Int, clientID: String, keepalive: Double, tls: Bool = false, username: String? = nil,
                password: String? = nil, caFile: String? = nil, certFile: String? = nil, keyFile: String? = nil,
                will: (topic: String, payload: [UInt8])? = nil, moreBrokers: [(host: String, port: Int)] = []) {
        self.host = host
        self.port = port
        self.brokers = [(host, port)] + moreBrokers
        self.clientID = clientID
        self.keepalive = keepalive
        self.tls = tls
        self.username = username
        self.password = password
        self.caFile = caFile
        self.certFile = certFile
        self.keyFile = keyFile
        self.will = will
    }
}

/// What a network path was seen to hold: the longest idle interval that held, the shortest that
/// failed (seconds).
package struct LearnedPath: Sendable, Equatable {
    package var held: Double
    package var failed: Double?
    package init(held: Double, failed: Double?) {
        self.held = held
        self.failed = failed
    }
}

/// Which MQTT version the session speaks.
package enum MQTTProtocolChoice: Sendable {
    /// MQTT 5 to each broker until it refuses it (a CONNACK "unsupported protocol version", or
    /// the connection closed or a malformed answer before any CONNACK, as RabbitMQ 3.10 does);
    /// then 3.1.1 to that
    /// broker until the session restarts.
    case mqtt5WithFallback
    case mqtt311
}

/// What the session tells its owner. Called on the session's thread.
package enum MQTTSessionEvent: Sendable {
    case connected
    case disconnected(reason: String)
    /// A PUBLISH arrived. Its PUBACK is held until `receipt` is settled: settle it once the
    /// message is recorded (or refused), so the broker never counts as delivered what a crash
    /// could still lose.
    case message(topic: String, payload: [UInt8], receipt: MQTTReceipt)
    /// A PUBLISH whose packet was over `maxPacket`: its payload (`bytes` long) was dropped as it
    /// arrived, never held. Settle the receipt like a message's (a refusal acknowledges it).
    case oversized(topic: String, bytes: Int, receipt: MQTTReceipt)
    /// The keepalive was due and a ping went out (for the metrics).
    case pingSent
    /// The keepalive learned what the network path `network` holds: keep it for the next start.
    case keepaliveLearned(network: String, LearnedPath)
}

/// One persistent MQTT session (clean session off, fixed client id) driven by our own loop:
/// a thread blocked in poll(2) on `mosquitto_socket()` and an eventfd, calling
/// `mosquitto_loop_read/write` when the socket is ready and `loop_misc` only at the keepalive
/// deadline. libmosquitto's own threaded or blocking loops are not used: they wake every second.
///
/// Every decision (when to connect, the CONNACK timeout, keepalive pings and riding wake
/// windows, dead links, reconnect backoff, no attempts while offline) is
/// `MQTTConnectionMachine`'s; this type feeds it what happened and carries out its actions.
///
/// Acknowledge after record: libmosquitto queues a QoS 1 PUBACK *before* it calls the message
/// callback, and in its default mode writes it at once. The session runs libmosquitto in
/// "external thread" mode instead (`mosquitto_threaded_set`), where queued packets leave only
/// when our loop calls `mosquitto_loop_write`; the loop writes nothing while any received
/// message's `MQTTReceipt` is unsettled. A crash before the record therefore leaves the message
/// unacknowledged and the broker delivers it again (the persistent session).
package final class MQTTSession: Sendable {
    enum Command: Sendable {
        case subscribe([String])
        case rideWindow
        case publish(topic: String, payload: [UInt8], retain: Bool)
        case stop(@Sendable () -> Void)
    }

    let options: MQTTSessionOptions
    let logger: Logger
    let onEvent: @Sendable (MQTTSessionEvent) -> Void
    /// The session's thread ended (after `stop`, or on its own).
    let onEnd: @Sendable () -> Void
    let commands = Mutex<[Command]>([])
    let wake = EventFD()
    /// Topics to (re)subscribe on every connect, the retained status to publish, and topics no
    /// longer wanted (an app removed by a reload) to unsubscribe at the next subscribe: the
    /// persistent session would otherwise keep them at the broker for good.
    let desired = Mutex<(topics: [String], onConnect: [(String, [UInt8])], dropped: [String])>(([], [], []))
    /// Whether the board has a network, as last told (`setNetwork`).
    let online = Atomic<Bool>(true)
    /// The network path (interface) as last told, and what is known of each path.
    let path = Mutex<(key: String?, learned: [String: LearnedPath])>((nil, [:]))
    /// For `drowse status`: the interval pinged at now, and the path it was learned on.
    let pinging = Mutex<(interval: Double, path: String?)>((0, nil))
    /// How long the connection may stay silent before a ping now (seconds).
    package var pingInterval: Double { pinging.withLock { $0.interval } }
    /// The network path the ping interval is for (an interface name), if known.
    package var pingPath: String? { pinging.withLock { $0.path } }
    let isConnected = Atomic<Bool>(false)
    /// The inbound gate stands between libmosquitto and its socket (`drowse_mqtt_gate_bound`).
    let gateBound = Atomic<Bool>(false)
    package var inboundGate: Bool { gateBound.load(ordering: .relaxed) }
    /// The machine's view for `drowse status`: subscriptions confirmed, failed attempts in a row,
    /// and why the last connection was lost.
    let health = Mutex<(confirmed: Bool, failedAttempts: Int, lastLoss: String?)>((false, 0, nil))
    let brokerInUse = Atomic<Int>(0)
    /// The MQTT version of the current (or last) connection: 5 or 4 (3.1.1); 0 before the first.
    let protocolInUse = Atomic<Int>(0)
    /// "5" or "3.1.1": the version the current or last connection speaks; nil before any.
    package var protocolVersion: String? {
        switch protocolInUse.load(ordering: .relaxed) {
        case 5: "5"
        case 4: "3.1.1"
        default: nil
        }
    }
    /// The receipts of the current connection: while any is unsettled nothing is written; a
    /// rejection drops the connection without writing. `connection` counts connections.
    let receipts = Mutex<ReceiptState>(ReceiptState())

    struct ReceiptState {
        var connection = 0
        var unsettled = 0
        var rejected = false
        /// A receipt of this connection was acknowledged (records work again).
        var acknowledged = false
    }

    package var connected: Bool { isConnected.load(ordering: .relaxed) }
    /// Connected and its subscriptions confirmed by the broker.
    package var subscribed: Bool { connected && health.withLock { $0.confirmed } }
    /// Connection attempts that failed (or did not get as far as confirmed subscriptions) since the
    /// last session that was up.
    package var failedAttempts: Int { health.withLock { $0.failedAttempts } }
    /// Why the last connection or attempt was lost; nil once a session is up again.
    package var lastLoss: String? { health.withLock { $0.lastLoss } }
    /// The broker in use or tried next, as "host:port".
    package var broker: String {
        let b = options.brokers[brokerInUse.load(ordering: .relaxed)]
        return b.host.contains(":") ? "[\(b.host)]:\(b.port)" : "\(b.host):\(b.port)"
    }

    package init(options: MQTTSessionOptions, logger: Logger, onEnd: @escaping @Sendable () -> Void = {},
                 onEvent: @escaping @Sendable (MQTTSessionEvent) -> Void) {
        self.onEnd = onEnd
        self.options = options
        self.logger = logger
        self.onEvent = onEvent
        path.withLock { $0.learned = options.learnedPaths }
        pinging.withLock { $0.interval = options.keepalive }
    }

    package func start() {
        let me = Unmanaged.passRetained(self)
        OSThread.detach(name: "mqtt") {
            let session = me.takeUnretainedValue()
            session.run()
            session.onEnd()
            me.release()
        }
    }

    /// Sets the topics subscribed (QoS 1) now and after every reconnect.
    package func setSubscriptions(_ topics: [String]) {
        desired.withLock { d in
            let now = Set(topics)
            d.dropped = Array(Set(d.dropped + d.topics.filter { !now.contains($0) }).subtracting(now)).sorted()
            d.topics = topics
        }
        send(.subscribe(topics))
    }

    /// Retained messages to publish after every (re)connect, e.g. the device status.
    package func setPublishOnConnect(_ messages: [(String, [UInt8])]) {
        desired.withLock { $0.onConnect = messages }
    }

    /// A retained message that changed (the device status): published now if connected, and
    /// after every (re)connect from now on.
    package func updateRetained(topic: String, payload: [UInt8]) {
        desired.withLock { d in
            d.onConnect.removeAll { $0.0 == topic }
            d.onConnect.append((topic, payload))
        }
        send(.publish(topic: topic, payload: payload, retain: true))
    }

    /// Whether the board has a network (a default route). Without one no connection is
    /// attempted (except to a broker on this machine); when it comes back the session connects
    /// at once. May be called before `start`.
    package func setNetwork(online: Bool, path: String? = nil) {
        let moved = self.path.withLock { p -> Bool in
            defer { p.key = path }
            return p.key != path
        }
        guard self.online.exchange(online, ordering: .relaxed) != online || moved else { return }
        wake.signal()
    }

    /// The radio is awake for a wake window: if the keepalive would need a ping in the second
    /// half of its period, send traffic now instead, so the broker's timer restarts and no
    /// separate wakeup is needed for it later.
    package func rideWindow() { send(.rideWindow) }

    package func publish(topic: String, payload: [UInt8], retain: Bool) {
        send(.publish(topic: topic, payload: payload, retain: retain))
    }

    /// Disconnects cleanly (the broker keeps the session) and ends the thread.
    package func stop() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in send(.stop({ c.resume() })) }
    }

    func settled(ack: Bool, connection: Int) {
        let signal = receipts.withLock { r -> Bool in
            guard r.connection == connection else { return false }
            r.unsettled -= 1
            if ack { r.acknowledged = true } else { r.rejected = true }
            return r.unsettled == 0 || !ack
        }
        if signal { wake.signal() }
    }

    private func send(_ c: Command) {
        commands.withLock { $0.append(c) }
        wake.signal()
    }

    // MARK: session thread

    /// What libmosquitto's callbacks said during the last loop call.
    final class Context {
        unowned let session: MQTTSession
        /// The CONNACK's return code, until the loop hands it to the machine.
        var connack: Int32?
        /// Why the disconnect callback says the connection ended.
        var lostReason: String?
        /// SUBACKs that arrived during the last loop call: message id and granted QoS codes.
        var subacks: [(mid: Int32, granted: [Int32])] = []
        /// The Server Keep Alive of an MQTT 5 CONNACK, or -1.
        var serverKeepalive = -1
        /// The inbound gate of the connection, and the QoS 0/1 messages delivered on it so far.
        let gate: OpaquePointer?
        var delivered: UInt64 = 0
        init(_ s: MQTTSession) {
            session = s
            gate = drowse_mqtt_gate_new(UInt32(clamping: s.options.maxPacket))
        }
        deinit { if let gate { drowse_mqtt_gate_free(gate) } }
    }

    private func run() {
        let ctx = Context(self)
        guard ctx.gate != nil else {
            // Without the gate one packet could take all the board's memory: no session.
            logger.error("mqtt: cannot allocate the inbound gate; MQTT is off")
            waitForStop()
            return
        }
        if drowse_mqtt_gate_bound() != 0 {
            gateBound.store(true, ordering: .relaxed)
        } else {
            logger.error("mqtt: the inbound gate is not in place (libmosquitto's read or SSL_read is not drowsed's); packets are not bounded before they are read")
        }
        guard let mosq = makeClient(ctx) else {
            // Nothing to connect with: still answer `stop`, so the owner's shutdown does not hang.
            waitForStop()
            return
        }
        defer { mosquitto_destroy(mosq) }
        Driver(session: self, mosq: mosq, ctx: ctx).run()
    }

    /// A configured client, or nil (logged) when it cannot be made as configured: a session
    /// without its TLS, credentials or acknowledge-after-record mode must not connect at all.
    private func makeClient(_ ctx: Context) -> OpaquePointer? {
        guard logger.mosquitto(mosquitto_lib_init(), "mosquitto_lib_init", level: .error, "MQTT is off") else { return nil }
        let ctxPtr = Unmanaged.passUnretained(ctx).toOpaque()
        guard let mosq = mosquitto_new(options.clientID, false, ctxPtr) else {
            let saved = errno
            logger.error("mqtt: mosquitto_new failed: \(String(cString: strerror(saved))); MQTT is off")
            return nil
        }
        let ok = configure(mosq)
        if !ok {
            mosquitto_destroy(mosq)
            return nil
        }
        mosquitto_connect_v5_callback_set(mosq) { _, obj, rc, _, props in
            let ctx = Unmanaged<Context>.fromOpaque(obj!).takeUnretainedValue()
            ctx.connack = rc
            ctx.serverKeepalive = props.map { Int(cmosq_server_keepalive($0)) } ?? -1
        }
        mosquitto_subscribe_callback_set(mosq) { _, obj, mid, count, granted in
            let ctx = Unmanaged<Context>.fromOpaque(obj!).takeUnretainedValue()
            let codes = granted.map { Array(UnsafeBufferPointer(start: $0, count: Int(max(0, count)))) } ?? []
            ctx.subacks.append((mid, codes))
        }
        mosquitto_disconnect_callback_set(mosq) { _, obj, rc in
            let ctx = Unmanaged<Context>.fromOpaque(obj!).takeUnretainedValue()
            ctx.lostReason = rc == 0 ? "disconnected" : String(cString: mosquitto_strerror(rc))
        }
        mosquitto_message_callback_set(mosq) { _, obj, msg in
            let ctx = Unmanaged<Context>.fromOpaque(obj!).takeUnretainedValue()
            guard let m = msg?.pointee else { return }
            let topic = String(cString: m.topic)
            var oversized: UInt64 = 0
            var redelivered = false
            if m.qos < 2 {
                ctx.delivered += 1
                if let gate = ctx.gate {
                    if drowse_mqtt_gate_take_oversized(gate, ctx.delivered, &oversized) == 0 { oversized = 0 }
                    let dup = drowse_mqtt_gate_dup(gate, ctx.delivered)
                    redelivered = dup != 0
                }
            }
            let receipt: MQTTReceipt
            if m.qos > 0 {
                let connection = ctx.session.receipts.withLock { r -> Int in r.unsettled += 1; return r.connection }
                receipt = MQTTReceipt(ctx.session, connection: connection, redelivered: redelivered)
            } else {
                receipt = MQTTReceipt(nil, connection: 0)
            }
            if oversized > 0 {
                ctx.session.onEvent(.oversized(topic: topic, bytes: Int(clamping: oversized), receipt: receipt))
                return
            }
            let payload = m.payloadlen > 0 ? Array(UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen))) : []
            ctx.session.onEvent(.message(topic: topic, payload: payload, receipt: receipt))
        }
        return mosq
    }

    /// Options, will, credentials and TLS; false (logged) when one that matters failed.
    private func configure(_ mosq: OpaquePointer) -> Bool {
        // The protocol version is set before each connect (`Driver.setProtocol`). Without
        // Nagle only small packets wait: log and go on.
        logger.mosquitto(cmosq_int_option(mosq, MOSQ_OPT_TCP_NODELAY, 1), "mosquitto_int_option(TCP_NODELAY)", level: .warning)
        // Queue outgoing packets instead of writing them from inside libmosquitto: see the type's
        // doc. Without it a PUBACK could leave before its message is recorded.
        guard logger.mosquitto(mosquitto_threaded_set(mosq, true), "mosquitto_threaded_set", level: .error, "MQTT is off") else { return false }
        if let will = options.will {
            // Without the will an unclean drop leaves "online" retained; a clean stop still says offline.
            let rc = will.payload.withUnsafeBytes { mosquitto_will_set(mosq, will.topic, Int32($0.count), $0.baseAddress, 1, true) }
            logger.mosquitto(rc, "mosquitto_will_set", level: .warning, "no offline status on an unclean drop")
        }
        if let u = options.username {
            // Connecting without the credentials would only be refused, again and again.
            guard logger.mosquitto(mosquitto_username_pw_set(mosq, u, options.password), "mosquitto_username_pw_set", level: .error, "MQTT is off") else { return false }
        }
        if options.tls {
            // Never fall back to plain text: the password and the notifications would travel in clear.
            let rc = mosquitto_tls_set(mosq, options.caFile, options.caFile == nil ? "/etc/ssl/certs" : nil, options.certFile, options.keyFile, nil)
            guard logger.mosquitto(rc, "mosquitto_tls_set", level: .error, "TLS setup failed; MQTT is off") else { return false }
        }
        return true
    }

    /// The session could not be set up: answer `stop` and nothing else.
    private func waitForStop() {
        while true {
            var fd = [pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0)]
            do { try Sys.poll(&fd, timeoutMs: -1) } catch { logger.error("mqtt: \(error)") }
            wake.drain()
            let pending = commands.withLock { q -> [Command] in defer { q.removeAll() }; return q }
            for case .stop(let done) in pending {
                done()
                return
            }
        }
    }
}
