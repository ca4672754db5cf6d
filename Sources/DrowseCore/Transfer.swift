/// A background transfer as stored and shown (docs/contract.md, "Transfers").
package struct Transfer: Sendable, Equatable {
    package enum Kind: String, Sendable { case download, upload }
    package enum State: String, Sendable {
        case waiting, running, paused, completed, failed, cancelled
        package var isFinished: Bool { self == .completed || self == .failed || self == .cancelled }
    }

    package var id: String
    package var app: String
    package var session: String
    package var kind: Kind
    package var state: State
    package var url: String
    /// Where the user asked the file to go (`--to`).
    package var destination: String?
    package var sha256: String?
    package var bytesDone: Int64
    package var bytesTotal: Int64?
    package var reason: String?
    /// Where a finished download is now.
    package var location: String?
    package var etag: String?
    package var lastModified: String?
    package var createdAt: Double
    package var finishedAt: Double?
    /// Whether the finished transfer has been handed to the app's events handler.
    package var delivered: Bool
    /// Uploads: the file being sent.
    package var source: String?
    /// Uploads: the protocol asked for, then the one found (`auto` resolves on first contact).
    package var uploadProtocol: String?
    /// Uploads: the server-side upload resource, once created (resumes ask it for the offset).
    package var uploadURL: String?
    /// Unix time after which an unfinished transfer fails (`--timeout-resource`, default 7 days).
    package var timeoutAt: Double?
    /// Uploads, while running: bytes handed to the network. Not stored.
    package var bytesSent: Int64?
    /// Uploads: bytes the server confirmed (while running, `bytes_done` shows the live progress,
    /// which may run ahead of this). Not stored: it is what `bytesDone` holds in the store.
    package var bytesConfirmed: Int64?
    /// Conditions it waits for.
    package var requirements = TransferRequirements()
    /// Who asked for it; a finished file at `--to` is handed to them (nil: root).
    package var ownerUID: UInt32?
    package var ownerGID: UInt32?
    /// Attempts started, retries scheduled after transient failures, and when the next runs.
    /// Uploads: the media type given with `--content-type` (tus `filetype`, a PUT's Content-Type).
    package var contentType: String?
    package var attempts = 0
    package var retries = 0
    package var nextRetryAt: Double?

    package init(id: String, app: String, session: String, kind: Kind, url: String, destination: String?, sha256: String?, createdAt: Double) {
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

    /// No real size reaches 2⁵³ bytes (8 PiB); above it sizes lose precision as JSON numbers
    /// and offset arithmetic (`done + chunk`) comes near Int64 overflow.
    package static let maxBytes: Int64 = 1 << 53

    /// Why this transfer cannot be one drowsed wrote, or nil when it can. Checked when a stored
    /// row is loaded: `state.db` can be edited (or damaged), and a value such as a timeout
    /// of 1e300 would otherwise be turned into a timer on every start.
    package var problem: String? {
        if id.isEmpty || app.isEmpty { return "id or app is empty" }
        if !URLParts.isTransferURL(url) { return "url '\(url)' is not http or https" }
        if !TimeLimits.isValidUnixTime(createdAt) { return "created_at \(createdAt) is not a Unix time" }
        if let f = finishedAt, !TimeLimits.isValidUnixTime(f) { return "finished_at \(f) is not a Unix time" }
        if let t = timeoutAt, !TimeLimits.isValidUnixTime(t) { return "timeout_at \(t) is not a Unix time" }
        if !(0...Self.maxBytes).contains(bytesDone) { return "bytes_done \(bytesDone) is not a byte count" }
        if let n = bytesTotal, !(0...Self.maxBytes).contains(n) { return "bytes_total \(n) is not a byte count" }
        return nil
    }

    /// This transfer made safe to keep and show: failed with `reason`, every bad value dropped.
    /// What was wrong stays readable in `reason`; nothing in it can trap or arm a timer.
    package func refused(_ why: String) -> Transfer {
        var t = self
        t.state = .failed
        t.reason = "refused: the stored transfer is invalid (\(why))"
        if !TimeLimits.isValidUnixTime(t.createdAt) { t.createdAt = 0 }
        if let f = t.finishedAt, !TimeLimits.isValidUnixTime(f) { t.finishedAt = nil }
        t.timeoutAt = nil
        t.nextRetryAt = nil
        if !(0...Self.maxBytes).contains(t.bytesDone) { t.bytesDone = 0 }
        if let n = t.bytesTotal, !(0...Self.maxBytes).contains(n) { t.bytesTotal = nil }
        return t
    }

    /// The contract's `--json` shape. `wall`: the wall clock's skew from drowsed's timeline
    /// (times are shown in wall time; docs/design.md, "Time on a board without a real-time clock").
    package func json(wall skew: Double) -> JSON { wire(wall: skew).json }

    /// The API's `Transfer`, times in wall time.
    package func wire(wall skew: Double) -> APIWire.Transfer {
        APIWire.Transfer(
            id: id, app: app, session: session, kind: kind.rawValue, state: state.rawValue, url: url, bytesDone: bytesDone,
            bytesTotal: bytesTotal, reason: reason, location: location, sha256: sha256, destination: destination, source: source,
            uploadProtocol: uploadProtocol, createdAt: createdAt + skew, finishedAt: finishedAt.map { $0 + skew },
            timeoutAt: timeoutAt.map { $0 + skew }, discretionary: requirements.discretionary, noCellular: requirements.noCellular,
            requiresPower: requirements.requiresPower, bytesSent: bytesSent, bytesConfirmed: bytesConfirmed, uploadURL: uploadURL,
            contentType: contentType, attempts: attempts, retries: retries, nextRetryAt: nextRetryAt.map { $0 + skew })
    }
}

/// A transfer session of an app: what its events handler is told about together.
package struct SessionKey: Hashable, Sendable {
    package var app: String
    package var session: String

    package init(app: String, session: String) {
        self.app = app
        self.session = session
    }
}
