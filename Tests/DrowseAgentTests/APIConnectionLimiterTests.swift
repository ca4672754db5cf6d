#if canImport(Glibc)
import Glibc
#endif
import DrowseTestSupport
import Logging
import NIOCore
import NIOEmbedded
import Testing
@testable import DrowseAgent

/// Counts the reads that get past the limiter to the listening socket.
final class LimiterReadCounter: ChannelOutboundHandler {
    typealias OutboundIn = Never
    var reads = 0
    func read(context: ChannelHandlerContext) {
        reads += 1
        context.read()
    }
}

@Suite("APIConnectionLimiter")
struct APIConnectionLimiterTests {
    /// A listening channel with the limiter, the read counter between it and the socket, and
    /// the limiter's log.
    static func listener(limit: Int) throws -> (EmbeddedChannel, EmbeddedEventLoop, LimiterReadCounter, CapturingLogHandler.Box) {
        let loop = EmbeddedEventLoop()
        let (logger, logs) = CapturingLogHandler.logger()
        let counter = LimiterReadCounter()
        let channel = EmbeddedChannel(loop: loop)
        try channel.pipeline.syncOperations.addHandler(counter)
        try channel.pipeline.syncOperations.addHandler(APIConnectionLimiter(limit: limit, logger: logger))
        return (channel, loop, counter, logs)
    }

    /// One accepted connection arriving on the listener.
    static func accept(_ listener: EmbeddedChannel, on loop: EmbeddedEventLoop) throws -> EmbeddedChannel {
        let child = EmbeddedChannel(loop: loop)
        try listener.writeInbound(child as Channel)
        return child
    }

    static func exhaustion(_ listener: EmbeddedChannel) {
        listener.pipeline.fireErrorCaught(IOError(errnoCode: EMFILE, reason: "accept"))
    }

    @Test("below the cap reads go through; at the cap they are held until a connection closes")
    func capHoldsReads() throws {
        let (listener, loop, counter, _) = try Self.listener(limit: 2)
        listener.read()
        #expect(counter.reads == 1)
        let a = try Self.accept(listener, on: loop)
        listener.read()
        #expect(counter.reads == 2)
        let b = try Self.accept(listener, on: loop)
        // Both accepted connections go on up the pipeline.
        #expect(try listener.readInbound(as: Channel.self) === a)
        #expect(try listener.readInbound(as: Channel.self) === b)
        listener.read()
        listener.read()
        #expect(counter.reads == 2, "a read at the cap reached the socket")
        try a.close().wait()
        loop.run()
        #expect(counter.reads == 3, "the held read was not let through when a connection closed")
        // One held read is let through once, not once per withheld call.
        try b.close().wait()
        loop.run()
        #expect(counter.reads == 3)
        listener.read()
        #expect(counter.reads == 4)
    }

    @Test("EMFILE pauses accepting for one second, logged once, and is not passed on")
    func exhaustionBacksOff() throws {
        let (listener, loop, _, logs) = try Self.listener(limit: 4)
        Self.exhaustion(listener)
        #expect(throws: Never.self) { try listener.throwIfErrorCaught() }
        #expect(logs.all.filter { $0.0 == .warning && $0.1.contains("trying again in 1 s") }.count == 1)
        // Still paused: a second failure within the second is not logged again.
        loop.advanceTime(by: .milliseconds(999))
        Self.exhaustion(listener)
        #expect(logs.all.filter { $0.0 == .warning }.count == 1)
        // After the back-off it accepts again, so the next failure pauses (and logs) anew.
        loop.advanceTime(by: .milliseconds(1))
        Self.exhaustion(listener)
        #expect(logs.all.filter { $0.0 == .warning }.count == 2)
    }

    @Test("at the cap when the back-off ends, accepting resumes only when a connection closes")
    func exhaustionAtCap() throws {
        let (listener, loop, _, logs) = try Self.listener(limit: 1)
        let a = try Self.accept(listener, on: loop)
        Self.exhaustion(listener)
        loop.advanceTime(by: .seconds(5))
        Self.exhaustion(listener)
        #expect(logs.all.filter { $0.0 == .warning }.count == 1, "resumed at the cap")
        try a.close().wait()
        loop.run()
        Self.exhaustion(listener)
        #expect(logs.all.filter { $0.0 == .warning }.count == 2, "did not resume after the close")
    }

    @Test("other accept errors go on down the pipeline")
    func otherErrors() throws {
        let (listener, _, _, logs) = try Self.listener(limit: 1)
        listener.pipeline.fireErrorCaught(IOError(errnoCode: ECONNABORTED, reason: "accept"))
        #expect(throws: IOError.self) { try listener.throwIfErrorCaught() }
        #expect(logs.all.isEmpty)
        #expect(APIConnectionLimiter.isExhaustion(IOError(errnoCode: ENFILE, reason: "accept")))
        #expect(!APIConnectionLimiter.isExhaustion(ChannelError.ioOnClosedChannel))
    }
}
