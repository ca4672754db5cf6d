#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import DrowseCore
import DrowseSystem
import Logging
import Synchronization

/// The owner's answer for one received message. `acknowledge()` lets its PUBACK (and everything
/// queued after it) go; `reject()` drops the connection without sending it, so the broker keeps
/// the message and delivers it again after the reconnect. A receipt dropped unsettled rejects:
/// nothing is acknowledged that nobody recorded. A receipt belongs to the connection its message
/// came on; once that connection is gone, settling it changes nothing (the reconnect discarded
/// its PUBACK, and the broker delivers the message again).
package final class MQTTReceipt: Sendable {
    private let settled = Atomic<Bool>(false)
    private let session: MQTTSession?
    private let connection: Int
    /// The broker sent this message before (MQTT's DUP flag): an earlier copy may have been
    /// received, recorded and run before a power cut lost the record.
    package let redelivered: Bool

    /// `session` nil: nothing to settle (a QoS 0 message has no PUBACK).
    init(_ session: MQTTSession?, connection: Int, redelivered: Bool = false) {
        self.session = session
        self.connection = connection
        self.redelivered = redelivered
    }

    package func acknowledge() { settle(ack: true) }
    package func reject() { settle(ack: false) }

    private func settle(ack: Bool) {
        guard !settled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        session?.settled(ack: ack, connection: connection)
    }

    deinit { settle(ack: false) }
}
