#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import DrowseCore
import DrowseSystem
import Logging
import Synchronization

/// Settings for the device's one persistent MQTT session.
public struct MQTTSessionOptions: Sendable {
    public var host: String
    public var port: Int
    public var clientID: String
    public var keepalive: Int
    public var tls: Bool
    public var username: String?
    public var password: String?
    public var caFile: String?
    public var certFile: String?
    public var keyFile: String?
    public var will: (topic: String, payload: [UInt8])?

    public init(host: String, port: Int, clientID: String, keepalive: Int, tls: Bool = false, username: String? = nil,
                password: String? = nil, caFile: String? = nil, certFile: String? = nil, keyFile: String? = nil,
                will: (topic: String, payload: [UInt8])? = nil) {
        self.host = host
        self.port = port
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

/// What the session tells its owner. Called on the session's thread.
public enum MQTTSessionEvent: Sendable {
    case connected
    case disconnected(reason: String)
    /// A PUBLISH arrived. Its PUBACK is held until `receipt` is settled: settle it once the
    /// message is recorded (or refused), so the broker never counts as delivered what a crash
    /// could still lose.
    case message(topic: String, payload: [UInt8], receipt: MQTTReceipt)
}

/// The owner's answer for one received message. `acknowledge()` lets its PUBACK (and everything
/// queued after it) go; `reject()` drops the connection without sending it, so the broker keeps
/// the message and delivers it again after the reconnect. A receipt dropped unsettled rejects:
/// nothing is acknowledged that nobody recorded. A receipt belongs to the connection its message
/// came on; once that connection is gone, settling it changes nothing (the reconnect discarded
/// its PUBACK, and the broker delivers the message again).
public final class MQTTReceipt: Sendable {
    private let settled = Atomic<Bool>(false)
    private let session: MQTTSession?
    private let connection: Int

    /// `session` nil: nothing to settle (a QoS 0 message has no PUBACK).
    init(_ session: MQTTSession?, connection: Int) {
        self.session = session
        self.connection = connection
    }

    public func acknowledge() { settle(ack: true) }
    public func reject() { settle(ack: false) }

    private func settle(ack: Bool) {
        guard !settled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        session?.settled(ack: ack, connection: connection)
    }

    deinit { settle(ack: false) }
}

/// One persistent MQTT session (clean session off, fixed client id) driven by our own loop:
/// a thread blocked in poll(2) on `mosquitto_socket()` and an eventfd, calling
/// `mosquitto_loop_read/write` when the socket is ready and `loop_misc` only at the keepalive
/// deadline. libmosquitto's own threaded or blocking loops are not used: they wake every second.
///
/// Acknowledge after record: libmosquitto queues a QoS 1 PUBACK *before* it calls the message
/// callback, and in its default mode writes it at once. The session runs libmosquitto in
/// "external thread" mode instead (`mosquitto_threaded_set`), where queued packets leave only
/// when our loop calls `mosquitto_loop_write`; the loop writes nothing while any received
/// message's `MQTTReceipt` is unsettled. A crash before the record therefore leaves the message
/// unacknowledged and the broker delivers it again (the persistent session).
public final class MQTTSession: Sendable {
    enum Command: Sendable {
        case subscribe([String])
        case rideWindow
        case publish(topic: String, payload: [UInt8], retain: Bool)
        case stop(@Sendable () -> Void)
    }

    private let options: MQTTSessionOptions
    private let logger: Logger
    private let onEvent: @Sendable (MQTTSessionEvent) -> Void
    private let commands = Mutex<[Command]>([])
    private let wake = EventFD()
    /// Topics to (re)subscribe on every connect, and the retained status to publish.
    private let desired = Mutex<(topics: [String], onConnect: [(String, [UInt8])])>(([], []))
    private let isConnected = Atomic<Bool>(false)
    /// The receipts of the current connection: while any is unsettled nothing is written; a
    /// rejection drops the connection without writing. `connection` counts connections.
    private let receipts = Mutex<ReceiptState>(ReceiptState())

    struct ReceiptState {
        var connection = 0
        var unsettled = 0
        var rejected = false
        /// A receipt of this connection was acknowledged (records work again).
        var acknowledged = false
    }

    public var connected: Bool { isConnected.load(ordering: .relaxed) }

    public init(options: MQTTSessionOptions, logger: Logger, onEvent: @escaping @Sendable (MQTTSessionEvent) -> Void) {
        self.options = options
        self.logger = logger
        self.onEvent = onEvent
    }

    public func start() {
        let me = Unmanaged.passRetained(self)
        OSThread.detach(name: "mqtt") {
            me.takeUnretainedValue().run()
            me.release()
        }
    }

    /// Sets the topics subscribed (QoS 1) now and after every reconnect.
    public func setSubscriptions(_ topics: [String]) {
        desired.withLock { $0.topics = topics }
        send(.subscribe(topics))
    }

    /// Retained messages to publish after every (re)connect, e.g. the device status.
    public func setPublishOnConnect(_ messages: [(String, [UInt8])]) {
        desired.withLock { $0.onConnect = messages }
    }

    /// The radio is awake for a wake window: if the keepalive would need a ping in the second
    /// half of its period, send traffic now instead, so the broker's timer restarts and no
    /// separate wakeup is needed for it later.
    public func rideWindow() { send(.rideWindow) }

    public func publish(topic: String, payload: [UInt8], retain: Bool) {
        send(.publish(topic: topic, payload: payload, retain: retain))
    }

    /// Disconnects cleanly (the broker keeps the session) and ends the thread.
    public func stop() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in send(.stop({ c.resume() })) }
    }

    fileprivate func settled(ack: Bool, connection: Int) {
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

    final class Context {
        unowned let session: MQTTSession
        var connectedFlag = false
        var lostReason: String?
        init(_ s: MQTTSession) { session = s }
    }

    private func run() {
        mosquitto_lib_init()
        let ctx = Context(self)
        let ctxPtr = Unmanaged.passUnretained(ctx).toOpaque()
        guard let mosq = mosquitto_new(options.clientID, false, ctxPtr) else {
            logger.error("mqtt: mosquitto_new failed", metadata: ["errno": "\(errno)"])
            return
        }
        defer { mosquitto_destroy(mosq) }
        _ = cmosq_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, Int32(MQTT_PROTOCOL_V311))
        _ = cmosq_int_option(mosq, MOSQ_OPT_TCP_NODELAY, 1)
        // Queue outgoing packets instead of writing them from inside libmosquitto: see the type's doc.
        mosquitto_threaded_set(mosq, true)
        if let will = options.will {
            _ = will.payload.withUnsafeBytes { mosquitto_will_set(mosq, will.topic, Int32($0.count), $0.baseAddress, 1, true) }
        }
        if let u = options.username { mosquitto_username_pw_set(mosq, u, options.password) }
        if options.tls {
            let rc = mosquitto_tls_set(mosq, options.caFile, options.caFile == nil ? "/etc/ssl/certs" : nil, options.certFile, options.keyFile, nil)
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                logger.error("mqtt: TLS setup failed: \(String(cString: mosquitto_strerror(rc)))")
            }
        }
        mosquitto_connect_callback_set(mosq) { _, obj, rc in
            let ctx = Unmanaged<Context>.fromOpaque(obj!).takeUnretainedValue()
            if rc == 0 { ctx.connectedFlag = true } else { ctx.lostReason = String(cString: mosquitto_connack_string(rc)) }
        }
        mosquitto_disconnect_callback_set(mosq) { _, obj, rc in
            let ctx = Unmanaged<Context>.fromOpaque(obj!).takeUnretainedValue()
            ctx.connectedFlag = false
            ctx.lostReason = rc == 0 ? "disconnected" : String(cString: mosquitto_strerror(rc))
        }
        mosquitto_message_callback_set(mosq) { _, obj, msg in
            let ctx = Unmanaged<Context>.fromOpaque(obj!).takeUnretainedValue()
            guard let m = msg?.pointee else { return }
            let topic = String(cString: m.topic)
            let payload = m.payloadlen > 0 ? Array(UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen))) : []
            let receipt: MQTTReceipt
            if m.qos > 0 {
                let connection = ctx.session.receipts.withLock { r -> Int in r.unsettled += 1; return r.connection }
                receipt = MQTTReceipt(ctx.session, connection: connection)
            } else {
                receipt = MQTTReceipt(nil, connection: 0)
            }
            ctx.session.onEvent(.message(topic: topic, payload: payload, receipt: receipt))
        }

        var backoff = Backoff(base: 1, cap: 60)
        var socketUp = false
        var announced = false
        var nextAttempt = 0.0
        var lastIn = 0.0, lastOut = 0.0
        let keepalive = Double(options.keepalive)
        /// When we last sent PINGREQ, until an answer arrives: a dead link is declared half a
        /// keepalive later, so it is found within 1.5× keepalive of the last traffic.
        var pingSentAt: Double?
        /// TCP is up but no CONNACK yet (a hung broker accepts connections and says nothing).
        var connectingSince: Double?
        var stopDone: (@Sendable () -> Void)?
        /// The last connection was dropped because a message could not be recorded: the backoff
        /// keeps growing across reconnects until a record succeeds again (a full disk must not
        /// make the device reconnect every second).
        var lostToRejection = false

        /// Whether queued packets may leave: not while a received message is unsettled.
        func mayWrite() -> Bool {
            receipts.withLock { $0.unsettled == 0 && !$0.rejected }
        }

        /// Ends the connection: what is queued goes out if it may (a DISCONNECT, say), then the
        /// socket is shut down at once rather than at the next attempt. Receipts of this
        /// connection no longer count.
        func lose(_ why: String) {
            let fd = mosquitto_socket(mosq)
            if fd >= 0 {
                if mayWrite(), mosquitto_want_write(mosq) { _ = mosquitto_loop_write(mosq, 1) }
                _ = shutdown(fd, Int32(SHUT_RDWR))
            }
            receipts.withLock { $0 = ReceiptState(connection: $0.connection + 1) }
            // Writing to a dead socket above may have run the disconnect callback: that reason
            // belongs to this connection, not to the next one's CONNACK.
            ctx.lostReason = nil
            pingSentAt = nil
            if announced { onEvent(.disconnected(reason: why)) }
            if socketUp || announced { logger.warning("mqtt: connection lost: \(why)") }
            isConnected.store(false, ordering: .relaxed)
            socketUp = false
            announced = false
            ctx.connectedFlag = false
            let delay = backoff.next(unit: Double.random(in: 0..<1))
            nextAttempt = WallClock.monotonic() + delay
            logger.info("mqtt: reconnecting in \(Int(delay * 1000)) ms")
        }

        while stopDone == nil {
            let now = WallClock.monotonic()
            if !socketUp && now >= nextAttempt {
                let rc = announced ? mosquitto_reconnect(mosq) : mosquitto_connect(mosq, options.host, Int32(options.port), Int32(options.keepalive))
                if rc == MOSQ_ERR_SUCCESS.rawValue {
                    ctx.lostReason = nil
                    socketUp = true
                    lastIn = WallClock.monotonic()
                    lastOut = lastIn
                    connectingSince = lastIn
                } else {
                    let why = rc == MOSQ_ERR_ERRNO.rawValue ? String(cString: strerror(errno)) : String(cString: mosquitto_strerror(rc))
                    logger.warning("mqtt: cannot connect to \(options.host):\(options.port): \(why)")
                    lose(why)
                }
            }
            if socketUp, receipts.withLock({ $0.rejected }) {
                // Close without writing: the queued PUBACK dies with the socket, and
                // mosquitto_reconnect discards what is left of the queue.
                lostToRejection = true
                lose("a received message could not be recorded; the broker will deliver it again")
                continue
            }
            if lostToRejection, receipts.withLock({ $0.acknowledged }) {
                lostToRejection = false
                backoff.reset()
            }
            var fds = [pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0)]
            let sock = socketUp ? mosquitto_socket(mosq) : -1
            if sock >= 0 {
                var ev = Int16(POLLIN)
                if mayWrite(), mosquitto_want_write(mosq) { ev |= Int16(POLLOUT) }
                fds.append(pollfd(fd: sock, events: ev, revents: 0))
            }
            var deadline = socketUp ? min(lastIn, lastOut) + keepalive + 0.05 : nextAttempt
            if socketUp, let p = pingSentAt { deadline = min(deadline, p + keepalive / 2) }
            if socketUp, !announced, let c = connectingSince { deadline = min(deadline, c + min(30, keepalive)) }
            let timeoutMS = Int32(max(0, min(Double(Int32.max / 2), (deadline - WallClock.monotonic()) * 1000)).rounded(.up))
            let n = poll(&fds, nfds_t(fds.count), timeoutMS)
            if n < 0 && errno != EINTR { logger.error("mqtt: poll failed: \(errno)"); break }

            if fds[0].revents != 0 {
                wake.drain()
                let pending = commands.withLock { q -> [Command] in defer { q.removeAll() }; return q }
                for c in pending {
                    switch c {
                    case .rideWindow:
                        if announced, WallClock.monotonic() - min(lastIn, lastOut) > keepalive / 2 {
                            let onConnect = desired.withLock { $0.onConnect }
                            for (topic, payload) in onConnect {
                                _ = payload.withUnsafeBytes { mosquitto_publish(mosq, nil, topic, Int32($0.count), $0.baseAddress, 1, true) }
                            }
                            lastOut = WallClock.monotonic()
                        }
                    case .subscribe(let topics):
                        if announced { for t in topics { mosquitto_subscribe(mosq, nil, t, 1) }; lastOut = WallClock.monotonic() }
                    case .publish(let topic, let payload, let retain):
                        if socketUp {
                            _ = payload.withUnsafeBytes { mosquitto_publish(mosq, nil, topic, Int32($0.count), $0.baseAddress, 1, retain) }
                            lastOut = WallClock.monotonic()
                        }
                    case .stop(let done):
                        stopDone = done
                    }
                }
            }
            if socketUp, fds.count > 1 {
                let re = fds[1].revents
                if re & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                    let rc = mosquitto_loop_read(mosq, 1)
                    lastIn = WallClock.monotonic()
                    pingSentAt = nil
                    if rc != MOSQ_ERR_SUCCESS.rawValue { lose(ctx.lostReason ?? String(cString: mosquitto_strerror(rc))); continue }
                }
                if mayWrite(), mosquitto_want_write(mosq) || re & Int16(POLLOUT) != 0 {
                    let rc = mosquitto_loop_write(mosq, 1)
                    lastOut = WallClock.monotonic()
                    if rc != MOSQ_ERR_SUCCESS.rawValue { lose(String(cString: mosquitto_strerror(rc))); continue }
                }
            }
            if socketUp, !announced, let c = connectingSince, WallClock.monotonic() >= c + min(30, keepalive) {
                connectingSince = nil
                mosquitto_disconnect(mosq)
                lose("no CONNACK from the broker")
                continue
            }
            if socketUp, let p = pingSentAt, WallClock.monotonic() >= p + keepalive / 2 {
                pingSentAt = nil
                mosquitto_disconnect(mosq)
                lose("no answer to PINGREQ within half a keepalive: the link is dead")
                continue
            }
            if socketUp, WallClock.monotonic() >= min(lastIn, lastOut) + keepalive {
                let rc = mosquitto_loop_misc(mosq)
                // libmosquitto sent PINGREQ (or gave up on a dead link): it restarts its own clock now.
                if pingSentAt == nil { pingSentAt = WallClock.monotonic() }
                lastIn = WallClock.monotonic()
                lastOut = lastIn
                if rc != MOSQ_ERR_SUCCESS.rawValue || mosquitto_socket(mosq) < 0 {
                    lose(ctx.lostReason ?? "keepalive: no answer from the broker"); continue
                }
                if mayWrite(), mosquitto_want_write(mosq) { _ = mosquitto_loop_write(mosq, 1) }
            }
            if socketUp, ctx.connectedFlag, !announced {
                announced = true
                connectingSince = nil
                if !lostToRejection { backoff.reset() }
                isConnected.store(true, ordering: .relaxed)
                let (topics, onConnect) = desired.withLock { ($0.topics, $0.onConnect) }
                for t in topics { mosquitto_subscribe(mosq, nil, t, 1) }
                for (topic, payload) in onConnect {
                    _ = payload.withUnsafeBytes { mosquitto_publish(mosq, nil, topic, Int32($0.count), $0.baseAddress, 1, true) }
                }
                lastOut = WallClock.monotonic()
                logger.info("mqtt: connected to \(options.host):\(options.port) as \(options.clientID)")
                onEvent(.connected)
            }
            if socketUp, !ctx.connectedFlag, let why = ctx.lostReason, !announced {
                ctx.lostReason = nil
                mosquitto_disconnect(mosq)
                lose("broker refused: \(why)")
            }
        }
        // Give messages already handed over a moment to be recorded, so their PUBACKs can go;
        // past that, or after a rejection, close without writing (the broker redelivers).
        let settleBy = WallClock.monotonic() + 2
        while receipts.withLock({ $0.unsettled > 0 && !$0.rejected }), WallClock.monotonic() < settleBy {
            var fd = pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&fd, 1, 100)
            wake.drain()
        }
        if socketUp, mayWrite() {
            // Publish the offline status ourselves: a clean DISCONNECT suppresses the will.
            if let will = options.will {
                _ = will.payload.withUnsafeBytes { mosquitto_publish(mosq, nil, will.topic, Int32($0.count), $0.baseAddress, 1, true) }
                _ = mosquitto_loop_write(mosq, 1)
            }
            mosquitto_disconnect(mosq)
            _ = mosquitto_loop_write(mosq, 1)
        }
        isConnected.store(false, ordering: .relaxed)
        stopDone?()
    }
}
