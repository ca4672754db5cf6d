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
package enum MQTTRetainedReader {
    final class State {
        var connected = false
        var connackError: Int32?
        var subscribedAt: Double?
        var lastMessageAt: Double?
        var messages: [(topic: String, payload: [UInt8])] = []
    }

    package static func collect(
        host: String, port: Int, tls: Bool, caFile: String?, certFile: String?, keyFile: String?,
        username: String?, password: String?, filter: String, quiet: Double = 0.5, timeout: Double = 10
    ) throws(MQTTPublisher.Failure) -> [(topic: String, payload: [UInt8])] {
        typealias Failure = MQTTPublisher.Failure
        let state = State()
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
            // Only what the broker kept: a live status published meanwhile is as good, but the
            // listing is of retained statuses.
            guard m.retain else { return }
            let payload = m.payloadlen > 0 ? Array(UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen))) : []
            s.messages.append((String(cString: m.topic), payload))
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
        while true {
            let t = WallClock.monotonic()
            guard t < end else {
                if state.subscribedAt == nil { throw Failure(description: "timed out waiting for the broker's SUBACK") }
                break
            }
            if let since = state.subscribedAt, t >= max(since, state.lastMessageAt ?? since) + quiet { break }
            if let e = MosquittoError(rc: mosquitto_loop(mosq, 50, 1), call: "mosquitto_loop") { throw Failure(description: e.detail) }
        }
        // Done reading; a failed goodbye loses nothing: the messages are in.
        if MosquittoError.tolerated(mosquitto_disconnect(mosq), "mosquitto_disconnect") {
            MosquittoError.tolerated(mosquitto_loop(mosq, 50, 1), "mosquitto_loop")
        }
        return state.messages
    }
}
