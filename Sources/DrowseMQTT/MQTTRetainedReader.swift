#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import DrowseCore
import DrowseSystem

/// `drowse fleet`'s side: connect (clean session), subscribe to a filter, and collect the retained
/// messages the broker sends for it. The broker sends them right after the SUBACK, back to back,
/// so the reader stops once `quiet` seconds pass without one (counted from the SUBACK), or at
/// `timeout` at the latest.
///
/// With `rollCall`, it also publishes a message there after the SUBACK (QoS 1) and keeps the
/// messages published live meanwhile (the devices' answers), counting `quiet` from the PUBACK:
/// a broker that does not hand out retained messages to a wildcard (RabbitMQ, docs/brokers.md)
/// still gets every online device's status.
///
/// With `session`, the client connects to its persistent session instead: the broker has kept
/// every message published to the filter since the session's last connection (a device's will
/// included) and hands them over, in order, after the SUBACK. The reader then publishes a mark
/// to the session's own mark topic; the mark comes back after everything queued before it, so
/// the reader knows it has the backlog without guessing a quiet time.
package enum MQTTRetainedReader {
    package struct Message: Sendable {
        package var topic: String
        package var payload: [UInt8]
        /// A copy the broker kept (false: published while the reader was subscribed, or queued
        /// in its session meanwhile).
        package var retained: Bool
    }

    /// A listing's persistent session (`drowse fleet --session`).
    package struct Session: Sendable {
        package var clientID: String
        /// A topic of the session's own: subscribed besides the filter, matched by nothing else.
        package var markTopic: String

        package init(clientID: String, markTopic: String) {
            self.clientID = clientID
            self.markTopic = markTopic
        }
    }

    package struct Collected: Sendable {
        package var messages: [Message]
        /// False when `timeout` came before a session's mark: the backlog may not all be in.
        package var complete: Bool
    }

    final class State: MQTTPublisher.Connecting {
        var connected = false
        var connackError: Int32?
        var subacks = 0
        var subscribedAt: Double?
        var lastMessageAt: Double?
        var keepLive = false
        var rollCallMid: Int32 = -1
        var rollCallAcked: Double?
        var markTopic: String?
        var mark: [UInt8] = []
        var markSeen: Double?
        var messages: [Message] = []
    }

    package static func collect(
        host: String, port: Int, tls: Bool, caFile: String?, certFile: String?, keyFile: String?,
        username: String?, password: String?, filter: String, rollCall: String? = nil, session: Session? = nil,
        quiet: Double = 0.5, timeout: Double = 10
    ) throws(MQTTPublisher.Failure) -> Collected {
        typealias Failure = MQTTPublisher.Failure
        let state = State()
        state.keepLive = rollCall != nil || session != nil
        state.markTopic = session?.markTopic
        state.mark = Array("mark \(UInt64.random(in: 0 ... .max))".utf8)
        let mosq = try MQTTPublisher.makeClient(context: Unmanaged.passUnretained(state).toOpaque(), tls: tls, caFile: caFile, certFile: certFile,
                                                keyFile: keyFile, username: username, password: password,
                                                clientID: session?.clientID, cleanSession: session == nil)
        defer { mosquitto_destroy(mosq) }
        mosquitto_connect_callback_set(mosq) { _, obj, rc in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            if rc == 0 { s.connected = true } else { s.connackError = rc }
        }
        mosquitto_subscribe_callback_set(mosq) { _, obj, _, _, _ in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            s.subacks += 1
            if s.subacks == (s.markTopic == nil ? 1 : 2) { s.subscribedAt = WallClock.monotonic() }
        }
        mosquitto_message_callback_set(mosq) { _, obj, msg in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            guard let m = msg?.pointee else { return }
            let payload = m.payloadlen > 0 ? Array(UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen))) : []
            let topic = String(cString: m.topic)
            if topic == s.markTopic {
                // An older listing's mark (one that stopped early) is only passed over.
                if payload == s.mark { s.markSeen = WallClock.monotonic() }
                return
            }
            s.lastMessageAt = WallClock.monotonic()
            // Without a roll call only what the broker kept: a live status published meanwhile
            // is as good, but the listing is of retained statuses.
            guard m.retain || s.keepLive else { return }
            s.messages.append(Message(topic: topic, payload: payload, retained: m.retain))
        }
        mosquitto_publish_callback_set(mosq) { _, obj, mid in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            if mid == s.rollCallMid { s.rollCallAcked = WallClock.monotonic() }
        }
        let end = WallClock.monotonic() + timeout
        try MQTTPublisher.connect(mosq, state, host: host, port: port, until: end)
        if let e = MosquittoError(rc: mosquitto_subscribe(mosq, nil, filter, 1), call: "mosquitto_subscribe") {
            throw Failure(description: "subscribe: \(e.detail)")
        }
        if let session, let e = MosquittoError(rc: mosquitto_subscribe(mosq, nil, session.markTopic, 1), call: "mosquitto_subscribe") {
            throw Failure(description: "subscribe: \(e.detail)")
        }
        var published = false
        var complete = true
        while true {
            let t = WallClock.monotonic()
            guard t < end else {
                if state.subscribedAt == nil { throw Failure(description: "timed out waiting for the broker's SUBACK") }
                complete = session == nil || state.markSeen != nil
                break
            }
            if state.subscribedAt != nil, !published {
                published = true
                var mid: Int32 = 0
                if let topic = rollCall {
                    if let e = MosquittoError(rc: mosquitto_publish(mosq, &mid, topic, 0, nil, 1, false), call: "mosquitto_publish") {
                        throw Failure(description: "roll call: \(e.detail)")
                    }
                    state.rollCallMid = mid
                }
                if let session {
                    let rc = state.mark.withUnsafeBytes { mosquitto_publish(mosq, nil, session.markTopic, Int32($0.count), $0.baseAddress, 1, false) }
                    if let e = MosquittoError(rc: rc, call: "mosquitto_publish") { throw Failure(description: "session mark: \(e.detail)") }
                }
            }
            if done(state, rollCall: rollCall != nil, session: session != nil, quiet: quiet, now: t) { break }
            if let e = MosquittoError(rc: mosquitto_loop(mosq, 50, 1), call: "mosquitto_loop") { throw Failure(description: e.detail) }
        }
        // Done reading; a failed goodbye loses nothing: the messages are in.
        if MosquittoError.tolerated(mosquitto_disconnect(mosq), "mosquitto_disconnect") {
            MosquittoError.tolerated(mosquitto_loop(mosq, 50, 1), "mosquitto_loop")
        }
        return Collected(messages: state.messages, complete: complete)
    }

    /// Whether the reading is over: a session's backlog is in once its mark came back; retained
    /// copies once `quiet` passed after the SUBACK without one; a roll call's answers once `quiet`
    /// passed after its PUBACK without one.
    private static func done(_ s: State, rollCall: Bool, session: Bool, quiet: Double, now t: Double) -> Bool {
        guard let subscribed = s.subscribedAt else { return false }
        if session && s.markSeen == nil { return false }
        if session && !rollCall { return true }
        guard let since = rollCall ? s.rollCallAcked : subscribed else { return false }
        return t >= max(since, s.lastMessageAt ?? since) + quiet
    }

    /// Ends the persistent session of `clientID`: a clean connection under its id, which makes
    /// the broker drop what it kept for it (the queue, on RabbitMQ).
    package static func endSession(
        host: String, port: Int, tls: Bool, caFile: String?, certFile: String?, keyFile: String?,
        username: String?, password: String?, clientID: String, timeout: Double = 10
    ) throws(MQTTPublisher.Failure) {
        typealias Failure = MQTTPublisher.Failure
        let state = State()
        let mosq = try MQTTPublisher.makeClient(context: Unmanaged.passUnretained(state).toOpaque(), tls: tls, caFile: caFile, certFile: certFile,
                                                keyFile: keyFile, username: username, password: password,
                                                clientID: clientID, cleanSession: true)
        defer { mosquitto_destroy(mosq) }
        mosquitto_connect_callback_set(mosq) { _, obj, rc in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            if rc == 0 { s.connected = true } else { s.connackError = rc }
        }
        try MQTTPublisher.connect(mosq, state, host: host, port: port, until: WallClock.monotonic() + timeout)
        if MosquittoError.tolerated(mosquitto_disconnect(mosq), "mosquitto_disconnect") {
            MosquittoError.tolerated(mosquitto_loop(mosq, 50, 1), "mosquitto_loop")
        }
    }
}
