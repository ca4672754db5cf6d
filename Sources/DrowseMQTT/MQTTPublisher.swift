#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import DrowseCore

/// The provider side (`drowse push`): connect, publish one QoS 1 message, wait for PUBACK.
public enum MQTTPublisher {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    final class State {
        var connected = false
        var connackError: Int32?
        var published = false
    }

    public static func publishOnce(
        host: String, port: Int, tls: Bool, caFile: String?, certFile: String?, keyFile: String?,
        username: String?, password: String?, topic: String, payload: [UInt8], retain: Bool = false, timeout: Double = 10
    ) throws(Failure) {
        mosquitto_lib_init()
        let state = State()
        let ptr = Unmanaged.passUnretained(state).toOpaque()
        guard let mosq = mosquitto_new(nil, true, ptr) else { throw Failure(description: "mosquitto_new failed") }
        defer { mosquitto_destroy(mosq) }
        _ = cmosq_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, Int32(MQTT_PROTOCOL_V311))
        if let username { mosquitto_username_pw_set(mosq, username, password) }
        if tls {
            let rc = mosquitto_tls_set(mosq, caFile, caFile == nil ? "/etc/ssl/certs" : nil, certFile, keyFile, nil)
            guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw Failure(description: "TLS setup: \(String(cString: mosquitto_strerror(rc)))") }
        }
        mosquitto_connect_callback_set(mosq) { _, obj, rc in
            let s = Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue()
            if rc == 0 { s.connected = true } else { s.connackError = rc }
        }
        mosquitto_publish_callback_set(mosq) { _, obj, _ in
            Unmanaged<State>.fromOpaque(obj!).takeUnretainedValue().published = true
        }
        var rc = mosquitto_connect(mosq, host, Int32(port), 30)
        guard rc == MOSQ_ERR_SUCCESS.rawValue else {
            let why = rc == MOSQ_ERR_ERRNO.rawValue ? String(cString: strerror(errno)) : String(cString: mosquitto_strerror(rc))
            throw Failure(description: "cannot connect to \(host):\(port): \(why)")
        }
        let end = Self.now() + timeout
        while !state.connected {
            if let e = state.connackError { throw Failure(description: "broker refused: \(String(cString: mosquitto_connack_string(e)))") }
            guard Self.now() < end else { throw Failure(description: "timed out waiting for the broker") }
            rc = mosquitto_loop(mosq, 200, 1)
            guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw Failure(description: String(cString: mosquitto_strerror(rc))) }
        }
        rc = payload.withUnsafeBytes { mosquitto_publish(mosq, nil, topic, Int32($0.count), $0.baseAddress, 1, retain) }
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw Failure(description: "publish: \(String(cString: mosquitto_strerror(rc)))") }
        while !state.published {
            guard Self.now() < end else { throw Failure(description: "timed out waiting for PUBACK") }
            rc = mosquitto_loop(mosq, 200, 1)
            guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw Failure(description: String(cString: mosquitto_strerror(rc))) }
        }
        mosquitto_disconnect(mosq)
        _ = mosquitto_loop(mosq, 100, 1)
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
