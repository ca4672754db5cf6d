#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseSystem
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// The local API: HTTP/1.1 with JSON bodies on a Unix socket, every caller identified by
/// SO_PEERCRED. It shares NIO's singleton event loops with Swift concurrency; they sleep
/// in epoll when nobody calls.
package struct APIServer: Service {
    /// Connections open at once; more wait in the listen backlog (also 64) until one closes.
    /// A board's apps and scripts need a handful; the cap keeps any one local user from
    /// spending the daemon's file descriptors, which MQTT, SQLite and transfers need too.
    package static let maxConnections = 64
    /// Of those, ordinary users (not root, not the drowse group) hold at most this many together,
    /// so root and the drowse group always find a place; each uid holds at most
    /// `[api] max_connections_per_uid` (see `ConnectionAdmission`).
    package static let sharedConnections = 48
    /// A connection is closed when no whole request arrives within this long of its opening or
    /// of its last response: idle keep-alive connections do not hold one of the 64 places, and
    /// a client that sends a request a byte at a time does not either. The timer exists only
    /// while a client holds a connection open, so an idle daemon still sleeps.
    package static let idleTimeout = TimeAmount.seconds(10)
    /// Request line and headers: far more than any client of this API sends, far less than
    /// NIO's defaults (80 KiB per field, 80 KiB in all, 65 534 fields).
    static let decoderLimits: NIOHTTPDecoderLimitConfiguration = {
        var l = NIOHTTPDecoderLimitConfiguration()
        l.maxHeaderFieldSize = 16 * 1024
        l.maxHeaderListSize = 32 * 1024
        l.maxHeaderFieldCount = 100
        return l
    }()

    let path: String
    let router: APIRouter
    let logger: Logger
    let maxConnectionsPerUID: Int
    /// Called once the socket listens: the next step of the start may begin (`StartOrder`).
    let listening: @Sendable () async -> Void

    package init(path: String, router: APIRouter, logger: Logger, maxConnectionsPerUID: Int = MainConfig.APIConfig().maxConnectionsPerUID,
                 listening: @escaping @Sendable () async -> Void = {}) {
        self.path = path
        self.router = router
        self.logger = logger
        self.maxConnectionsPerUID = maxConnectionsPerUID
        self.listening = listening
    }

    package func run() async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let folder = ConfigPath.directory(of: path)
        try FileSystem.makeDirectories(folder, mode: 0o755)
        // A socket left by a killed daemon would make bind fail.
        _ = try Sys.unlink(path)  // false: there was none
        let router = self.router
        let logger = self.logger
        let admission = APIAdmissionControl(perUID: maxConnectionsPerUID, shared: Self.sharedConnections)
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: Int32(Self.maxConnections))
            // One accept per read, so that the limiter can stop exactly at the cap.
            .serverChannelOption(ChannelOptions.maxMessagesPerRead, value: 1)
            .serverChannelInitializer { channel in
                // The connection cap, and the pause after a failed accept (EMFILE) that keeps the
                // event loop from retrying at 100 % CPU (see APIConnectionLimiter for why not NIO's).
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(APIConnectionLimiter(limit: Self.maxConnections, logger: logger))
                }
            }
            .childChannelOption(ChannelOptions.writeBufferWaterMark, value: APIConnectionGate.waterMark)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(APIConnectionGate(admission: admission, logger: logger))
                }.flatMap {
                    channel.pipeline.configureHTTPServerPipeline(withErrorHandling: true, withDecoderLimitConfiguration: Self.decoderLimits)
                }.flatMapThrowing {
                        try channel.pipeline.syncOperations.addHandler(APIHandler(router: router, logger: logger))
                    }
            }
            .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true)
            .get()
        // App users reach the socket for their own app; every request is authorized by peer credentials.
        try Sys.chmod(path, 0o666)
        logger.info("local API listening on \(path)")
        await listening()
        await withGracefulShutdownHandler {
            try? await channel.closeFuture.get()
        } onGracefulShutdown: {
            channel.close(promise: nil)
        }
        do { _ = try Sys.unlink(path) } catch { logger.warning("local API: the socket stays behind: \(error)") }
    }
}

/// Peer credentials as the kernel fills them for SO_PEERCRED.
struct PeerCredentials: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

final class APIHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    static let maxBody = 256 * 1024
    let router: APIRouter
    let logger: Logger
    var head: HTTPRequestHead?
    var body: [UInt8] = []
    var tooLarge = false
    var caller: Caller?
    /// The app event stream this connection carries, if it does.
    var stream: (String, ChannelEventSink)?
    /// Armed while the connection waits for a whole request (see `APIServer.idleTimeout`).
    var idleTimer: Scheduled<Void>?
    /// A whole request waits for the client to read earlier answers (see `APIConnectionGate`).
    var waitingForWritable = false

    init(router: APIRouter, logger: Logger) {
        self.router = router
        self.logger = logger
    }

    private func armIdleTimer(context: ChannelHandlerContext) {
        idleTimer?.cancel()
        let channel = context.channel
        idleTimer = context.eventLoop.scheduleTask(in: APIServer.idleTimeout) { channel.close(promise: nil) }
    }

    private func disarmIdleTimer() {
        idleTimer?.cancel()
        idleTimer = nil
    }

    func handlerRemoved(context: ChannelHandlerContext) { disarmIdleTimer() }

    func channelInactive(context: ChannelHandlerContext) {
        disarmIdleTimer()
        if let (app, sink) = stream {
            stream = nil
            let router = self.router
            Task { await router.eventStreamClosed(app, sink: sink) }
        }
        context.fireChannelInactive()
    }

    /// A reset or a broken connection: nothing to answer on it.
    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }

    func channelActive(context: ChannelHandlerContext) {
        armIdleTimer(context: context)
        context.fireChannelActive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let identified = event as? CallerIdentified {
            caller = identified.caller
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// NIO's pipelining handler hands over the next request as soon as the last answer is
    /// written into the channel, sent or not; one that waits here until the client has read
    /// enough keeps a pipelining client that never reads from piling answers up in memory.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if waitingForWritable, context.channel.isWritable {
            waitingForWritable = false
            serve(context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = []
            tooLarge = false
        case .body(var buf):
            guard !tooLarge else { return }
            if body.count + buf.readableBytes > Self.maxBody {
                // Answered and closed at once, whatever the framing: a chunked body that never
                // ends must not keep the connection (and drowsed's reading) going.
                tooLarge = true
                body = []
                disarmIdleTimer()
                serve(context: context)
            } else {
                body += buf.readBytes(length: buf.readableBytes) ?? []
            }
        case .end:
            guard head != nil, !tooLarge else { return }
            disarmIdleTimer()  // the request is whole: its answer may take as long as a fetch does
            guard context.channel.isWritable else {
                waitingForWritable = true
                return
            }
            serve(context: context)
        }
    }

    /// Answers the whole request in `head` and `body`.
    private func serve(context: ChannelHandlerContext) {
        guard let head else { return }
        self.head = nil
        let keepAlive = head.isKeepAlive
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        if tooLarge {
            respond(context: context, status: 413, json: APIWire.Error(code: "too_large", message: "request body over 256 KiB").json, keepAlive: false)
            return
        }
        guard let caller else {
            respond(context: context, status: 403, json: APIWire.Error(code: "forbidden", message: "no peer credentials").json, keepAlive: false)
            return
        }
        let (path, query) = Self.split(head.uri)
        if let app = APIRouter.eventStreamApp(method: head.method.rawValue, path: path) {
            openEventStream(app, caller: caller, context: context)
            return
        }
        if APIRouter.isMetrics(method: head.method.rawValue, path: path) {
            let router = self.router
            let promise = context.eventLoop.makePromise(of: (status: Int, body: String, contentType: String).self)
            promise.completeWithTask { await router.metrics(caller: caller) }
            promise.futureResult.whenSuccess { answer in
                let (handler, ctx) = loopBound.value
                handler.respond(context: ctx, status: answer.status, text: answer.body, contentType: answer.contentType, keepAlive: keepAlive)
            }
            return
        }
        let req = APIRequest(method: head.method.rawValue, path: path, query: query, body: body)
        let router = self.router
        let promise = context.eventLoop.makePromise(of: (Int, JSON).self)
        promise.completeWithTask { await router.handle(req, caller: caller) }
        promise.futureResult.whenSuccess { status, json in
            let (handler, ctx) = loopBound.value
            handler.respond(context: ctx, status: status, json: json, keepAlive: keepAlive)
        }
    }

    /// `GET /v1/apps/ID/events`: the answer's head and lines are written by the sink as the
    /// agent sends them; the connection stays open until the client goes, a newer stream
    /// replaces it or drowsed stops.
    private func openEventStream(_ app: String, caller: Caller, context: ChannelHandlerContext) {
        let sink = ChannelEventSink(channel: context.channel)
        stream = (app, sink)
        let router = self.router
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let promise = context.eventLoop.makePromise(of: APIError?.self)
        promise.completeWithTask { await router.openEventStream(app, caller: caller, sink: sink) }
        promise.futureResult.whenSuccess { error in
            guard let error else { return }
            let (handler, ctx) = loopBound.value
            handler.stream = nil
            handler.respond(context: ctx, status: error.status,
                            json: error.wire.json,
                            keepAlive: false)
        }
    }

    /// Path and query of a request target. Any text is accepted: `?=`, `?&&=`, `?=x` give an
    /// empty key (which no route reads) instead of indexing past an empty split.
    static func split(_ uri: String) -> (String, [String: String]) {
        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var query: [String: String] = [:]
        if parts.count == 2 {
            for pair in parts[1].split(separator: "&") {
                let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                query[String(kv[0])] = kv.count == 2 ? String(kv[1]) : ""
            }
        }
        return (String(parts[0]), query)
    }

    func respond(context: ChannelHandlerContext, status: Int, json: JSON, keepAlive: Bool) {
        respond(context: context, status: status, text: json.pretty + "\n", contentType: "application/json", keepAlive: keepAlive)
    }

    func respond(context: ChannelHandlerContext, status: Int, text: String, contentType: String, keepAlive: Bool) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: contentType)
        headers.add(name: "Content-Length", value: String(text.utf8.count))
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status), headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        var buf = context.channel.allocator.buffer(capacity: text.utf8.count)
        buf.writeString(text)
        context.write(wrapOutboundOut(.body(.byteBuffer(buf))), promise: nil)
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive {
            let ch = context.channel
            done.whenComplete { _ in ch.close(promise: nil) }
        } else if context.channel.isActive {
            armIdleTimer(context: context)
        }
    }
}

/// An app's event stream on its API connection: newline-delimited JSON in a chunked answer.
/// Every write happens on the channel's event loop, in the order the agent sent them.
final class ChannelEventSink: EventSink, @unchecked Sendable {
    let channel: Channel
    /// Touched only on `channel.eventLoop`.
    private var started = false

    init(channel: Channel) { self.channel = channel }

    func send(_ line: String) {
        channel.eventLoop.execute {
            guard self.channel.isActive else { return }
            self.startIfNeeded()
            var buf = self.channel.allocator.buffer(capacity: line.utf8.count + 1)
            buf.writeString(line)
            buf.writeInteger(UInt8(ascii: "\n"))
            self.channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(buf)), promise: nil)
        }
    }

    func close() {
        channel.eventLoop.execute {
            if self.started, self.channel.isActive {
                self.channel.writeAndFlush(HTTPServerResponsePart.end(nil)).whenComplete { _ in self.channel.close(promise: nil) }
            } else {
                self.channel.close(promise: nil)
            }
        }
    }

    private func startIfNeeded() {
        guard !started else { return }
        started = true
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/x-ndjson")
        headers.add(name: "Cache-Control", value: "no-store")
        channel.write(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers)), promise: nil)
    }
}
