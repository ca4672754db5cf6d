/// The upload protocols Drowse speaks.
package enum UploadProtocol: String, Sendable, CaseIterable {
    /// Discover: tus if the server says so, else the IETF draft, else a plain PUT.
    case auto
    /// draft-ietf-httpbis-resumable-upload, current interop version.
    case ietf
    /// The draft iOS 17's URLSession speaks (interop version 3, `Upload-Incomplete`).
    case ietf3 = "ietf-3"
    /// tus 1.0.0 with the creation, termination and checksum extensions.
    case tus
    /// A plain PUT of the whole file; a retry starts again from byte 0.
    case put
}

/// One HTTP request the upload engine should make.
package struct UploadRequest: Sendable, Equatable {
    package var method: String
    package var url: String
    package var headers: [(String, String)]
    /// Bytes of the file to send as the body, if any.
    package var body: Range<Int64>?
    /// Ask the engine for a checksum header of the body (tus checksum extension).
    package var checksum: Bool

    package static func == (a: UploadRequest, b: UploadRequest) -> Bool {
        a.method == b.method && a.url == b.url && a.body == b.body && a.checksum == b.checksum
            && a.headers.count == b.headers.count && zip(a.headers, b.headers).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
    }
}

/// What came back: the final status and headers (lower-cased names), plus any `Location`
/// from a 104 (Upload Resumption Supported) informational response.
package struct UploadResponse: Sendable {
    package var status: Int
    package var headers: [String: String]
    package var informationalLocation: String?
    /// The start of the response body (a server's own words for a refusal), if any.
    package var body: String?

    package init(status: Int, headers: [String: String], informationalLocation: String? = nil, body: String? = nil) {
        self.status = status
        self.headers = headers
        self.informationalLocation = informationalLocation
        self.body = body
    }

    /// " (server: …)" with the body's first line, for failure reasons; empty without a body.
    var serverSays: String {
        guard let body else { return "" }
        let line = body.split(whereSeparator: \.isNewline).first.map(String.init)?.trimmingSpaces() ?? ""
        return line.isEmpty ? "" : " (server: \(line.prefix(200)))"
    }
}

/// Decides every request of a resumable upload. Pure: the engine performs the requests and
/// feeds back responses; this never guesses an offset — before every resume it asks.
package struct UploadMachine: Sendable {
    package enum Action: Sendable, Equatable {
        case request(UploadRequest)
        /// The server-side upload resource is known: record it before sending data.
        case resource(url: String, protocol: UploadProtocol)
        /// `auto` settled on a protocol that has no resource (a plain PUT).
        case chose(UploadProtocol)
        /// An earlier resource the server would not resume: end it (DELETE) now that its
        /// replacement exists. Fire and forget.
        case abandon(url: String, protocol: UploadProtocol)
        /// The server confirmed this many bytes.
        case offset(Int64)
        case completed
        /// `retryAfter`: a 429 or 503 said when to come back (the retry is not before it).
        case failed(reason: String, transient: Bool, retryAfter: RetryAfter? = nil)
    }

    enum Phase: Sendable, Equatable {
        case discover, probeIETF, create, queryOffset, append(Int64), put, cancel, done
    }

    package static let ietfInteropVersion = 8
    package let target: String
    package let total: Int64
    package let fileName: String
    package private(set) var proto: UploadProtocol
    package private(set) var resource: String?
    var phase: Phase = .discover
    var tusChecksum = false
    /// A resource given up on in this attempt, to be ended once the new one exists.
    var abandoned: String?
    var replacedOnce = false
    /// tus `filetype` metadata.
    package var contentType = "application/octet-stream"
    /// The largest PATCH when the server wants checksums (the engine hashes each body first).
    package var checksumChunk: Int64 = 16 << 20
    /// Resolves a server's `Location` against the URL it answered (RFC 3986); nil refuses it.
    /// The engine gives libcurl's URL parser; the default joins plainly.
    package var resolveLocation: @Sendable (_ location: String, _ base: String) -> String? = { UploadMachine.join($0, to: $1) }

    package init(target: String, total: Int64, fileName: String, protocol proto: UploadProtocol, resource: String?) {
        self.target = target
        self.total = total
        self.fileName = fileName
        self.proto = proto
        self.resource = resource
    }

    /// The first request of an attempt (a fresh start or a resume).
    package mutating func start() -> [Action] {
        switch proto {
        case .auto:
            phase = .discover
            return [.request(UploadRequest(method: "OPTIONS", url: target, headers: [("Tus-Resumable", "1.0.0")], body: nil, checksum: false))]
        case .put:
            phase = .put
            return [.request(UploadRequest(method: "PUT", url: target, headers: [("Content-Type", contentType)], body: 0..<total, checksum: false))]
        case .tus where resource == nil:
            // Learn whether the server takes checksums before creating.
            phase = .discover
            return [.request(UploadRequest(method: "OPTIONS", url: target, headers: [("Tus-Resumable", "1.0.0")], body: nil, checksum: false))]
        case .tus, .ietf, .ietf3:
            return resource == nil ? create() : queryOffset()
        }
    }

    /// The request that ends the server-side upload when the transfer is cancelled, if any.
    package mutating func cancel() -> UploadRequest? {
        guard let resource else { return nil }
        phase = .cancel
        switch proto {
        case .tus: return UploadRequest(method: "DELETE", url: resource, headers: [("Tus-Resumable", "1.0.0")], body: nil, checksum: false)
        case .ietf, .ietf3: return UploadRequest(method: "DELETE", url: resource, headers: interopHeaders(), body: nil, checksum: false)
        default: return nil
        }
    }

    func interopHeaders() -> [(String, String)] {
        [("Upload-Draft-Interop-Version", proto == .ietf3 ? "3" : String(Self.ietfInteropVersion))]
    }

    /// `Upload-Complete: ?1` (current) or `Upload-Incomplete: ?0` (iOS 17's draft).
    func completeHeader(_ complete: Bool) -> (String, String) {
        proto == .ietf3 ? ("Upload-Incomplete", complete ? "?0" : "?1") : ("Upload-Complete", complete ? "?1" : "?0")
    }

    mutating func create() -> [Action] {
        phase = .create
        switch proto {
        case .tus:
            var headers = [("Tus-Resumable", "1.0.0"), ("Upload-Length", String(total))]
            // Some servers refuse an upload without `filetype` (and say so only at the next HEAD).
            var metadata = ["filetype " + Base64.encode(Array(contentType.utf8))]
            if !fileName.isEmpty { metadata.insert("filename " + Base64.encode(Array(fileName.utf8)), at: 0) }
            headers.append(("Upload-Metadata", metadata.joined(separator: ",")))
            return [.request(UploadRequest(method: "POST", url: target, headers: headers, body: nil, checksum: false))]
        default:
            // Create the resource without data, so the first byte goes out only once its URL is recorded.
            var headers = interopHeaders()
            headers.append(completeHeader(false))
            if proto != .ietf3 { headers.append(("Upload-Length", String(total))) }
            return [.request(UploadRequest(method: "POST", url: target, headers: headers, body: nil, checksum: false))]
        }
    }

    mutating func queryOffset() -> [Action] {
        phase = .queryOffset
        let headers = proto == .tus ? [("Tus-Resumable", "1.0.0")] : interopHeaders()
        return [.request(UploadRequest(method: "HEAD", url: resource!, headers: headers, body: nil, checksum: false))]
    }

    mutating func append(from offset: Int64) -> [Action] {
        phase = .append(offset)
        if proto == .tus {
            let end = tusChecksum ? min(total, offset + checksumChunk) : total
            return [.request(UploadRequest(
                method: "PATCH", url: resource!,
                headers: [("Tus-Resumable", "1.0.0"), ("Upload-Offset", String(offset)), ("Content-Type", "application/offset+octet-stream")],
                body: offset..<end, checksum: tusChecksum))]
        }
        var headers = interopHeaders()
        headers += [("Upload-Offset", String(offset)), completeHeader(true),
                    ("Content-Type", proto == .ietf3 ? "application/offset+octet-stream" : "application/partial-upload")]
        return [.request(UploadRequest(method: "PATCH", url: resource!, headers: headers, body: offset..<total, checksum: false))]
    }

    static func join(_ location: String, to target: String) -> String {
        if location.contains("://") { return location }
        guard let parts = URLParts.parse(target), let schemeEnd = target.firstRange(of: "://") else { return location }
        let afterScheme = target[schemeEnd.upperBound...]
        let authority = afterScheme.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let origin = parts.scheme + "://" + authority
        if location.hasPrefix("/") { return origin + location }
        var base = parts.path
        if let q = base.firstIndex(where: { $0 == "?" || $0 == "#" }) { base = String(base[..<q]) }
        if let slash = base.lastIndex(of: "/") { base = String(base[...slash]) } else { base = "/" }
        return origin + base + location
    }

    static func offset(_ r: UploadResponse) -> Int64? { r.headers["upload-offset"].flatMap { Int64($0.trimmingSpaces()) } }

    static func isTrue(_ v: String?) -> Bool { v?.trimmingSpaces() == "?1" }

    /// Feeds the response to the last request; returns what to do next.
    package mutating func handle(_ r: UploadResponse) -> [Action] {
        let actions = decide(r)
        // Overloaded or rate-limited: the server may say when to come back (RFC 9110 §10.2.3).
        guard r.status == 429 || r.status == 503, let after = r.headers["retry-after"].flatMap(RetryAfter.parse) else { return actions }
        return actions.map {
            guard case .failed(let reason, true, nil) = $0 else { return $0 }
            return .failed(reason: reason + " (Retry-After: \(after.description))", transient: true, retryAfter: after)
        }
    }

    mutating func decide(_ r: UploadResponse) -> [Action] {
        let s = r.status
        switch phase {
        case .discover:
            if r.headers["tus-resumable"] != nil || r.headers["tus-version"] != nil {
                proto = .tus
                let ext = (r.headers["tus-extension"] ?? "").split(separator: ",").map { String($0).trimmingSpaces() }
                let algs = (r.headers["tus-checksum-algorithm"] ?? "").split(separator: ",").map { String($0).trimmingSpaces().lowercased() }
                tusChecksum = ext.contains("checksum") && algs.contains("sha1")
                return resource == nil ? create() : queryOffset()
            }
            if proto == .tus { return fail("server does not speak tus (no Tus-Resumable in its OPTIONS answer)", transient: false) }
            // Not tus: try the IETF draft's creation, which a server without it answers some other way.
            proto = .ietf
            let actions = create()
            phase = .probeIETF
            return actions
        case .probeIETF, .create:
            let location = r.informationalLocation ?? r.headers["location"]
            let speaksIETF = r.informationalLocation != nil || r.headers["upload-offset"] != nil
                || r.headers["upload-complete"] != nil || r.headers["upload-incomplete"] != nil
                || r.headers["upload-draft-interop-version"] != nil
            // A server that knows only iOS 17's draft answers the current interop version
            // with 400 and the version it speaks: speak that one.
            if s == 400, proto == .ietf, r.headers["upload-draft-interop-version"]?.trimmingSpaces() == "3" {
                let wasProbe = phase == .probeIETF
                proto = .ietf3
                let actions = create()
                if wasProbe { phase = .probeIETF }
                return actions
            }
            if phase == .probeIETF && !(speaksIETF && location != nil && (200..<300).contains(s)) {
                // A plain server: send the whole file with PUT.
                proto = .put
                return [.chose(.put)] + start()
            }
            guard (200..<300).contains(s), let location else {
                if s >= 500 || s == 408 || s == 429 || s == 0 { return fail("creating the upload: HTTP \(s)\(r.serverSays)", transient: true) }
                return fail("creating the upload: HTTP \(s)" + (s == 0 ? "" : location == nil && (200..<300).contains(s) ? " without a Location" : "") + r.serverSays, transient: false)
            }
            // Only ever an http or https resource: its URL gets the file's bytes.
            guard let url = resolveLocation(location, target), URLParts.isTransferURL(url) else {
                return fail("refused: the server's upload Location '\(LogText.escape(location))' is not an http or https URL", transient: false)
            }
            resource = url
            let off = Self.offset(r) ?? 0
            var actions: [Action] = [.resource(url: resource!, protocol: proto)]
            if let old = abandoned {
                abandoned = nil
                actions.append(.abandon(url: old, protocol: proto))
            }
            return actions + (off > 0 ? [.offset(off)] : []) + append(from: off)
        case .queryOffset:
            if s == 404 || s == 410 {
                // The server forgot the upload: start a new one from byte 0.
                resource = nil
                return [.offset(0)] + create()
            }
            if (400..<500).contains(s), ![408, 409, 429].contains(s), !replacedOnce {
                // The server will not tell the offset of this upload (it may want more metadata
                // than it was created with). Its bytes are not ours to throw away yet: start a new
                // upload, and end the old one only once the new one exists.
                replacedOnce = true
                abandoned = resource
                resource = nil
                return [.offset(0)] + create()
            }
            guard (200..<300).contains(s), let off = Self.offset(r), off >= 0, off <= total else {
                if s >= 500 || s == 408 || s == 429 || s == 0 { return fail("asking for the upload offset: HTTP \(s)\(r.serverSays)", transient: true) }
                return fail("asking for the upload offset: HTTP \(s)" + ((200..<300).contains(s) ? " without a valid Upload-Offset" : "") + r.serverSays, transient: s == 409)
            }
            let done = off == total && (proto == .tus || Self.isTrue(r.headers["upload-complete"]) || r.headers["upload-incomplete"]?.trimmingSpaces() == "?0")
            if done { phase = .done; return [.offset(off), .completed] }
            return [.offset(off)] + append(from: off)
        case .append(let from):
            if s == 409 || s == 460 {
                // Offset mismatch or checksum failure: ask again, never resend from a guess.
                return queryOffset()
            }
            guard (200..<300).contains(s) else {
                if s >= 500 || s == 408 || s == 429 || s == 0 { return fail("sending data: HTTP \(s)", transient: true) }
                if s == 404 || s == 410 { resource = nil; return [.offset(0)] + create() }
                return fail("sending data: HTTP \(s)\(r.serverSays)", transient: false)
            }
            if proto == .tus {
                guard let off = Self.offset(r), off >= from, off <= total else { return queryOffset() }
                if off == total { phase = .done; return [.offset(off), .completed] }
                return [.offset(off)] + append(from: off)
            }
            phase = .done
            return [.offset(total), .completed]
        case .put:
            guard (200..<300).contains(s) else {
                return fail("PUT: HTTP \(s)\(r.serverSays)", transient: s >= 500 || s == 408 || s == 429 || s == 0)
            }
            phase = .done
            return [.offset(total), .completed]
        case .cancel, .done:
            return []
        }
    }

    func fail(_ reason: String, transient: Bool) -> [Action] { [.failed(reason: reason, transient: transient)] }

    /// After a dropped connection or a daemon restart: resume by asking the server first.
    package mutating func resume() -> [Action] {
        if proto == .put || proto == .auto || resource == nil { return start() }
        if proto == .tus {
            // Ask again what the server offers (checksums), then for the offset.
            phase = .discover
            return [.request(UploadRequest(method: "OPTIONS", url: target, headers: [("Tus-Resumable", "1.0.0")], body: nil, checksum: false))]
        }
        return queryOffset()
    }
}
