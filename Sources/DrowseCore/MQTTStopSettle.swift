/// At stop, how long the MQTT session waits for the messages it already handed over to be
/// recorded, so their PUBACKs can go with the clean DISCONNECT: `length` (2 s) from the stop.
/// Past that, or once a message is rejected, it closes without writing and the broker delivers
/// the unacknowledged messages again after the next connect. Pure: the session passes its
/// receipts' state and the monotonic time.
package struct MQTTStopSettle: Sendable, Equatable {
    package static let defaultLength = 2.0

    /// The end of the window (monotonic seconds).
    package let deadline: Double

    package init(stoppingAt now: Double, length: Double = MQTTStopSettle.defaultLength) {
        deadline = now + length
    }

    /// Whether to keep waiting at `now`: a received message is still unsettled, none was
    /// rejected, and the window is still open.
    package func keepWaiting(unsettled: Int, rejected: Bool, now: Double) -> Bool {
        unsettled > 0 && !rejected && now < deadline
    }
}
