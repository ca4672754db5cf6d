/// Decides everything about one download attempt: where it resumes, what it asks for, whether
/// the server's answer may be appended to the bytes already held, and what an ending means.
/// Pure: the engine opens the part file, runs libcurl and writes bytes; it feeds in what
/// happened and carries out the actions, deciding nothing itself.
///
/// An attempt goes `start(partLength:)` → (`body` → `appended` / `writeFailed`)* → `ended`.
/// The rule it keeps: bytes are only ever appended to a part file when the server's answer
/// provably continues that same file at that same offset; anything else starts from zero
/// (never a splice of two versions).
package struct DownloadMachine: Sendable {
    /// The final response's headers (after any redirects), as far as they matter here.
    package struct Response: Sendable, Equatable {
        package var status: Int
        package var contentRange: String?
        package var contentLength: Int64?
        package var etag: String?
        package var lastModified: String?
        /// The raw `Retry-After` value (read only for a 429 or 503).
        package var retryAfter: String?

        package init(status: Int = 0, contentRange: String? = nil, contentLength: Int64? = nil,
                    etag: String? = nil, lastModified: String? = nil, retryAfter: String? = nil) {
            self.status = status
            self.contentRange = contentRange
            self.contentLength = contentLength
            self.etag = etag
            self.lastModified = lastModified
            self.retryAfter = retryAfter
        }
    }

    /// How libcurl ended the attempt, translated from its CURLcode by the engine.
    package enum Ending: Sendable, Equatable {
        case ok
        /// The server answered with this HTTP error status (libcurl's FAILONERROR).
        case httpError(Int)
        /// A redirect (or the URL) to a scheme other than http or https.
        case unsupportedProtocol
        case tooManyRedirects
        case malformedURL
        case tlsVerification(String)
        case stalled(String)
        /// Anything else libcurl reports (connection reset, DNS, …), with its message.
        case other(String)
    }

    /// What becomes of the part file when an attempt fails.
    package enum PartFile: Sendable, Equatable {
        /// Commit every byte written: the next attempt resumes after them.
        case keep
        /// Cut back to the last commit: a full disk gets the uncommitted bytes back.
        case rollBackToCommit
        /// Cut to zero and report zero bytes: they must not be continued.
        case discard
    }

    package struct Failure: Sendable, Equatable, CustomStringConvertible {
        package var reason: String
        package var transient: Bool
        package var noSpace: Bool
        package var part: PartFile
        /// The server asked for the next attempt to wait (429 or 503 with a valid `Retry-After`).
        package var retryAfter: RetryAfter?

        package init(_ reason: String, transient: Bool, noSpace: Bool = false, part: PartFile, retryAfter: RetryAfter? = nil) {
            self.reason = reason
            self.transient = transient
            self.noSpace = noSpace
            self.part = part
            self.retryAfter = retryAfter
        }

        package var description: String { reason }
    }

    package enum Action: Sendable, Equatable {
        /// Cut the part file to this length: bytes past the committed offset may be torn.
        case truncate(to: Int64)
        /// Start over at byte zero: cut the part file to 0, reset any running hash and report
        /// zero bytes committed (no size, no validators).
        case restart
        /// Send the request: `range` asks for the bytes from that offset on (`Range: bytes=N-`),
        /// `ifRange` is the validator to send in `If-Range`. Both nil: the whole file.
        case request(range: Int64?, ifRange: String?)
        /// Write the body bytes to the end of the part file, then report `appended`.
        case append
        /// Stop the transfer now (the write callback returns 0); `ended` reports the reason.
        case abort
        /// The part file holds every byte: verify it and give it its final name.
        case finish(bytes: Int64)
        case fail(Failure)
    }

    /// Bytes in the part file this attempt may build on.
    package private(set) var offset: Int64
    /// The file's size, once known (announced by the server or learnt on an earlier attempt).
    package private(set) var total: Int64?
    /// Validators of the version being downloaded; recorded with each commit.
    package private(set) var etag: String?
    package private(set) var lastModified: String?
    /// The final response was checked and accepted.
    package private(set) var validated = false
    /// The byte cap for a body whose length was not announced.
    package let maxUnknownSize: Int64
    /// Why the attempt was aborted, reported at `ended`.
    var pending: Failure?

    /// `committed`: bytes recorded as durable by an earlier attempt; `total`, `etag` and
    /// `lastModified`: what that attempt learnt (or a size announced in advance).
    package init(committed: Int64, total: Int64?, etag: String?, lastModified: String?, maxUnknownSize: Int64) {
        offset = max(0, committed)
        self.total = total
        self.etag = etag
        self.lastModified = lastModified
        self.maxUnknownSize = maxUnknownSize
    }

    /// The attempt begins with a part file of `partLength` bytes on disk.
    package mutating func start(partLength: Int64) -> [Action] {
        var actions: [Action] = []
        if partLength < offset {
            // Shorter than what was committed: those bytes are gone, the rest cannot be trusted.
            offset = 0
            actions.append(.restart)
        } else if partLength > offset {
            // Anything past the committed offset may be torn (docs/design.md, Durability).
            actions.append(.truncate(to: offset))
        }
        if let total, offset == total, offset > 0 {
            // Every byte was committed before a restart: only the finish is left.
            validated = true
            return actions + [.finish(bytes: offset)]
        }
        guard offset > 0 else { return actions + [.request(range: nil, ifRange: nil)] }
        // If-Range: the server sends the rest only if the file is unchanged, else all of it (200).
        // A weak ETag may not be used there; Last-Modified may.
        let validator = etag.flatMap { $0.hasPrefix("W/") ? nil : $0 } ?? lastModified
        return actions + [.request(range: offset, ifRange: validator)]
    }

    /// `count` body bytes arrived, belonging to `response` (checked on the first of them).
    package mutating func body(_ count: Int, of response: Response) -> [Action] {
        if pending != nil { return [.abort] }
        var actions: [Action] = []
        if !validated {
            actions = validate(response)
            if pending != nil { return actions }
        }
        let n = Int64(count)
        if let total, offset + n > total {
            // libcurl does not stop a chunked body that runs past the announced size.
            return actions + abort(Failure("server sent more than the announced \(total) bytes", transient: true, part: .discard))
        }
        if total == nil, offset + n > maxUnknownSize {
            // Trying again would only fill the disk again: a permanent failure.
            return actions + abort(Failure(
                "the server sent more than \(maxUnknownSize) bytes without announcing a length ([transfers] max_unknown_size)",
                transient: false, part: .discard))
        }
        return actions + [.append]
    }

    /// The bytes of the last `.append` are in the part file.
    package mutating func appended(_ count: Int) {
        offset += Int64(count)
    }

    /// Writing the bytes of an `.append` failed.
    package mutating func writeFailed(_ reason: String, noSpace: Bool) -> [Action] {
        abort(Failure(reason, transient: true, noSpace: noSpace, part: noSpace ? .rollBackToCommit : .keep))
    }

    /// libcurl ended the attempt; `response` holds the final response's headers, if any came.
    package mutating func ended(_ ending: Ending, response: Response) -> [Action] {
        if let pending { return [.fail(pending)] }
        switch ending {
        case .ok:
            // A body-less answer (an empty file, or a 200 with no bytes) is checked here.
            var actions: [Action] = []
            if !validated {
                actions = validate(response)
                if let pending { return [.fail(pending)] }
            }
            if let total, offset != total {
                // A short body is resumable: keep what arrived.
                return actions + [.fail(Failure("body ended at \(offset) of \(total) bytes", transient: true, part: .keep))]
            }
            validated = true
            return actions + [.finish(bytes: offset)]
        case .httpError(416) where offset > 0:
            // "bytes */N" where N is what we hold: the file was complete already.
            if let n = Self.unsatisfiedLength(response.contentRange), n == offset, total == nil || total == offset {
                validated = true
                total = offset
                return [.finish(bytes: offset)]
            }
            return fail("server refused the range (HTTP 416)", transient: true, discard: true)
        case .httpError(let code) where code == 429 || code == 503:
            // Overloaded or rate-limited: the server may say when to come back (RFC 9110 §10.2.3);
            // the retry is then not before that, whatever the backoff would say. Garbage is ignored.
            let after = response.status == code ? response.retryAfter.flatMap(RetryAfter.parse) : nil
            let note = after.map { " (Retry-After: \($0.description))" } ?? ""
            return [.fail(Failure("HTTP \(code)\(note)", transient: true, part: .keep, retryAfter: after))]
        case .httpError(let code):
            return fail("HTTP \(code)", transient: code >= 500 || code == 408)
        case .unsupportedProtocol:
            return fail("refused: redirect to a URL that is not http or https", transient: false)
        case .tooManyRedirects:
            return fail("too many redirects", transient: false)
        case .malformedURL:
            return fail("malformed URL", transient: false)
        case .tlsVerification(let message):
            return fail("TLS verification failed: \(message)", transient: false)
        case .stalled(let message):
            return fail("stalled: \(message)", transient: true)
        case .other(let message):
            return fail(message, transient: true)
        }
    }

    /// Checks the final response before its first body byte is written.
    mutating func validate(_ r: Response) -> [Action] {
        validated = true
        var actions: [Action] = []
        switch r.status {
        case 206:
            guard offset > 0, let cr = r.contentRange, let parsed = ContentRange.parse(cr) else {
                return abort(Failure("server sent 206 with a missing or bad Content-Range", transient: true, part: .discard))
            }
            guard parsed.start == offset else {
                return abort(Failure("server resumed at byte \(parsed.start), not \(offset)", transient: true, part: .discard))
            }
            if let t = parsed.total, let known = total, t != known {
                return abort(Failure("file size changed on the server (\(known) → \(t) bytes)", transient: true, part: .discard))
            }
            // The server should have answered 200 for a changed file (If-Range); some do not.
            // libcurl would splice their 206 onto the old bytes, so compare the validators here.
            if let etag, r.etag != etag {
                return abort(Failure("file changed on the server (ETag)", transient: true, part: .discard))
            }
            if etag == nil, let lm = lastModified, r.lastModified != lm {
                return abort(Failure("file changed on the server (Last-Modified)", transient: true, part: .discard))
            }
            total = parsed.total ?? total
        case 200:
            if offset > 0 {
                // The full body: the file changed or the server ignores ranges. Start over, never append.
                offset = 0
                actions.append(.restart)
            }
            total = r.contentLength
        default:
            return abort(Failure("unexpected HTTP status \(r.status)", transient: r.status >= 500, part: r.status >= 500 ? .keep : .discard))
        }
        etag = r.etag
        lastModified = r.lastModified
        return actions
    }

    mutating func abort(_ f: Failure) -> [Action] {
        pending = f
        return [.abort]
    }

    /// A failure that ends the attempt. A permanent one, or a response that must not be
    /// continued, leaves nothing to resume from.
    func fail(_ reason: String, transient: Bool, discard: Bool = false) -> [Action] {
        [.fail(Failure(reason, transient: transient, part: discard || !transient ? .discard : .keep))]
    }

    /// N from `bytes */N` (a 416's Content-Range).
    static func unsatisfiedLength(_ contentRange: String?) -> Int64? {
        guard let cr = contentRange?.trimmingSpaces(), cr.lowercased().hasPrefix("bytes ") else { return nil }
        let rest = String(cr.dropFirst(6)).trimmingSpaces()
        guard rest.hasPrefix("*/") else { return nil }
        return Int64(rest.dropFirst(2))
    }
}

/// `Content-Range: bytes START-END/TOTAL` (TOTAL may be `*`).
package struct ContentRange: Equatable, Sendable {
    package var start: Int64
    package var end: Int64
    package var total: Int64?

    package init(start: Int64, end: Int64, total: Int64?) {
        self.start = start
        self.end = end
        self.total = total
    }

    package static func parse(_ s: String) -> ContentRange? {
        let t = s.trimmingSpaces()
        guard t.lowercased().hasPrefix("bytes ") else { return nil }
        let rest = t.dropFirst(6)
        let parts = rest.split(separator: "/", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let range = parts[0].split(separator: "-", maxSplits: 1)
        guard range.count == 2, let a = Int64(range[0]), let b = Int64(range[1]), a <= b else { return nil }
        let total: Int64? = parts[1] == "*" ? nil : Int64(parts[1])
        if parts[1] != "*", total == nil { return nil }
        if let total, b >= total { return nil }
        return ContentRange(start: a, end: b, total: total)
    }
}
