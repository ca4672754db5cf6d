import DrowseCore

/// An event drowsed delivers to a resident app on its event stream.
public struct DrowseEvent: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable {
        case fetch
        case notification
        case transfers
        case taskExpiring = "task-expiring"
    }

    public var kind: Kind
    /// The event's id, used to complete it (`e7`).
    public var id: String
    /// Unix time by which a fetch, notification or transfers event must be completed.
    public var deadline: Double?
    /// Why a fetch happens (`window`, `manual`, …).
    public var reason: String?
    /// A notification's JSON payload.
    public var payload: DrowseJSON?
    /// The session of a transfers event.
    public var session: String?
    /// The finished transfers of a transfers event.
    public var transfers: [DrowseTransfer]
    /// The task a task-expiring event is about.
    public var task: BackgroundTaskID?
    /// When that task runs out (Unix time).
    public var expiresAt: Double?
    /// Seconds left of the app's background time when a task-expiring event was sent.
    public var timeRemaining: Double?
    /// The whole event line as received.
    public var json: DrowseJSON

    /// Whether drowsed waits for `complete(_:result:)` (every kind but task-expiring).
    public var needsCompletion: Bool { kind != .taskExpiring }

    public init(kind: Kind, id: String, deadline: Double? = nil, reason: String? = nil, payload: DrowseJSON? = nil,
                session: String? = nil, transfers: [DrowseTransfer] = [], task: BackgroundTaskID? = nil,
                expiresAt: Double? = nil, timeRemaining: Double? = nil, json: DrowseJSON = .null) {
        self.kind = kind
        self.id = id
        self.deadline = deadline
        self.reason = reason
        self.payload = payload
        self.session = session
        self.transfers = transfers
        self.task = task
        self.expiresAt = expiresAt
        self.timeRemaining = timeRemaining
        self.json = json
    }
}

/// The result of handling an event, as for a handler's exit status.
public enum DrowseResult: String, Sendable, Equatable, CaseIterable {
    case newData = "new-data"
    case noData = "no-data"
    case failed
}

/// A finite background task's id (`t3`).
public struct BackgroundTaskID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }
}

/// A background download or upload owned by drowsed (docs/contract.md, "Transfers").
public struct DrowseTransfer: Sendable, Equatable {
    public enum Kind: String, Sendable { case download, upload }
    public enum State: String, Sendable { case waiting, running, paused, completed, failed, cancelled }

    public var id: String
    public var app: String
    public var session: String
    /// nil when drowsed sent a kind or state this version does not know.
    public var kind: Kind?
    public var state: State?
    public var url: String
    public var bytesDone: Int64
    public var bytesTotal: Int64?
    /// Why it failed or waits.
    public var reason: String?
    /// Where a finished download's file is.
    public var location: String?
    /// Everything drowsed said about it.
    public var json: DrowseJSON

    /// Read through the API's `Transfer` (`APIWire`); nil without an id.
    init?(_ j: JSON) { self.init(APIWire.Transfer(json: j), j) }

    /// `t` as read from `j`; nil without an id.
    init?(_ t: APIWire.Transfer, _ j: JSON) {
        guard let id = t.id else { return nil }
        self.id = id
        app = t.app ?? ""
        session = t.session ?? "default"
        kind = t.kind.flatMap(Kind.init(rawValue:))
        state = t.state.flatMap(State.init(rawValue:))
        url = t.url ?? ""
        bytesDone = t.bytesDone ?? 0
        bytesTotal = t.bytesTotal
        reason = t.reason
        location = t.location
        json = DrowseJSON(j)
    }
}

/// A failure talking to drowsed: `status` is the HTTP status (0 when there was no answer) and
/// `code` the API's error code (`not_found`, `no_background_time`, …) or a local one
/// (`connect`, `protocol`, `no_app`).
public struct DrowseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var code: String
    public var message: String

    public init(status: Int, code: String, message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public var description: String { status > 0 ? "drowsed: \(message) (HTTP \(status), \(code))" : "drowsed: \(message)" }

    static func transport(_ message: String) -> DrowseError { DrowseError(status: 0, code: "connect", message: message) }
    static func malformed(_ message: String) -> DrowseError { DrowseError(status: 0, code: "protocol", message: message) }

    /// The error an answer carries (`{"error":{"code","message"}}`), or a plain one.
    static func answer(status: Int, body: [UInt8]) -> DrowseError {
        let e = (try? JSON.parse(bytes: body)).map(APIWire.Error.init(json:))
        return DrowseError(status: status, code: e?.code ?? "http_\(status)", message: e?.message ?? "HTTP \(status)")
    }
}
