#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import Logging
import NIOCore
import Synchronization

/// The per-uid connection counts every API connection shares (children live on any of NIO's
/// event loops, so the counts are behind a lock).
final class APIAdmissionControl: Sendable {
    private let state: Mutex<ConnectionAdmission>
    /// Refused connections still open for their linger: each holds one of the listener's
    /// places, so only a few may linger; past that a refusal closes at once (a reconnecting
    /// flood would otherwise keep the places full and the backlog with it).
    private let lingering = Mutex(0)
    static let maxLingering = 4

    init(perUID: Int, shared: Int) {
        state = Mutex(ConnectionAdmission(perUID: perUID, shared: shared))
    }

    /// A place for one more lingering refusal, if there is one.
    func startLinger() -> Bool {
        lingering.withLock { n in
            guard n < Self.maxLingering else { return false }
            n += 1
            return true
        }
    }

    func endLinger() { lingering.withLock { $0 -= 1 } }

    func opened(_ caller: Caller) -> ConnectionAdmission.Verdict {
        state.withLock { $0.opened(uid: caller.uid, privileged: caller.isAdmin) }
    }

    func closed(_ caller: Caller) {
        state.withLock { $0.closed(uid: caller.uid, privileged: caller.isAdmin) }
    }
}

/// Told to `APIHandler` once the gate knows who is calling.
struct CallerIdentified {
    var caller: Caller
}

/// First on every API connection, below HTTP: who may talk, and how much unsent output they
/// may make drowsed hold.
///
/// - Admission: nothing is read until SO_PEERCRED says who the peer is and `APIAdmissionControl`
///   admits it; a refused connection gets a short 429 and is closed at once.
/// - Back-pressure: no `read` while the channel is not writable (its unsent output is over the
///   high water mark), so a client that sends requests and never reads the answers stops being
///   read instead of growing drowsed's memory; `APIHandler` also holds a request already read.
/// - Write timeout: a connection whose output stays over the mark for `writeTimeout` (its client
///   reads nothing) is closed, and its buffers go with it.
final class APIConnectionGate: ChannelDuplexHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny
    typealias OutboundOut = ByteBuffer

    /// Unsent output above `high` stops reading; below `low` it resumes. One page of a
    /// listing is a few hundred KiB at most, so these bound what a connection holds.
    static let waterMark = ChannelOptions.Types.WriteBufferWaterMark(low: 32 * 1024, high: 64 * 1024)
    static let writeTimeout = TimeAmount.seconds(10)
    /// How long a refused connection is still read (and what comes is dropped) after its answer:
    /// closing with the client's request unread would make its send fail (EPIPE) or its read
    /// fail (ECONNRESET) before it sees the answer. Short, since the place counts in the cap.
    static let refusalLinger = TimeAmount.milliseconds(250)

    let admission: APIAdmissionControl
    let logger: Logger
    private var caller: Caller?
    private var refused = false
    private var readHeld = false
    private var writeTimer: Scheduled<Void>?

    init(admission: APIAdmissionControl, logger: Logger) {
        self.admission = admission
        self.logger = logger
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        guard let provider = context.channel as? SocketOptionProvider else {
            refuse(context: context, status: "403 Forbidden", code: "forbidden", message: "no peer credentials")
            return
        }
        let f: EventLoopFuture<PeerCredentials> = provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: SO_PEERCRED)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        f.whenComplete { result in
            let (gate, context) = loopBound.value
            switch result {
            case .success(let cred): gate.identified(Caller.from(uid: cred.uid, gid: cred.gid), context: context)
            case .failure: gate.refuse(context: context, status: "403 Forbidden", code: "forbidden", message: "no peer credentials")
            }
        }
    }

    private func identified(_ caller: Caller, context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        switch admission.opened(caller) {
        case .admitted:
            self.caller = caller
            context.fireUserInboundEventTriggered(CallerIdentified(caller: caller))
            if readHeld, context.channel.isWritable {
                readHeld = false
                context.read()
            }
        case .overUserLimit(let n):
            logger.debug("local API: uid \(caller.uid) already holds \(n) connections; one more refused")
            refuse(context: context, status: "429 Too Many Requests", code: "too_many_connections",
                   message: "uid \(caller.uid) already holds \(n) connections to drowsed ([api] max_connections_per_uid)")
        case .full(let n):
            logger.debug("local API: users hold \(n) connections; one more of uid \(caller.uid) refused")
            refuse(context: context, status: "503 Service Unavailable", code: "busy",
                   message: "users hold \(n) connections to drowsed, the most allowed")
        }
    }

    /// A short HTTP answer written beneath the HTTP handlers (no request was read), then close.
    private func refuse(context: ChannelHandlerContext, status: String, code: String, message: String) {
        refused = true
        let body = APIWire.Error(code: code, message: message).json.serialized + "\n"
        let text = "HTTP/1.1 \(status)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
        var buf = context.channel.allocator.buffer(capacity: text.utf8.count)
        buf.writeString(text)
        let channel = context.channel
        writeTimer?.cancel()
        writeTimer = nil
        guard admission.startLinger() else {
            // Many refusals at once (a reconnecting flood): the answer, then close, freeing the
            // place for the next caller at once; this client may see a reset instead of the 429.
            context.writeAndFlush(wrapOutboundOut(buf)).whenComplete { _ in channel.close(promise: nil) }
            return
        }
        context.writeAndFlush(wrapOutboundOut(buf)).whenComplete { _ in channel.close(mode: .output, promise: nil) }
        let admission = self.admission
        channel.closeFuture.whenComplete { _ in admission.endLinger() }
        writeTimer = context.eventLoop.scheduleTask(in: Self.refusalLinger) { channel.close(promise: nil) }
        if readHeld {
            readHeld = false
            context.read()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if refused { return }  // the request of a refused connection: drained, not answered
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        if refused {
            context.read()
            return
        }
        guard caller != nil, context.channel.isWritable else {
            readHeld = true
            return
        }
        context.read()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if refused {
            // The linger timer closes it.
        } else if context.channel.isWritable {
            writeTimer?.cancel()
            writeTimer = nil
            if readHeld, caller != nil {
                readHeld = false
                context.read()
            }
        } else if writeTimer == nil {
            let channel = context.channel
            writeTimer = context.eventLoop.scheduleTask(in: Self.writeTimeout) { channel.close(promise: nil) }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { release() }

    private func release() {
        writeTimer?.cancel()
        writeTimer = nil
        if let caller {
            self.caller = nil
            admission.closed(caller)
        }
    }
}
