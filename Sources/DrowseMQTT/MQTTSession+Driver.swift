#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import CMQTTGate
import DrowseCore
import DrowseSystem
import Logging
import Synchronization

extension MQTTSession {
    /// Runs on the session thread: feeds the machine what happened and carries out its actions.
    final class Driver {
        let session: MQTTSession
        let mosq: OpaquePointer
        let ctx: Context
        var machine: MQTTConnectionMachine
        var logger: Logger { session.logger }
        var options: MQTTSessionOptions { session.options }
        /// The machine's one timer (monotonic seconds).
        var timerAt: Double?
        /// The message a `.publish` action sends.
        var outgoing: (topic: String, payload: [UInt8], retain: Bool)?
        /// SUBSCRIBEs of this connection waiting for their SUBACK, by message id.
        var pendingSubacks: [Int32: String] = [:]
        /// The probe's TCP connection to the preferred broker while one runs (make before break).
        var probeFD: Int32 = -1
        /// Brokers (indexes) that refused MQTT 5: spoken to in 3.1.1 until the session restarts.
        var mqtt311Only: Set<Int> = []
        /// The connection under way speaks MQTT 5.
        var attemptV5 = false

        init(session: MQTTSession, mosq: OpaquePointer, ctx: Context) {
            self.session = session
            self.mosq = mosq
            self.ctx = ctx
            machine = MQTTConnectionMachine(
                keepalive: session.options.keepalive, maxKeepalive: session.options.maxKeepalive.map(Double.init),
                brokers: session.options.brokers.map { b in ("\(b.host):\(b.port)", MQTTConnectionMachine.isLoopback(host: b.host)) },
                seed: UInt64.random(in: 0...UInt64.max))
        }

        func now() -> Double { WallClock.monotonic() }

        /// Whether queued packets may leave: not while a received message is unsettled.
        func mayWrite() -> Bool {
            session.receipts.withLock { $0.unsettled == 0 && !$0.rejected }
        }

        func run() {
            perform(machine.networkChanged(online: session.online.load(ordering: .relaxed), now: now()))
            followPath()
            perform(machine.start(now: now()))
            var stopDone: (@Sendable () -> Void)?
            while stopDone == nil {
                if machine.online != session.online.load(ordering: .relaxed) {
                    perform(machine.networkChanged(online: session.online.load(ordering: .relaxed), now: now()))
                }
                followPath()
                if machine.isOpen, session.receipts.withLock({ $0.rejected }) {
                    perform(machine.messageRejected(now: now()))
                    continue
                }
                if machine.lostToRejection, session.receipts.withLock({ $0.acknowledged }) { machine.messageRecorded() }

                var fds = [pollfd(fd: session.wake.fd, events: Int16(POLLIN), revents: 0)]
                let sock = machine.isOpen ? mosquitto_socket(mosq) : -1
                if sock >= 0 {
                    var ev = Int16(POLLIN)
                    if mayWrite(), mosquitto_want_write(mosq) { ev |= Int16(POLLOUT) }
                    fds.append(pollfd(fd: sock, events: ev, revents: 0))
                }
                let probeAt = fds.count
                if probeFD >= 0 { fds.append(pollfd(fd: probeFD, events: Int16(POLLOUT), revents: 0)) }
                // What the gate already holds is read at once: the socket may have nothing more.
                let held = sock >= 0 && ctx.gate.map { drowse_mqtt_gate_ready($0) > 0 } == true
                let timeoutMS: Int32 = held ? 0 : timerAt.map { Int32(max(0, min(Double(Int32.max / 2), ($0 - now()) * 1000)).rounded(.up)) } ?? -1
                let n = poll(&fds, nfds_t(fds.count), timeoutMS)
                if n < 0 && errno != EINTR { let saved = errno; logger.error("mqtt: poll failed: \(String(cString: strerror(saved)))"); break }

                if fds[0].revents != 0 {
                    session.wake.drain()
                    let pending = session.commands.withLock { q -> [Command] in defer { q.removeAll() }; return q }
                    for c in pending {
                        switch c {
                        case .rideWindow:
                            perform(machine.windowOpened(now: now()))
                        case .subscribe:
                            perform(machine.subscriptionsChanged(now: now()))
                        case .publish(let topic, let payload, let retain):
                            outgoing = (topic, payload, retain)
                            perform(machine.publishRequested(now: now()))
                            outgoing = nil
                        case .stop(let done):
                            stopDone = done
                        }
                    }
                }
                if probeFD >= 0, fds.count > probeAt, fds[probeAt].revents != 0 { probeFinished() }
                if sock >= 0, fds.count > 1, machine.isOpen {
                    let re = fds[1].revents
                    if held || re & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                        let wasAwaitingConnack = machine.awaitingConnack
                        let rc = gatedRead(sock)
                        perform(machine.packetReceived(now: now()))
                        // A refused CONNACK also fails the read: the refusal says more.
                        if let connack = ctx.connack {
                            ctx.connack = nil
                            if attemptV5, connack == Int32(MQTT_RC_UNSUPPORTED_PROTOCOL_VERSION.rawValue) { fallBackTo311() }
                            if connack == 0, ctx.serverKeepalive > 0 {
                                if Double(ctx.serverKeepalive) < machine.configuredKeepalive {
                                    logger.info("mqtt: \(machine.peer) holds a connection without traffic for \(ctx.serverKeepalive) s only (its Server Keep Alive): pinging at that")
                                }
                                machine.serverKeepalive(Double(ctx.serverKeepalive))
                            }
                            perform(machine.connack(rc: Int(connack), reason: String(cString: mosquitto_connack_string(connack)), now: now()))
                        } else if wasAwaitingConnack, attemptV5,
                                  rc == Int32(MOSQ_ERR_CONN_LOST.rawValue) || rc == Int32(MOSQ_ERR_PROTOCOL.rawValue) {
                            // Closed with no CONNACK at all (how RabbitMQ 3.10 answers an MQTT 5
                            // CONNECT), or a CONNACK that is not MQTT 5's.
                            fallBackTo311()
                        }
                        let subacks = ctx.subacks
                        ctx.subacks = []
                        for ack in subacks { subackReceived(ack.mid, granted: ack.granted) }
                        if let e = MosquittoError(rc: rc, call: "mosquitto_loop_read") {
                            perform(machine.disconnected(reason: ctx.lostReason ?? e.detail, now: now()))
                            continue
                        }
                    }
                    if machine.isOpen, mayWrite(), mosquitto_want_write(mosq) || re & Int16(POLLOUT) != 0 {
                        if let e = MosquittoError(rc: mosquitto_loop_write(mosq, 1), call: "mosquitto_loop_write") {
                            perform(machine.disconnected(reason: ctx.lostReason ?? e.detail, now: now()))
                            continue
                        }
                        perform(machine.packetSent(now: now()))
                    }
                }
                if let t = timerAt, now() >= t { perform(machine.timerFired(now: now())) }
            }
            // Give messages already handed over a moment to be recorded, so their PUBACKs can go;
            // past that, or after a rejection, close without writing (the broker redelivers).
            let settle = MQTTStopSettle(stoppingAt: now())
            while session.receipts.withLock({ settle.keepWaiting(unsettled: $0.unsettled, rejected: $0.rejected, now: now()) }) {
                var fd = [pollfd(fd: session.wake.fd, events: Int16(POLLIN), revents: 0)]
                // A poll that fails cannot wait for the records: close now (the broker redelivers).
                guard (try? Sys.poll(&fd, timeoutMs: 100)) != nil else { break }
                session.wake.drain()
            }
            perform(machine.stop(mayWrite: mayWrite()))
            session.isConnected.store(false, ordering: .relaxed)
            stopDone?()
        }

        /// The board's network path as last told: the machine pings as that path was seen to hold.
        func followPath() {
            let (key, known) = session.path.withLock { p in (p.key, p.key.flatMap { p.learned[$0] }) }
            // Offline (no default route): the path pinged on is still the last one.
            guard let key, key != machine.pathKey else { return }
            let learned = known.map { KeepaliveLearner(base: machine.learner.base, ceiling: machine.learner.ceiling, held: $0.held, failed: $0.failed) }
            perform(machine.pathChanged(key: key, learned: learned, now: now()))
        }

        /// The broker in use does not speak MQTT 5: 3.1.1 from the next attempt on.
        func fallBackTo311() {
            guard mqtt311Only.insert(machine.brokerToConnect).inserted else { return }
            logger.info("mqtt: \(machine.peer) does not speak MQTT 5: using 3.1.1, where the inbound gate alone bounds what it sends")
        }

        /// Sets the version (and with MQTT 5 the CONNECT properties) of the next connection.
        func setProtocol(v5: Bool) -> MosquittoError? {
            let version = v5 ? Int32(MQTT_PROTOCOL_V5) : Int32(MQTT_PROTOCOL_V311)
            if let e = MosquittoError(rc: cmosq_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, version), call: "mosquitto_int_option(PROTOCOL_VERSION)") { return e }
            // MQTT 5's Maximum Packet Size counts the whole packet: type byte, length bytes, rest.
            let bound = options.maxPacket
            let total = v5 ? UInt32(clamping: 1 + (bound < 128 ? 1 : bound < 16_384 ? 2 : bound < 2_097_152 ? 3 : 4) + bound) : 0
            return MosquittoError(rc: cmosq_set_connect_properties(mosq, total, UInt32.max, connectKeepalive), call: "mosquitto_connect_bind_v5(properties)")
        }

        /// The keepalive asked for in CONNECT: the longest the machine may ping at.
        var connectKeepalive: Int32 { Int32(clamping: Int(machine.configuredKeepalive.rounded(.up))) }

        /// `mosquitto_loop_read` with the inbound gate between libmosquitto and the socket.
        func gatedRead(_ sock: Int32) -> Int32 {
            guard let gate = ctx.gate else { return mosquitto_loop_read(mosq, 1) }
            drowse_mqtt_gate_enter(gate, sock, options.tls ? 1 : 0)
            defer { drowse_mqtt_gate_leave() }
            return mosquitto_loop_read(mosq, 1)
        }

        /// Carries out `actions`; what an action's I/O reports back is fed to the machine and its
        /// actions run after the rest of the batch (so a later `setTimer` wins).
        func perform(_ actions: [MQTTConnectionMachine.Action]) {
            var batch = actions
            while !batch.isEmpty {
                var next: [MQTTConnectionMachine.Action] = []
                for a in batch { next += carryOut(a) }
                batch = next
            }
            let m = machine
            session.health.withLock { $0 = (m.confirmed, m.failedAttempts, m.lastLoss) }
            session.pinging.withLock { $0 = (m.pingInterval, m.pathKey) }
        }

        func carryOut(_ action: MQTTConnectionMachine.Action) -> [MQTTConnectionMachine.Action] {
            switch action {
            case .connect:
                ctx.connack = nil
                ctx.lostReason = nil
                ctx.delivered = 0
                ctx.serverKeepalive = -1
                let index = machine.brokerToConnect
                attemptV5 = options.protocolChoice == .mqtt5WithFallback && !mqtt311Only.contains(index)
                if let e = setProtocol(v5: attemptV5) {
                    return machine.connectFailed(reason: e.detail, now: now())
                }
                if let gate = ctx.gate {
                    drowse_mqtt_gate_reset(gate)
                    drowse_mqtt_gate_set_v5(gate, attemptV5 ? 1 : 0)
                }
                session.protocolInUse.store(attemptV5 ? 5 : 4, ordering: .relaxed)
                let broker = options.brokers[index]
                session.brokerInUse.store(index, ordering: .relaxed)
                // Non-blocking: the TCP connect completes (or fails) in this loop's poll, and the
                // CONNECT goes out when the socket is writable, so a broker address that drops
                // packets cannot hold the thread (and a stop) for the kernel's SYN retries; the
                // machine's CONNACK timeout ends such an attempt. (The name lookup still blocks.)
                let rc = mosquitto_connect_async(mosq, broker.host, Int32(broker.port), connectKeepalive)
                if let e = MosquittoError(rc: rc, call: "mosquitto_connect_async") {
                    return machine.connectFailed(reason: e.detail, now: now())
                }
                return machine.connectIssued(now: now())
            case .close(let sendDisconnect):
                close(sendDisconnect: sendDisconnect)
            case .sendPing where machine.pingInterval < machine.keepalive - 0.5:
                // Sooner than the keepalive asked for in CONNECT, so libmosquitto would not send
                // PINGREQ: an UNSUBSCRIBE of a topic never subscribed is answered (UNSUBACK) the same.
                let rc = mosquitto_unsubscribe(mosq, nil, options.pingTopic)
                if let e = MosquittoError(rc: rc, call: "mosquitto_unsubscribe(ping)") {
                    return machine.disconnected(reason: ctx.lostReason ?? "keepalive: \(e.detail)", now: now())
                }
                session.onEvent(.pingSent)
                if mayWrite(), mosquitto_want_write(mosq) {
                    if let e = MosquittoError(rc: mosquitto_loop_write(mosq, 1), call: "mosquitto_loop_write") {
                        return machine.disconnected(reason: ctx.lostReason ?? e.detail, now: now())
                    }
                }
            case .sendPing:
                // libmosquitto sends PINGREQ (or gives up on a dead link) and restarts its own clock.
                let rc = mosquitto_loop_misc(mosq)
                if let e = MosquittoError(rc: rc, call: "mosquitto_loop_misc") {
                    return machine.disconnected(reason: ctx.lostReason ?? "keepalive: \(e.detail)", now: now())
                }
                if mosquitto_socket(mosq) < 0 {
                    return machine.disconnected(reason: ctx.lostReason ?? "keepalive: no answer from the broker", now: now())
                }
                session.onEvent(.pingSent)
                if mayWrite(), mosquitto_want_write(mosq) {
                    if let e = MosquittoError(rc: mosquitto_loop_write(mosq, 1), call: "mosquitto_loop_write") {
                        return machine.disconnected(reason: ctx.lostReason ?? e.detail, now: now())
                    }
                }
            case .subscribe:
                // A failed subscribe on a live connection is logged; a dead one is found by the loop.
                let (topics, dropped) = session.desired.withLock { ($0.topics, $0.dropped) }
                // Kept for the next connect unless the request went out.
                let unsubscribed = dropped.filter { mosquitto_unsubscribe(mosq, nil, $0) == MOSQ_ERR_SUCCESS.rawValue }
                session.desired.withLock { $0.dropped.removeAll { unsubscribed.contains($0) } }
                for t in topics {
                    var mid: Int32 = 0
                    if logger.mosquitto(mosquitto_subscribe(mosq, &mid, t, 1), "mosquitto_subscribe", level: .warning, t) {
                        pendingSubacks[mid] = t
                    }
                }
                // Nothing to wait for: the session is up.
                if pendingSubacks.isEmpty { return machine.subscriptionsConfirmed(now: now()) }
            case .publishStatus:
                for (topic, payload) in session.desired.withLock({ $0.onConnect }) {
                    publish(topic: topic, payload: payload, retain: true)
                }
            case .publish:
                if let m = outgoing { publish(topic: m.topic, payload: m.payload, retain: m.retain) }
            case .publishOffline:
                if let will = options.will {
                    publish(topic: will.topic, payload: will.payload, retain: true)
                    logger.mosquitto(mosquitto_loop_write(mosq, 1), "mosquitto_loop_write", level: .debug, "offline status at stop")
                }
            case .probePreferred:
                return startProbe()
            case .endProbe:
                endProbe()
            case .setTimer(let at, _):
                timerAt = at
            case .cancelTimer:
                timerAt = nil
            case .keepaliveLearned:
                if let key = machine.pathKey {
                    let learned = LearnedPath(held: machine.learner.held, failed: machine.learner.failed)
                    session.path.withLock { $0.learned[key] = learned }
                    session.onEvent(.keepaliveLearned(network: key, learned))
                }
            case .report(.connected):
                session.isConnected.store(true, ordering: .relaxed)
                session.onEvent(.connected)
            case .report(.disconnected(let reason)):
                session.isConnected.store(false, ordering: .relaxed)
                session.onEvent(.disconnected(reason: reason))
            case .log(let level, let text):
                logger.log(level: level == .warning ? .warning : .info, "mqtt: \(text)")
            case .finish:
                break  // The thread ends once stop's actions are carried out.
            }
            return []
        }

        /// A non-blocking TCP connect to the preferred broker beside the session; what it gives is
        /// fed to the machine when the socket is writable (or at once, if it fails at once).
        func startProbe() -> [MQTTConnectionMachine.Action] {
            endProbe()
            let broker = options.brokers[0]
            var hints = addrinfo()
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            var res: UnsafeMutablePointer<addrinfo>?
            let gai = getaddrinfo(broker.host, String(broker.port), &hints, &res)
            guard gai == 0, let ai = res else {
                return machine.probeFailed(reason: String(cString: gai_strerror(gai)), now: now())
            }
            defer { freeaddrinfo(res) }
            let fd = socket(ai.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { return machine.probeFailed(reason: String(cString: strerror(errno)), now: now()) }
            if connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) != 0, errno != EINPROGRESS {
                let why = String(cString: strerror(errno))
                Sys.close(fd, ignoringErrors: .nothingToFlush)
                return machine.probeFailed(reason: why, now: now())
            }
            probeFD = fd
            return []
        }

        /// The probe's socket became writable (connected) or failed.
        func probeFinished() {
            var err: Int32 = 0
            var len = socklen_t(MemoryLayout<Int32>.size)
            let got = getsockopt(probeFD, SOL_SOCKET, SO_ERROR, &err, &len)
            endProbe()
            if got == 0, err == 0 {
                perform(machine.probeAnswered(now: now()))
            } else {
                perform(machine.probeFailed(reason: String(cString: strerror(got == 0 ? err : errno)), now: now()))
            }
        }

        func endProbe() {
            guard probeFD >= 0 else { return }
            Sys.close(probeFD, ignoringErrors: .nothingToFlush)
            probeFD = -1
        }

        /// A SUBACK: a refused topic (0x80) fails the session; the last one granted makes it up.
        func subackReceived(_ mid: Int32, granted: [Int32]) {
            guard let topic = pendingSubacks.removeValue(forKey: mid) else { return }
            if granted.contains(where: { $0 == 0x80 || $0 < 0 || $0 > 2 }) {
                pendingSubacks = [:]
                perform(machine.subscriptionRefused(topic: topic, now: now()))
            } else if pendingSubacks.isEmpty {
                perform(machine.subscriptionsConfirmed(now: now()))
            }
        }

        func publish(topic: String, payload: [UInt8], retain: Bool) {
            let rc = payload.withUnsafeBytes { mosquitto_publish(mosq, nil, topic, Int32($0.count), $0.baseAddress, 1, retain) }
            logger.mosquitto(rc, "mosquitto_publish", level: .warning, topic)
        }

        /// Ends the connection: what is queued goes out if it may (a DISCONNECT, say), then the
        /// socket is shut down at once rather than at the next attempt. Receipts of this
        /// connection no longer count.
        func close(sendDisconnect: Bool) {
            if sendDisconnect {
                // Not connected any more is fine here: the socket closes either way.
                logger.mosquitto(mosquitto_disconnect(mosq), "mosquitto_disconnect", level: .debug)
            }
            let fd = mosquitto_socket(mosq)
            if fd >= 0 {
                if mayWrite(), mosquitto_want_write(mosq) {
                    logger.mosquitto(mosquitto_loop_write(mosq, 1), "mosquitto_loop_write", level: .debug, "while closing")
                }
                // ENOTCONN when the broker closed first: the socket is closing either way.
                if let e = Sys.noted("shutdown", { Int(shutdown(fd, Int32(SHUT_RDWR))) }) { logger.debug("mqtt: \(e)") }
            }
            session.receipts.withLock { $0 = ReceiptState(connection: $0.connection + 1) }
            pendingSubacks = [:]
            // Writing to a dead socket above may have run the disconnect callback: that reason
            // belongs to this connection, not to the next one's CONNACK.
            ctx.lostReason = nil
            ctx.connack = nil
            session.isConnected.store(false, ordering: .relaxed)
        }
    }
}
