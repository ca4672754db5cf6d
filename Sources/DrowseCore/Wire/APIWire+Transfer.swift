extension APIWire {
    /// `Transfer`: a download or upload, as `/v1/transfers` answers it and as a transfers event
    /// carries it (docs/contract.md).
    package struct Transfer: WireBody, Sendable, Equatable {
        package var id: String?
        package var app: String?
        package var session: String?
        /// download or upload (kept as text).
        package var kind: String?
        /// waiting, running, paused, completed, failed or cancelled (kept as text).
        package var state: String?
        package var url: String?
        package var bytesDone: Int64?
        package var bytesTotal: Int64?
        package var reason: String?
        package var location: String?
        package var sha256: String?
        package var destination: String?
        package var source: String?
        package var uploadProtocol: String?
        /// Wall-clock Unix times, as are the other `…At`.
        package var createdAt: Double?
        package var finishedAt: Double?
        package var timeoutAt: Double?
        package var discretionary: Bool?
        package var noCellular: Bool?
        package var requiresPower: Bool?
        package var bytesSent: Int64?
        package var bytesConfirmed: Int64?
        package var uploadURL: String?
        package var contentType: String?
        package var attempts: Int?
        package var retries: Int?
        package var nextRetryAt: Double?

        package init(
            id: String, app: String, session: String, kind: String, state: String, url: String, bytesDone: Int64, bytesTotal: Int64?,
            reason: String?, location: String?, sha256: String?, destination: String?, source: String?, uploadProtocol: String?,
            createdAt: Double, finishedAt: Double?, timeoutAt: Double?, discretionary: Bool, noCellular: Bool, requiresPower: Bool,
            bytesSent: Int64?, bytesConfirmed: Int64?, uploadURL: String?, contentType: String?, attempts: Int?, retries: Int?,
            nextRetryAt: Double?
        ) {
            self.id = id
            self.app = app
            self.session = session
            self.kind = kind
            self.state = state
            self.url = url
            self.bytesDone = bytesDone
            self.bytesTotal = bytesTotal
            self.reason = reason
            self.location = location
            self.sha256 = sha256
            self.destination = destination
            self.source = source
            self.uploadProtocol = uploadProtocol
            self.createdAt = createdAt
            self.finishedAt = finishedAt
            self.timeoutAt = timeoutAt
            self.discretionary = discretionary
            self.noCellular = noCellular
            self.requiresPower = requiresPower
            self.bytesSent = bytesSent
            self.bytesConfirmed = bytesConfirmed
            self.uploadURL = uploadURL
            self.contentType = contentType
            self.attempts = attempts
            self.retries = retries
            self.nextRetryAt = nextRetryAt
        }

        package var json: JSON {
            .object([
                ("id", JSON(id)), ("app", JSON(app)), ("session", JSON(session)), ("kind", JSON(kind)),
                ("state", JSON(state)), ("url", JSON(url)), ("bytes_done", JSON(bytesDone)),
                ("bytes_total", JSON(bytesTotal)), ("reason", JSON(reason)), ("location", JSON(location)),
                ("sha256", JSON(sha256)), ("destination", JSON(destination)), ("source", JSON(source)),
                ("protocol", JSON(uploadProtocol)), ("created_at", JSON(createdAt)), ("finished_at", JSON(finishedAt)),
                ("timeout_at", JSON(timeoutAt)), ("discretionary", JSON(discretionary)),
                ("no_cellular", JSON(noCellular)), ("requires_power", JSON(requiresPower)),
                ("bytes_sent", JSON(bytesSent)), ("bytes_confirmed", JSON(bytesConfirmed)), ("upload_url", JSON(uploadURL)),
                ("content_type", JSON(contentType)), ("attempts", JSON(attempts)), ("retries", JSON(retries)), ("next_retry_at", JSON(nextRetryAt)),
            ])
        }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
            app = r.string("app")
            session = r.string("session")
            kind = r.string("kind")
            state = r.string("state")
            url = r.string("url")
            bytesDone = r.int64("bytes_done")
            bytesTotal = r.int64("bytes_total")
            reason = r.string("reason")
            location = r.string("location")
            sha256 = r.string("sha256")
            destination = r.string("destination")
            source = r.string("source")
            uploadProtocol = r.string("protocol")
            createdAt = r.double("created_at")
            finishedAt = r.double("finished_at")
            timeoutAt = r.double("timeout_at")
            discretionary = r.bool("discretionary")
            noCellular = r.bool("no_cellular")
            requiresPower = r.bool("requires_power")
            bytesSent = r.int64("bytes_sent")
            bytesConfirmed = r.int64("bytes_confirmed")
            uploadURL = r.string("upload_url")
            contentType = r.string("content_type")
            attempts = r.int("attempts")
            retries = r.int("retries")
            nextRetryAt = r.double("next_retry_at")
        }
    }
}
