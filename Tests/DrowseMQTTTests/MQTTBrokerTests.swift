import Foundation
import Logging
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import DrowseMQTT
import DrowseTestSupport

/// What a session told its owner, in order.
final class SessionEvents: Sendable {
    enum Seen: Equatable, Sendable {
        case connected
        case disconnected
        case message(topic: String, payload: String)
        case oversized(topic: String, bytes: Int)
    }

    let seen = Mutex<[Seen]>([])
    /// The DUP flag of each message, in order (`MQTTReceipt.redelivered`).
    let redelivered = Mutex<[Bool]>([])
    /// Reject the next this-many QoS 1 messages instead of acknowledging them.
    let rejectNext = Atomic<Int>(0)

    func handle(_ e: MQTTSessionEvent) {
        switch e {
        case .connected: seen.withLock { $0.append(.connected) }
        case .disconnected: seen.withLock { $0.append(.disconnected) }
        case .pingSent, .keepaliveLearned: break
        case .oversized(let topic, let bytes, let receipt):
            seen.withLock { $0.append(.oversized(topic: topic, bytes: bytes)) }
            receipt.acknowledge()
        case .message(let topic, let payload, let receipt):
            // A long payload is kept as its size: a failed expectation prints what was seen.
            let text = payload.count > 256 ? "<\(payload.count) bytes>" : String(decoding: payload, as: UTF8.self)
            seen.withLock { $0.append(.message(topic: topic, payload: text)) }
            redelivered.withLock { $0.append(receipt.redelivered) }
            if rejectNext.load(ordering: .relaxed) > 0 {
                rejectNext.subtract(1, ordering: .relaxed)
                receipt.reject()
            } else {
                receipt.acknowledge()
            }
        }
    }

    var all: [Seen] { seen.withLock { $0 } }
    func count(_ s: Seen) -> Int { all.filter { $0 == s }.count }
}

@Suite("MQTT against a real mosquitto", .serialized, .enabled(if: Broker.available, "mosquitto is not installed"))
struct MQTTBrokerTests {
    func publish(_ port: Int, _ topic: String, _ text: String) throws {
        try MQTTPublisher.publishOnce(host: "127.0.0.1", port: port, tls: false, caFile: nil, certFile: nil, keyFile: nil,
                                      username: nil, password: nil, topic: topic, payload: Array(text.utf8), timeout: 5)
    }

    func makeSession(port: Int, events: SessionEvents, logger: Logger, topics: [String],
                     protocolChoice: MQTTProtocolChoice = .mqtt5WithFallback) -> MQTTSession {
        var options = MQTTSessionOptions(host: "127.0.0.1", port: port, clientID: "drowse-test-\(port)", keepalive: 5,
                                         will: ("drowse/test/status", Array(#"{"online":false}"#.utf8)))
        options.protocolChoice = protocolChoice
        let s = MQTTSession(options: options, logger: logger) { events.handle($0) }
        s.setSubscriptions(topics)
        s.setPublishOnConnect([("drowse/test/status", Array(#"{"online":true}"#.utf8))])
        return s
    }

    @Test("the session connects, receives a message, and reconnects after the broker restarts")
    func connectReceiveReconnect() async throws {
        let port = try freePort()
        let broker = try Broker(port: port)
        try await broker.start()
        let events = SessionEvents()
        let (logger, logs) = CapturingLogHandler.logger()
        let session = makeSession(port: port, events: events, logger: logger, topics: ["drowse/test/notify/a"])
        session.start()
        try await waitUntil(10, "the first connection") { session.connected }
        // The subscription is in place once the broker has it; publish until it is delivered.
        try await waitUntil(10, "the first message") {
            if events.count(.message(topic: "drowse/test/notify/a", payload: "one")) > 0 { return true }
            try? publish(port, "drowse/test/notify/a", "one")
            return false
        }
        #expect(events.all.first == .connected)

        broker.stop()
        try await waitUntil(10, "the session to notice the broker is gone") { !session.connected }
        #expect(events.all.contains(.disconnected))
        #expect(logs.contains("mqtt: connection lost"))
        try await broker.start()
        try await waitUntil(20, "the reconnect") { session.connected }
        #expect(events.count(.connected) == 2)
        try await waitUntil(10, "a message after the reconnect") {
            if events.count(.message(topic: "drowse/test/notify/a", payload: "two")) > 0 { return true }
            try? publish(port, "drowse/test/notify/a", "two")
            return false
        }
        await session.stop()
        #expect(!session.connected)
        // A clean stop: the offline status published by the session itself (a clean DISCONNECT
        // suppresses the will), after the online one of each of the two connections.
        try await waitUntil(5, "the clean DISCONNECT in the broker's log") { broker.log.contains("Received DISCONNECT from drowse-test-\(port)") }
        let statusPublishes = broker.log.split(separator: "\n").filter {
            $0.contains("Received PUBLISH from drowse-test-\(port)") && $0.contains("'drowse/test/status'")
        }
        #expect(statusPublishes.count == 3)
        broker.stop()
    }

    @Test("a rejected message is not acknowledged: the session reconnects and the broker delivers it again")
    func rejectedIsRedelivered() async throws {
        let port = try freePort()
        let broker = try Broker(port: port)
        try await broker.start()
        let events = SessionEvents()
        let (logger, logs) = CapturingLogHandler.logger()
        let session = makeSession(port: port, events: events, logger: logger, topics: ["drowse/test/notify/b"])
        session.start()
        try await waitUntil(10, "the connection") { session.connected }
        // Let the SUBSCRIBE reach the broker before publishing (it keeps QoS 1 messages for the session from then on).
        try await waitUntil(5, "the subscription") { broker.log.contains("drowse/test/notify/b") }
        events.rejectNext.store(1, ordering: .relaxed)
        try publish(port, "drowse/test/notify/b", "keep-me")
        let m = SessionEvents.Seen.message(topic: "drowse/test/notify/b", payload: "keep-me")
        try await waitUntil(15, "the redelivery") { events.count(m) >= 2 }
        #expect(logs.contains("a received message could not be recorded"))
        // The broker marks the second copy as sent before (DUP): its handler starts as a possible repeat.
        #expect(events.redelivered.withLock { Array($0.prefix(2)) } == [false, true])
        #expect(events.count(.connected) >= 2)
        // Acknowledged the second time: it is not delivered a third time.
        try await Task.sleep(for: .milliseconds(500))
        #expect(events.count(m) == 2)
        await session.stop()
        broker.stop()
    }

    /// The peak resident memory of this process since the last `resetPeak` (VmHWM, bytes).
    static func peakResident() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
        return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
    }

    static func resetPeak() throws { try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8) }

    @Test("a PUBLISH over the packet bound never costs its size: MQTT 5 announces the bound and the broker drops it; over 3.1.1 it is cut as it arrives, refused once, the rest served",
          arguments: [MQTTProtocolChoice.mqtt5WithFallback, .mqtt311])
    func oversizedIsCutNotHeld(_ choice: MQTTProtocolChoice) async throws {
        let port = try freePort()
        let broker = try Broker(port: port)
        try await broker.start()
        let events = SessionEvents()
        let (logger, _) = CapturingLogHandler.logger()
        let topic = "drowse/test/notify/big"
        let session = makeSession(port: port, events: events, logger: logger, topics: [topic], protocolChoice: choice)
        session.start()
        try await waitUntil(10, "the connection") { session.connected }
        try await waitUntil(5, "the subscription") { broker.log.contains(topic) }
        #expect(session.protocolVersion == (choice == .mqtt311 ? "3.1.1" : "5"))
        // The big one comes from another process (mosquitto_pub), so this process's peak is the session's.
        let dir = try makeTempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = dir + "/big"
        try Data(repeating: UInt8(ascii: "x"), count: 48 << 20).write(to: URL(fileURLWithPath: file))
        try publish(port, topic, "before")
        try await waitUntil(10, "the first message") { events.count(.message(topic: topic, payload: "before")) == 1 }
        try Self.resetPeak()
        let before = try Self.peakResident()
        let pub = Process()
        pub.executableURL = URL(fileURLWithPath: "/usr/bin/mosquitto_pub")
        pub.arguments = ["-h", "127.0.0.1", "-p", String(port), "-q", "1", "-t", topic, "-f", file]
        try pub.run()
        pub.waitUntilExit()
        #expect(pub.terminationStatus == 0)
        try publish(port, topic, "after")
        try await waitUntil(30, "the message after the big one") { events.count(.message(topic: topic, payload: "after")) == 1 }
        let grown = try Self.peakResident() - before
        // MQTT 5: the broker honours the Maximum Packet Size and never sends it (nor spends the
        // radio on it); 3.1.1: the gate cuts it, and the session refuses and acknowledges it.
        let refused: [SessionEvents.Seen] = choice == .mqtt311 ? [.oversized(topic: topic, bytes: 48 << 20)] : []
        #expect(events.all.filter { $0 != .connected } == [.message(topic: topic, payload: "before")] + refused + [.message(topic: topic, payload: "after")])
        // Without the gate libmosquitto holds the whole packet (48 MiB), and the session a copy
        // of it. The peak is the whole test process's: suites running beside this one grow it
        // by a few MiB, so the bound is a third of the packet, not a few pages.
        #expect(grown < 16 << 20, "peak resident memory grew by \(grown) bytes")
        // Acknowledged: a new connection does not get it again.
        broker.stop()
        try await waitUntil(10, "the session to notice the broker is gone") { !session.connected }
        try await broker.start()
        try await waitUntil(20, "the reconnect") { session.connected }
        try publish(port, topic, "later")
        try await waitUntil(10, "a message after the reconnect") { events.count(.message(topic: topic, payload: "later")) == 1 }
        #expect(events.all.filter { if case .oversized = $0 { return true } else { return false } }.count == refused.count)
        #expect(events.count(.message(topic: topic, payload: "<\(48 << 20) bytes>")) == 0)
        await session.stop()
        broker.stop()
    }

    @Test("a broker that accepts the connection but never answers CONNECT is given up on, then retried")
    func connackTimeout() async throws {
        // A listening socket whose backlog completes the handshake; nobody reads.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        try #require(bound && listen(fd, 16) == 0)
        let port = Int(UInt16(bigEndian: addr.sin_port))
        let events = SessionEvents()
        let (logger, logs) = CapturingLogHandler.logger()
        let session = MQTTSession(options: MQTTSessionOptions(host: "127.0.0.1", port: port, clientID: "silent", keepalive: 5),
                                  logger: logger) { events.handle($0) }
        let started = Date()
        session.start()
        do { try await waitUntil(9, "the CONNACK timeout") { logs.contains("no CONNACK from the broker") } } catch { print(logs.all.map { $0.1 }); throw error }
        #expect(Date().timeIntervalSince(started) >= 4.9)  // min(30 s, keepalive)
        #expect(logs.contains("reconnecting in"))
        #expect(!session.connected && events.all.isEmpty)
        await session.stop()
    }

    @Test("the one-shot publisher says why it failed")
    func publisherFailures() throws {
        let port = try freePort()  // nothing listens there
        do throws(MQTTPublisher.Failure) {
            try MQTTPublisher.publishOnce(host: "127.0.0.1", port: port, tls: false, caFile: nil, certFile: nil, keyFile: nil,
                                          username: nil, password: nil, topic: "a/b", payload: [1])
            Issue.record("published to a closed port")
        } catch {
            #expect(error.description == "cannot connect to 127.0.0.1:\(port): \(String(cString: strerror(ECONNREFUSED)))")
        }
        do throws(MQTTPublisher.Failure) {
            try MQTTPublisher.publishOnce(host: "127.0.0.1", port: port, tls: true, caFile: "/nonexistent/ca.pem", certFile: nil,
                                          keyFile: nil, username: nil, password: nil, topic: "a/b", payload: [1])
            Issue.record("TLS set up with a missing CA file")
        } catch {
            #expect(error.description.hasPrefix("TLS setup: "))
        }
    }

    @Test("stop answers even when the session could not be set up (TLS files missing)")
    func stopAfterSetupFailure() async throws {
        let (logger, logs) = CapturingLogHandler.logger()
        let session = MQTTSession(
            options: MQTTSessionOptions(host: "127.0.0.1", port: 1, clientID: "x", keepalive: 60, tls: true, caFile: "/nonexistent/ca.pem"),
            logger: logger) { _ in }
        session.start()
        try await waitUntil(5, "the setup failure to be logged") { logs.contains("mosquitto_tls_set") }
        #expect(logs.contains("MQTT is off"))
        await session.stop()
        #expect(!session.connected)
    }
}
