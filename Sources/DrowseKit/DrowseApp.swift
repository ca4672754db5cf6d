#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import DrowseCore
import DrowsePOSIX
import Synchronization

/// A resident app's connection to drowsed (the lifecycle API over its Unix socket).
///
///     let app = DrowseApp()
///     for try await event in app.events {
///         …
///         try await app.complete(event, result: .newData)
///     }
///
/// Every call opens its own connection on a thread of its own; `events` keeps one connection
/// open on a reader thread and reconnects (0.1 s doubling to 5 s) when drowsed goes away, so a
/// restart of drowsed is survived.
public final class DrowseApp: Sendable {
    /// The app's id (from `DROWSE_APP` when not given).
    public let app: String
    /// drowsed's API socket (`DROWSE_SOCKET`, else /run/drowse/drowse.sock).
    public let socket: String
    /// Seconds a request/response call waits for an answer.
    let timeout: Double

    private struct TaskRecord {
        var handler: @Sendable () -> Void
        /// Being ended, or ended by the library: no longer counted as open.
        var ending = false
        /// The library ended it after its expiration handler; kept so that the app's own
        /// `endBackgroundTask` later is a no-op rather than a second end.
        var endedByLibrary = false
    }
    private let tasks = Mutex<[BackgroundTaskID: TaskRecord]>([:])
    /// `task-expiring` events that arrived before `beginBackgroundTask` had the task's id back
    /// (drowsed warns at once when the allowance has less left than the warning time).
    private let earlyExpiry = Mutex<Set<BackgroundTaskID>>([])

    public init(app: String? = nil, socket: String? = nil) {
        self.app = app ?? Self.environment("DROWSE_APP") ?? ""
        self.socket = socket ?? Self.environment("DROWSE_SOCKET") ?? "/run/drowse/drowse.sock"
        timeout = 30
    }

    static func environment(_ name: String) -> String? {
        guard let v = getenv(name) else { return nil }
        let s = String(cString: v)
        return s.isEmpty ? nil : s
    }

    // MARK: Events

    /// The app's events, in order, as drowsed delivers them. Each access opens a new stream (and
    /// drowsed closes the previous one of this app), so keep one consumer. The stream ends with an
    /// error only when drowsed refuses it (unknown app, not allowed); a closed or refused
    /// connection is retried. `task-expiring` events run the expiration handler of the task first.
    public var events: AsyncThrowingStream<DrowseEvent, Error> {
        let (stream, continuation) = AsyncThrowingStream<DrowseEvent, Error>.makeStream()
        guard !app.isEmpty else {
            continuation.finish(throwing: DrowseError(status: 0, code: "no_app", message: "no app id: pass app: or set DROWSE_APP"))
            return stream
        }
        let reader = EventReader(socket: socket, target: "/v1/apps/\(Self.pathComponent(app))/events")
        continuation.onTermination = { _ in reader.cancel() }
        KitThread.detach { [self] in
            reader.run(
                deliver: { event in
                    if event.kind == .taskExpiring, let task = event.task { self.expiring(task) }
                    continuation.yield(event)
                },
                finish: { error in continuation.finish(throwing: error) })
        }
        return stream
    }

    /// Records the result of an event (fetch, notification, transfers). An event never completed
    /// counts as failed at its deadline.
    public func complete(_ event: DrowseEvent, result: DrowseResult) async throws {
        try await complete(eventID: event.id, result: result)
    }

    public func complete(eventID: String, result: DrowseResult) async throws {
        _ = try await call("POST", "/v1/apps/\(Self.pathComponent(app))/events/\(Self.pathComponent(eventID))/complete",
                           body: .object([("result", .string(result.rawValue))]))
    }

    // MARK: Background tasks

    /// Begins a finite background task (iOS's `beginBackgroundTask(withName:expirationHandler:)`).
    /// `expirationHandler` runs when drowsed warns that the app's background time runs out; end
    /// the task there. If the handler returns without having called `endBackgroundTask`, the
    /// library ends the task itself. Throws `DrowseError` with code `no_background_time` when the
    /// allowance is used up.
    public func beginBackgroundTask(name: String? = nil, expirationHandler: @escaping @Sendable () -> Void) async throws
        -> BackgroundTaskID
    {
        let answer = try await call("POST", "/v1/apps/\(Self.pathComponent(app))/tasks",
                                    body: .object(name.map { [("name", .string($0))] } ?? []))
        guard let id = APIWire.Task(json: answer).id else { throw DrowseError.malformed("the new task has no id") }
        let task = BackgroundTaskID(id)
        tasks.withLock { $0[task] = TaskRecord(handler: expirationHandler) }
        if earlyExpiry.withLock({ $0.remove(task) }) != nil { expiring(task) }
        return task
    }

    /// Ends a task begun with `beginBackgroundTask`. Ending one the library already ended (after
    /// its expiration handler) does nothing.
    public func endBackgroundTask(_ task: BackgroundTaskID) async throws {
        let known = tasks.withLock { t -> Bool? in
            guard var r = t[task] else { return nil }
            if r.endedByLibrary { t[task] = nil }
            if r.ending { return false }
            r.ending = true
            t[task] = r
            return true
        }
        if known == false { return }
        do {
            _ = try await call("POST", "/v1/apps/\(Self.pathComponent(app))/tasks/\(Self.pathComponent(task.rawValue))/end")
            _ = tasks.withLock { $0.removeValue(forKey: task) }
        } catch {
            // Not ended: the caller may try again.
            tasks.withLock { if $0[task] != nil { $0[task]!.ending = false } }
            throw error
        }
    }

    /// Seconds of background time left to the app's open tasks; 0 when none is open.
    public var backgroundTimeRemaining: Double {
        get async throws {
            let open = tasks.withLock { t in t.filter { !$0.value.ending }.map(\.key) }
            for task in open.sorted(by: { $0.rawValue < $1.rawValue }) {
                if let left = try await timeRemaining(task) { return left }
            }
            return 0
        }
    }

    /// The app's time remaining as `task` sees it; nil (and forgotten) when it is no longer open.
    private func timeRemaining(_ task: BackgroundTaskID) async throws(DrowseError) -> Double? {
        let answer: Result<JSON, DrowseError>
        do {
            answer = .success(try await call("GET", "/v1/apps/\(Self.pathComponent(app))/tasks/\(Self.pathComponent(task.rawValue))"))
        } catch {
            answer = .failure(error)
        }
        switch answer {
        case .success(let j) where APIWire.Task(json: j).state == "open":
            return max(0, APIWire.Task(json: j).timeRemaining ?? 0)
        case .success:
            _ = tasks.withLock { $0.removeValue(forKey: task) }
            return nil
        case .failure(let e):
            guard e.status == 404 else { throw e }
            _ = tasks.withLock { $0.removeValue(forKey: task) }
            return nil
        }
    }

    /// A task-expiring event for `task`: its handler runs off the reader thread, then the task is
    /// ended unless the handler did.
    private func expiring(_ task: BackgroundTaskID) {
        let (known, handler) = tasks.withLock { t in (t[task] != nil, t[task].flatMap { $0.ending ? nil : $0.handler }) }
        if !known {
            // Not ours yet: `beginBackgroundTask` is still waiting for its answer. It runs this
            // when it has the id (the set holds at most the tasks being begun, plus strays).
            earlyExpiry.withLock { if $0.count < 256 { $0.insert(task) } }
            if tasks.withLock({ $0[task] != nil }), earlyExpiry.withLock({ $0.remove(task) }) != nil { expiring(task) }
            return
        }
        guard let handler else { return }
        Task.detached { [self] in
            handler()
            let mine = tasks.withLock { t -> Bool in
                guard var r = t[task], !r.ending else { return false }
                r.ending = true
                t[task] = r
                return true
            }
            guard mine else { return }  // the handler ended it (or is ending it)
            do {
                _ = try await call("POST", "/v1/apps/\(Self.pathComponent(app))/tasks/\(Self.pathComponent(task.rawValue))/end")
                tasks.withLock { if $0[task] != nil { $0[task]!.endedByLibrary = true } }
            } catch {
                // drowsed ends it at the deadline anyway; the app may still end it itself.
                tasks.withLock { if $0[task] != nil { $0[task]!.ending = false } }
            }
        }
    }

    // MARK: Transfers

    /// Queues a background download (docs/contract.md, "Transfers"): `to` is where the verified file goes
    /// (absolute), `sha256` the expected digest in hex. When the session's transfers have
    /// finished, a `transfers` event arrives.
    public func download(url: String, to: String? = nil, sha256: String? = nil, session: String = "default") async throws
        -> DrowseTransfer
    {
        try await createTransfer([
            ("kind", "download"), ("url", .string(url)), ("app", .string(app)), ("session", .string(session)),
            ("to", JSON(to)), ("sha256", JSON(sha256)),
        ])
    }

    /// Queues a background upload of `file` (absolute path) to `url`.
    public func upload(file: String, url: String, session: String = "default") async throws -> DrowseTransfer {
        try await createTransfer([
            ("kind", "upload"), ("url", .string(url)), ("app", .string(app)), ("session", .string(session)), ("file", .string(file)),
        ])
    }

    public func transfer(_ id: String) async throws -> DrowseTransfer {
        let j = try await call("GET", "/v1/transfers/\(Self.pathComponent(id))")
        guard let t = DrowseTransfer(j) else { throw DrowseError.malformed("a transfer without an id") }
        return t
    }

    /// This app's transfers.
    /// drowsed answers a page at a time; this follows the pages until one is not full.
    public func transfers() async throws -> [DrowseTransfer] {
        let page = 500
        var all: [DrowseTransfer] = []
        var after: String?
        while true {
            var path = "/v1/transfers?app=\(Self.pathComponent(app))&limit=\(page)"
            if let after { path += "&after=\(Self.pathComponent(after))" }
            let j = try await call("GET", path)
            guard let list = j.arrayValue else { throw DrowseError.malformed("the transfer list is not an array") }
            let items = list.compactMap(DrowseTransfer.init)
            all += items
            guard list.count == page, let last = items.last?.id, last != after else { return all }
            after = last
        }
    }

    private func createTransfer(_ fields: [(String, JSON)]) async throws -> DrowseTransfer {
        let j = try await call("POST", "/v1/transfers", body: .object(fields))
        guard let t = DrowseTransfer(j) else { throw DrowseError.malformed("the new transfer has no id") }
        return t
    }

    // MARK: Plumbing

    func call(_ method: String, _ target: String, body: JSON? = nil) async throws(DrowseError) -> JSON {
        guard !app.isEmpty else { throw DrowseError(status: 0, code: "no_app", message: "no app id: pass app: or set DROWSE_APP") }
        let socket = socket, timeout = timeout
        return try await KitThread.run { () throws(DrowseError) -> JSON in
            try APICall.json(socket: socket, method: method, target: target, body: body, timeout: timeout)
        }
    }

    /// Percent-encodes what is not an unreserved URI character (RFC 3986).
    static func pathComponent(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                out += "%" + String(decoding: [hex[Int(b >> 4)], hex[Int(b & 15)]], as: UTF8.self)
            }
        }
        return out
    }
}
