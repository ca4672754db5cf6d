/// A background transfer as stored and shown (SPEC.md, "Transfers").
public struct Transfer: Sendable, Equatable {
    public enum Kind: String, Sendable { case download, upload }
    public enum State: String, Sendable {
        case waiting, running, paused, completed, failed, cancelled
        public var isFinished: Bool { self == .completed || self == .failed || self == .cancelled }
    }

    public var id: String
    public var app: String
    public var session: String
    public var kind: Kind
    public var state: State
    public var url: String
    /// Where the user asked the file to go (`--to`).
    public var destination: String?
    public var sha256: String?
    public var bytesDone: Int64
    public var bytesTotal: Int64?
    public var reason: String?
    /// Where a finished download is now.
    public var location: String?
    public var etag: String?
    public var lastModified: String?
    public var createdAt: Double
    public var finishedAt: Double?
    /// Whether the finished transfer has been handed to the app's events handler.
    public var delivered: Bool
    /// Uploads: the file being sent.
    public var source: String?
    /// Uploads: the protocol asked for, then the one found (`auto` resolves on first contact).
    public var uploadProtocol: String?
    /// Uploads: the server-side upload resource, once created (resumes ask it for the offset).
    public var uploadURL: String?
    /// Unix time after which an unfinished transfer fails (`--timeout-resource`, default 7 days).
    public var timeoutAt: Double?
    /// Uploads, while running: bytes handed to the network. Not stored.
    public var bytesSent: Int64?
    /// Uploads: bytes the server confirmed (while running, `bytes_done` shows the live progress,
    /// which may run ahead of this). Not stored: it is what `bytesDone` holds in the store.
    public var bytesConfirmed: Int64?
    /// Conditions it waits for.
    public var requirements = TransferRequirements()
    /// Who asked for it; a finished file at `--to` is handed to them (nil: root).
    public var ownerUID: UInt32?
    public var ownerGID: UInt32?
    /// Attempts started, retries scheduled after transient failures, and when the next runs.
    public var attempts = 0
    public var retries = 0
    public var nextRetryAt: Double?

    public init(id: String, app: String, session: String, kind: Kind, url: String, destination: String?, sha256: String?, createdAt: Double) {
        self.id = id
        self.app = app
        self.session = session
        self.kind = kind
        self.state = .waiting
        self.url = url
        self.destination = destination
        self.sha256 = sha256
        self.bytesDone = 0
        self.bytesTotal = nil
        self.reason = nil
        self.location = nil
        self.createdAt = createdAt
        self.finishedAt = nil
        self.delivered = false
        self.source = nil
        self.uploadProtocol = nil
        self.uploadURL = nil
        self.timeoutAt = createdAt + 7 * 86400
    }

    /// The SPEC's `--json` shape.
    public var json: JSON {
        [
            "id": .string(id), "app": .string(app), "session": .string(session), "kind": .string(kind.rawValue),
            "state": .string(state.rawValue), "url": .string(url), "bytes_done": JSON(bytesDone),
            "bytes_total": JSON(bytesTotal), "reason": JSON(reason), "location": JSON(location),
            "sha256": JSON(sha256), "destination": JSON(destination), "source": JSON(source),
            "protocol": JSON(uploadProtocol), "created_at": .number(createdAt), "finished_at": JSON(finishedAt),
            "timeout_at": JSON(timeoutAt), "discretionary": .bool(requirements.discretionary),
            "no_cellular": .bool(requirements.noCellular), "requires_power": .bool(requirements.requiresPower),
            "bytes_sent": JSON(bytesSent), "bytes_confirmed": JSON(bytesConfirmed), "upload_url": JSON(uploadURL),
            "attempts": JSON(attempts), "retries": JSON(retries), "next_retry_at": JSON(nextRetryAt),
        ]
    }
}
