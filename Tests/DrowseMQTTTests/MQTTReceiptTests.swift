import Logging
import Testing
@testable import DrowseMQTT

/// The receipt rules, without a broker: a session that is never started keeps the counts.
@Suite("MQTTReceipt")
struct MQTTReceiptTests {
    func session() -> MQTTSession {
        MQTTSession(options: MQTTSessionOptions(host: "127.0.0.1", port: 1, clientID: "t", keepalive: 60), logger: Logger(label: "t")) { _ in }
    }

    /// What the message callback does for a QoS 1 message.
    func receive(_ s: MQTTSession) -> MQTTReceipt {
        let c = s.receipts.withLock { r -> Int in r.unsettled += 1; return r.connection }
        return MQTTReceipt(s, connection: c)
    }

    @Test("acknowledging settles once; a second settle changes nothing")
    func acknowledgeOnce() {
        let s = session()
        let r = receive(s)
        #expect(s.receipts.withLock { $0.unsettled } == 1)
        r.acknowledge()
        r.reject()
        r.acknowledge()
        let state = s.receipts.withLock { $0 }
        #expect(state.unsettled == 0 && state.acknowledged && !state.rejected)
    }

    @Test("rejecting marks the connection for dropping")
    func reject() {
        let s = session()
        let a = receive(s), b = receive(s)
        a.acknowledge()
        b.reject()
        let state = s.receipts.withLock { $0 }
        #expect(state.unsettled == 0 && state.rejected)
    }

    @Test("a receipt dropped unsettled rejects: nothing is acknowledged that nobody recorded")
    func dropRejects() {
        let s = session()
        do { _ = receive(s) }
        let state = s.receipts.withLock { $0 }
        #expect(state.unsettled == 0 && state.rejected && !state.acknowledged)
    }

    @Test("a receipt of an earlier connection changes nothing")
    func staleConnection() {
        let s = session()
        let old = receive(s)
        // The connection is lost: the session starts counting afresh.
        s.receipts.withLock { $0 = MQTTSession.ReceiptState(connection: $0.connection + 1) }
        let current = receive(s)
        old.reject()
        var state = s.receipts.withLock { $0 }
        #expect(state.unsettled == 1 && !state.rejected)
        current.acknowledge()
        state = s.receipts.withLock { $0 }
        #expect(state.unsettled == 0 && state.acknowledged)
    }

    @Test("a QoS 0 message's receipt settles nothing")
    func qos0() {
        let s = session()
        MQTTReceipt(nil, connection: 0).reject()
        #expect(!s.receipts.withLock { $0.rejected })
    }
}
