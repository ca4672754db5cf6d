#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import DrowseCore
import DrowseSystem

/// The provider side (`drowse push`): connect, publish QoS 1 messages, wait for their PUBACKs.
package enum MQTTPublisher {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// What a one-shot client's connect callback records (each client's own state class).
    protocol Connecting: AnyObject {
        var connected: Bool { get }
        var connackError: Int32? { get }
    }

    final class State: Connecting {
        var connected = false
        var connackError: Int32?
        var published = 0
    }

    /// Connects and runs the loop until the CONNACK (or `end`); a refusal says the broker's reason.
    static func connect(_ mosq: OpaquePointer, _ state: some Connecting, host: String, port: Int, until end: Double) throws(Failure) {
        if let e = MosquittoError(rc: mosquitto_connect(mosq, host, Int32(port), 30), call: "mosquitto_connect") {
            throw Failure(description: "cannot connect to \(host):\(port): \(e.detail)")
        }
        while !state.connected {
            if let e = state.connackError { throw Failure(description: "broker refused: \(String(cString: mosquitto_connack_string(e)))") }
            guard WallClock.monotonic() < end else { throw Failure(description: "timed out waiting for the broker") }
            if let e = MosquittoError(rc: mosquitto_loop(mosq, 100, 1), call: "mosquitto_loop") {
                // A refused CONNACK also fails the loop: the refusal says more.
                if let c = state.connackError { throw Failure(description: "broker refused: \(String(cString: mosquitto_connack_string(c)))") }
                throw Failure(description: e.detail)
            }
        }
    }

    /// A one-shot client (`drowse push`, `drowse fleet`): libmosquitto initialised, a clean
    /// session speaking MQTT 3.1.1 (or the persistent session of `clientID`), the credentials and
    /// TLS set. The caller destroys it.
    static func makeClient(context: UnsafeMutableRawPointer, tls: Bool, caFile: String?, certFile: String?, keyFile: String?,
                           username: String?, password: String?, clientID: String? = nil, cleanSession: Bool = true) throws(Failure) -> OpaquePointer {
        do throws(MosquittoError) {
            try MosquittoError.check(mosquitto_lib_init(), "mosquitto_lib_init")
        } catch { throw Failure(description: error.description) }
        guard let mosq = mosquitto_new(clientID, cleanSession, context) else { let saved = errno; throw Failure(description: "mosquitto_new failed: \(String(cString: strerror(saved)))") }
        do throws(MosquittoError) {
            try MosquittoError.check(cmosq_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, Int32(MQTT_PROTOCOL_V311)), "mosquitto_int_option(PROTOCOL_VERSION)")
            if let username { try MosquittoError.check(mosquitto_username_pw_set(mosq, username, password), "mosquitto_username_pw_set") }
        } catch {
            mosquitto_destroy(mosq)
            throw Failure(description: error.description)
        }
        if tls {
            let rc = mosquitto_tls_set(mosq, caFile, caFile == nil ? "/etc/ssl/certs" : nil, certFile, keyFile, nil)
            if let e = MosquittoError(rc: rc, call: "mosquitto_tls_set") {
                mosquitto_destroy(mosq)
                throw Failure(description: "TLS setup: \(e.detail)")
            }
        }
        return mosq
    }

    package static func publishOnce(
        host: String, port: Int, tls: Bool, caFile: String?, certFile: String?, keyFile: String?,
        username: String?, password: String?, topic: String, payload: [UInt8], retain: Bool = false, timeout: Double = 10
    ) throws(Failure) {
        try publish(host: host, port: port, tls: tls, caFile: caFile, certFile: certFile, keyFile: keyFile, username: username,
                    password: password, messages: [(topic, payload)], retain: retain, timeout: timeout)
    }

    /// Every message over one connection; returns once the broker acknowledged them all.
    package static func publish(
        host: String, port: Int, tls: Bool, caFile: String?, certFile: String?, keyFile: String?,
        username: String?, password: String?, messages: [(topic: String, payload: [UInt8])], retain: Bool = false, timeout: Double = 10
    ) throws(Failure) {
        // Every failure below is the one-shot's failure: nothing was published (or nothing is known
        // to be), so the command says why and exits non-zero.
        let state = State()
        let mosq = try makeClient(context: Unmanaged.passUnretained(state).toOpaque(), tls: tls, caFile: caFile, certFile: certFile,
                                  keyFile: keyFile, username: username, password: password)
        defer { mosquitto_destroy(mosq) }
        mosquitto_connect_callback_set(mosq) { _, obj, rc in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            if rc == 0 { s.connected = true } else { s.connackError = rc }
        }
        mosquitto_publish_callback_set(mosq) { _, obj, _ in
            Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue().published += 1
        }
        let end = WallClock.monotonic() + timeout
        try connect(mosq, state, host: host, port: port, until: end)
        for (topic, payload) in messages {
            let rc = payload.withUnsafeBytes { mosquitto_publish(mosq, nil, topic, Int32($0.count), $0.baseAddress, 1, retain) }
            if let e = MosquittoError(rc: rc, call: "mosquitto_publish") { throw Failure(description: "publish: \(e.detail)") }
        }
        while state.published < messages.count {
            guard WallClock.monotonic() < end else { throw Failure(description: "timed out waiting for PUBACK") }
            if let e = MosquittoError(rc: mosquitto_loop(mosq, 200, 1), call: "mosquitto_loop") { throw Failure(description: e.detail) }
        }
        // The PUBACKs came: the messages are the broker's. A failed goodbye loses nothing.
        if MosquittoError.tolerated(mosquitto_disconnect(mosq), "mosquitto_disconnect") {
            MosquittoError.tolerated(mosquitto_loop(mosq, 100, 1), "mosquitto_loop")
        }
    }
}
