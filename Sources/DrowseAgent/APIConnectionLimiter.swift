#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore

/// On the API's listening channel: at most `limit` connections open at once, and no busy loop
/// when accepting fails for want of file descriptors.
///
/// At the limit it withholds `read`, so NIO drops its interest in the listening socket (no
/// wakeups) and further clients wait in the kernel's backlog until a connection closes. With
/// `ChannelOptions.maxMessagesPerRead` at 1 on the server channel, one read accepts one
/// connection, so the count never passes the limit.
///
/// When accept fails with EMFILE (or ENFILE, ENOBUFS, ENOMEM) the listening socket stays
/// readable. NIO's own `AcceptBackoffHandler` does not help in swift-nio 2.101: a failed
/// accept leaves the channel's `readPending` set, so NIO stays registered for readability
/// and retries at once, for ever (measured: 100 % of a core), whatever the handler withholds.
/// Only turning `autoRead` off takes the socket out of epoll, so this handler does that for
/// one second, then tries again.
final class APIConnectionLimiter: ChannelDuplexHandler {
    typealias InboundIn = Channel
    typealias InboundOut = Channel
    typealias OutboundIn = Channel

    static let backoff = TimeAmount.seconds(1)

    let limit: Int
    let logger: Logger
    private var open = 0
    /// A read was withheld at the limit; the next close lets it through.
    private var readHeld = false
    /// autoRead is off because accepting failed; `retry` turns it back on.
    private var paused = false
    private var retry: Scheduled<Void>?

    init(limit: Int, logger: Logger) {
        self.limit = limit
        self.logger = logger
    }

    /// Whether accept failed for want of a resource that retrying at once cannot produce.
    static func isExhaustion(_ error: Error) -> Bool {
        guard let io = error as? IOError else { return false }
        switch io.errnoCode {
        case EMFILE, ENFILE, ENOBUFS, ENOMEM: return true
        default: return false
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let child = unwrapInboundIn(data)
        open += 1
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let loop = context.eventLoop
        // The child may live on another event loop; the count is only touched on this one.
        child.closeFuture.whenComplete { _ in
            loop.execute {
                let (limiter, context) = loopBound.value
                limiter.closed(context: context)
            }
        }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        guard open < limit else {
            readHeld = true
            return
        }
        context.read()
    }

    private func closed(context: ChannelHandlerContext) {
        open -= 1
        guard open < limit else { return }
        if paused {
            resumeIfAllowed(context: context)
        } else if readHeld {
            readHeld = false
            context.read()
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        guard Self.isExhaustion(error) else {
            context.fireErrorCaught(error)
            return
        }
        guard !paused else { return }
        paused = true
        logger.warning("local API: cannot accept a connection (\(error)); trying again in 1 s, \(open) connections open")
        setAutoRead(false, context: context)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        retry = context.eventLoop.scheduleTask(in: Self.backoff) {
            let (limiter, context) = loopBound.value
            limiter.retry = nil
            limiter.resumeIfAllowed(context: context)
        }
    }

    /// After the backoff: accept again, unless the limit is reached (then the next close does).
    private func resumeIfAllowed(context: ChannelHandlerContext) {
        guard paused, retry == nil, open < limit else { return }
        paused = false
        readHeld = false
        setAutoRead(true, context: context)  // registers for readability and reads: one accept
    }

    private func setAutoRead(_ on: Bool, context: ChannelHandlerContext) {
        do {
            try context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: on)
        } catch {
            // Only a closed channel refuses options, and a closed listener accepts nothing anyway.
            logger.debug("local API: autoRead \(on): \(error)")
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        retry?.cancel()
        retry = nil
    }
}
