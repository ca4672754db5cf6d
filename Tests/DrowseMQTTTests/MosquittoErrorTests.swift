import CMosquitto
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import DrowseMQTT
import DrowseTestSupport

@Suite("MosquittoError")
struct MosquittoErrorTests {
    @Test("success is no error; a failure carries the call and libmosquitto's words")
    func words() throws {
        #expect(MosquittoError(rc: MOSQ_ERR_SUCCESS.rawValue, call: "mosquitto_publish") == nil)
        let e = try #require(MosquittoError(rc: MOSQ_ERR_NO_CONN.rawValue, call: "mosquitto_publish"))
        #expect(e.rc == MOSQ_ERR_NO_CONN.rawValue)
        #expect(e.detail == String(cString: mosquitto_strerror(MOSQ_ERR_NO_CONN.rawValue)))
        #expect(e.description == "mosquitto_publish: \(e.detail)")
        #expect(!e.detail.isEmpty)
    }

    @Test("MOSQ_ERR_ERRNO: the words are errno's")
    func errnoWords() throws {
        errno = ECONNREFUSED
        let e = try #require(MosquittoError(rc: MOSQ_ERR_ERRNO.rawValue, call: "mosquitto_connect"))
        #expect(e.detail == String(cString: strerror(ECONNREFUSED)))
    }

    @Test("check throws on failure only")
    func check() {
        #expect(throws: Never.self) { try MosquittoError.check(MOSQ_ERR_SUCCESS.rawValue, "x") }
        #expect(throws: MosquittoError.self) { try MosquittoError.check(MOSQ_ERR_INVAL.rawValue, "mosquitto_subscribe") }
    }

    @Test("the logging form logs a failure at the level asked and says whether the call worked")
    func logging() {
        let (logger, box) = CapturingLogHandler.logger()
        #expect(logger.mosquitto(MOSQ_ERR_SUCCESS.rawValue, "mosquitto_subscribe", level: .warning))
        #expect(box.all.isEmpty)
        #expect(!logger.mosquitto(MOSQ_ERR_NOMEM.rawValue, "mosquitto_subscribe", level: .warning, "drowse/dev/notify/app"))
        let line = box.all.first
        #expect(line?.0 == .warning)
        #expect(line?.1 == "mqtt: mosquitto_subscribe: \(String(cString: mosquitto_strerror(MOSQ_ERR_NOMEM.rawValue))) (drowse/dev/notify/app)")
    }

    @Test("a real call: mosquitto_subscribe on a client that never connected fails with NO_CONN")
    func realCall() throws {
        mosquitto_lib_init()
        let mosq = try #require(mosquitto_new(nil, true, nil))
        defer { mosquitto_destroy(mosq) }
        let e = MosquittoError(rc: mosquitto_subscribe(mosq, nil, "a/b", 1), call: "mosquitto_subscribe")
        #expect(e?.rc == MOSQ_ERR_NO_CONN.rawValue)
    }
}
