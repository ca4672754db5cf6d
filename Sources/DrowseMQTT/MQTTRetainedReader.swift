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
package enum MQTTRetainedReader {
    package struct Message: Sendable {
        package var topic: String
        package var payload: [UInt8]
        /// A copy the broker kept (false: published while the reader was subscribed).
        package var retained: Bool
    }

    final class State {
        var connected = false
        var connackError: Int32?
        var subscribedAt: Double?
        var lastMessageAt: Double?
        var keepLive = false
        var rollCallAcked: Double?
        var messages: [Message] = []
    }

    package static func collect(
        host: String, port: Int, tls: Bool, caFile: String?, certFile: String?, keyFile: String?,
        username: String?, password: String?, filter: String, rollCall: String? = nil, quiet: Double = 0.5, timeout: Double = 10
    ) throws(MQTTPublisher.Failure) -> [Message] {
        typealias Failure = MQTTPublisher.Failure
        let state = State()
        state.keepLive = rollCall != nil
        let mosq = try MQTTPublisher.makeClient(context: Unmanaged.passUnretained(state).toOpaque(), tls: tls, caFile: caFile, certFile: certFile,
                                                keyFile: keyFile, username: username, password: password)
        defer { mosquitto_destroy(mosq) }
        mosquitto_connect_callback_set(mosq) { _, obj, rc in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            if rc == 0 { s.connected = true } else { s.connackError = rc }
        }
        mosquitto_subscribe_callback_set(mosq) { _, obj, _, _, _ in
            Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue().subscribedAt = WallClock.monotonic()
        }
        mosquitto_message_callback_set(mosq) { _, obj, msg in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            guard let m = msg?.pointee else { return }
            s.lastMessageAt = WallClock.monotonic()
            // Without a roll call only what the broker kept: a live status published meanwhile
            // is as good, but the listing is of retained statuses.
            guard m.retain || s.keepLive else { return }
            let payload = m.payloadlen > 0 ? Array(UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen))) : []
            s.messages.append(Message(topic: String(cString: m.topic), payload: payload, retained: m.retain))
        }
        mosquitto_publish_callback_set(mosq) { _, obj, _ in
            Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue().rollCallAcked = WallClock.monotonic()
        }
        if let e = MosquittoError(rc: mosquitto_connect(mosq, host, Int32(port), 30), call: "mosquitto_connect") {
            throw Failure(description: "cannot connect to \(host):\(port): \(e.detail)")
        }
        let end = WallClock.monotonic() + timeout
        while !state.connected {
            if let e = state.connackError { throw Failure(description: "broker refused: \(String(cString: mosquitto_connack_string(e)))") }
            guard WallClock.monotonic() < end else { throw Failure(description: "timed out waiting for the broker") }
            if let e = MosquittoError(rc: mosquitto_loop(mosq, 100, 1), call: "mosquitto_loop") {
                if let c = state.connackError { throw Failure(description: "broker refused: \(String(cString: mosquitto_connack_string(c)))") }
                throw Failure(description: e.detail)
            }
        }
        if let e = MosquittoError(rc: mosquitto_subscribe(mosq, nil, filter, 1), call: "mosquitto_subscribe") {
            throw Failure(description: "subscribe: \(e.detail)")
        }
        var calling = rollCall
        while true {
            let t = WallClock.monotonic()
            guard t < end else {
                if state.subscribedAt == nil { throw Failure(description: "timed out waiting for the broker's SUBACK") }
                break
            }
            if state.subscribedAt != nil, let topic = calling {
                calling = nil
                if let e = MosquittoError(rc: mosquitto_publish(mosq, nil, topic, 0, nil, 1, false), call: "mosquitto_publish") {
                    throw Failure(description: "roll call: \(e.detail)")
                }
            }
            let start = rollCall == nil ? state.subscribedAt : state.rollCallAcked
            if let since = start, t >= max(since, state.lastMessageAt ?? since) + quiet { break }
            if let e = MosquittoError(rc: mosquitto_loop(mosq, 50, 1), call: "mosquitto_loop") { throw Failure(description: e.detail) }
        }
        // Done reading; a failed goodbye loses nothing: the messages are in.
        if MosquittoError.tolerated(mosquitto_disconnect(mosq), "mosquitto_disconnect") {
            MosquittoError.tolerated(mosquitto_loop(mosq, 50, 1), "mosquitto_loop")
        }
        return state.messages
    }
}
