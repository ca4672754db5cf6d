#if canImport(Glibc)
import Glibc
#endif
import CCrypto
import CCurl
import DrowseCore
import DrowseSystem

/// One upload: a sequence of HTTP requests decided by `UploadMachine`, each run as its own
/// easy handle on the engine's multi handle. Lives on the engine thread only.
final class Upload {
    let job: UploadJob
    unowned let engine: TransferEngine
    var machine: UploadMachine
    let fd: Int32
    var easy: UnsafeMutableRawPointer?
    var headers: UnsafeMutablePointer<curl_slist>?
    var request: UploadRequest?
    var readPos: Int64 = 0
    var status = 0
    var responseHeaders: [String: String] = [:]
    var informationalLocation: String?
    var inInformational = false
    var progress = ProgressThrottle()
    var finished = false
    /// Fire-and-forget requests (DELETE on cancel) report nothing.
    var silent = false
    /// The first bytes of the current response's body, for failure reasons.
    var responseBody: [UInt8] = []
    /// Old server-side resources to end (DELETE) now that a replacement exists; the engine
    /// takes them after each step.
    var toAbandon: [(url: String, protocolName: UploadProtocol)] = []

    init(job: UploadJob, engine: TransferEngine) throws(TransferError) {
        self.job = job
        self.engine = engine
        machine = UploadMachine(
            target: job.url, total: job.total, fileName: String(job.sourcePath.split(separator: "/").last ?? ""),
            protocol: job.protocolName, resource: job.resource)
        if let ct = job.contentType { machine.contentType = ct }
        // A Location is resolved by libcurl's URL parser, the one that will send to it.
        machine.resolveLocation = { location, base in try? CurlURL.resolve(location, against: base).get() }
        let size: Int64
        do { (fd, size) = try FileIdentity.openRegularForReading(job.sourcePath, as: job.identity) } catch {
            throw TransferError("cannot read \(job.sourcePath): \(error)", transient: false)
        }
        guard size == job.total else {
            Sys.close(fd, ignoringErrors: .afterError)
            throw TransferError("\(job.sourcePath) changed size (\(job.total) → \(size) bytes) since the upload began", transient: false)
        }
    }

    /// Starts (or resumes) and returns the first easy handle to add, if any.
    func begin() -> UnsafeMutableRawPointer? {
        perform(job.resource == nil ? machine.start() : machine.resume())
    }

    /// A one-off request (the DELETE of a cancelled upload).
    func beginCancel() -> UnsafeMutableRawPointer? {
        silent = true
        guard let req = machine.cancel() else { return nil }
        return makeHandle(req)
    }

    /// Runs the machine's actions; returns the next handle to add, or nil when nothing is left to send.
    private func perform(_ actions: [UploadMachine.Action]) -> UnsafeMutableRawPointer? {
        var next: UnsafeMutableRawPointer?
        for a in actions {
            switch a {
            case .request(let r): next = makeHandle(r)
            case .resource(let url, let proto): engine.emit(.uploadResource(id: job.id, url: url, protocolName: proto.rawValue))
            case .chose(let proto): engine.emit(.uploadResource(id: job.id, url: nil, protocolName: proto.rawValue))
            case .abandon(let url, let proto): toAbandon.append((url, proto))
            case .offset(let n): engine.emit(.committed(id: job.id, bytesDone: n, bytesTotal: job.total, etag: nil, lastModified: nil))
            case .completed:
                finished = true
                engine.emit(.completed(id: job.id, bytes: job.total, path: job.sourcePath))
            case .failed(let reason, let transient, let retryAfter):
                finished = true
                engine.emit(.failed(id: job.id, error: TransferError(reason, transient: transient, retryAfter: retryAfter)))
            }
        }
        return next
    }

    private func makeHandle(_ r: UploadRequest) -> UnsafeMutableRawPointer? {
        releaseHandle()
        guard let easy = ccurl_easy_init() else {
            finished = true
            engine.emit(.failed(id: job.id, error: TransferError("libcurl could not make a handle", transient: true)))
            return nil
        }
        self.easy = easy
        request = r
        status = 0
        responseHeaders = [:]
        responseBody = []
        informationalLocation = nil
        do {
            try configure(easy, r)
        } catch {
            // A setting the request must not run without: refuse it (the upload fails).
            releaseHandle()
            finished = true
            if !silent { engine.emit(.failed(id: job.id, error: error)) }
            return nil
        }
        return easy
    }

    private func configure(_ easy: UnsafeMutableRawPointer, _ r: UploadRequest) throws(TransferError) {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let o = engine.opts
        let c = CurlCheck(easy: easy, logger: engine.logger)
        try o.applyCommon(to: c, url: r.url, protocols: engine.protocols)
        try c.setopt(CURLOPT_FOLLOWLOCATION, "CURLOPT_FOLLOWLOCATION", 0)  // a redirected upload is the server's error
        try c.setopt(CURLOPT_UPLOAD_BUFFERSIZE, "CURLOPT_UPLOAD_BUFFERSIZE", 512 * 1024, .warn)
        try CurlCheck.append(&headers, "Expect:")  // no 100-continue round trip
        for (k, v) in r.headers { try CurlCheck.append(&headers, "\(k): \(v)") }
        switch (r.method, r.body) {
        case ("HEAD", _):
            try c.setopt(CURLOPT_NOBODY, "CURLOPT_NOBODY", 1)
        case (let m, nil):
            if m == "POST" {
                try c.setopt(CURLOPT_POST, "CURLOPT_POST", 1)
                try c.setopt(CURLOPT_POSTFIELDSIZE_LARGE, "CURLOPT_POSTFIELDSIZE_LARGE", Int64(0))
                try c.setopt(CURLOPT_COPYPOSTFIELDS, "CURLOPT_COPYPOSTFIELDS", "")
            } else if m != "GET" {
                try c.setopt(CURLOPT_CUSTOMREQUEST, "CURLOPT_CUSTOMREQUEST", m)
            }
        case (let m, let range?):
            readPos = range.lowerBound
            if r.checksum {
                // The server asked for checksums: a chunk without one is not sent.
                guard let digest = sha1(range) else { throw TransferError("reading \(job.sourcePath) for its checksum failed", transient: true) }
                try CurlCheck.append(&headers, "Upload-Checksum: sha1 \(Base64.encode(digest))")
            }
            try c.setopt(CURLOPT_UPLOAD, "CURLOPT_UPLOAD", 1)
            try c.setopt(CURLOPT_INFILESIZE_LARGE, "CURLOPT_INFILESIZE_LARGE", Int64(range.count))
            if m != "PUT" { try c.setopt(CURLOPT_CUSTOMREQUEST, "CURLOPT_CUSTOMREQUEST", m) }
            try c.setopt(CURLOPT_READDATA, "CURLOPT_READDATA", me)
            try c.setopt(CURLOPT_READFUNCTION, "CURLOPT_READFUNCTION", callback: { ptr, size, n, ud in
                Unmanaged<Upload>.fromOpaque(ud!).takeUnretainedValue().read(into: ptr!, max: size * n)
            })
            // No rewinds: libcurl would quietly resend the body on a new connection when a reused
            // one dies. Failing here ends the attempt, and the next one asks the server first.
            try CurlCheck.check(ccurl_setopt_seek_cb(easy) { _, _, _ in 2 }, "CURLOPT_SEEKFUNCTION", .refuse, c.logger)  // CURL_SEEKFUNC_CANTSEEK
            // Progress is display only.
            try c.setopt(CURLOPT_NOPROGRESS, "CURLOPT_NOPROGRESS", 0, .warn)
            try c.setopt(CURLOPT_XFERINFODATA, "CURLOPT_XFERINFODATA", me, .warn)
            try CurlCheck.check(ccurl_setopt_xferinfo_cb(easy) { ud, _, _, _, ulnow in
                let u = Unmanaged<Upload>.fromOpaque(ud!).takeUnretainedValue()
                if let body = u.request?.body, u.progress.shouldReport(at: WallClock.monotonic()) {
                    u.engine.emit(.sent(id: u.job.id, bytesSent: body.lowerBound + Int64(ulnow)))
                }
                return 0
            }, "CURLOPT_XFERINFOFUNCTION", .warn, c.logger)
        }
        try c.setopt(CURLOPT_HTTPHEADER, "CURLOPT_HTTPHEADER", headers)
        try c.setopt(CURLOPT_HEADERDATA, "CURLOPT_HEADERDATA", me)
        try c.setopt(CURLOPT_HEADERFUNCTION, "CURLOPT_HEADERFUNCTION", callback: { ptr, size, n, ud in
            Unmanaged<Upload>.fromOpaque(ud!).takeUnretainedValue().onHeader(UnsafeRawBufferPointer(start: ptr, count: size * n))
            return size * n
        })
        // Response bodies are not needed beyond a server's reason for a refusal: keep their first
        // 512 bytes, read and drop at most 64 KiB. A HEAD has no body, and a server may announce
        // the upload's whole size in its Content-Length: no cap there, or libcurl refuses the answer.
        try c.setopt(CURLOPT_WRITEDATA, "CURLOPT_WRITEDATA", me)
        try c.setopt(CURLOPT_WRITEFUNCTION, "CURLOPT_WRITEFUNCTION", callback: { ptr, size, n, ud in
            let u = Unmanaged<Upload>.fromOpaque(ud!).takeUnretainedValue()
            let room = 512 - u.responseBody.count
            if room > 0, let ptr { u.responseBody += UnsafeRawBufferPointer(start: ptr, count: min(room, size * n)) }
            return size * n
        })
        if r.method != "HEAD" { try c.setopt(CURLOPT_MAXFILESIZE_LARGE, "CURLOPT_MAXFILESIZE_LARGE", Int64(65536)) }
    }

    func read(into ptr: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        guard let end = request?.body?.upperBound else { return 0 }
        let want = Int(min(Int64(max), end - readPos))
        if want <= 0 { return 0 }
        let n = pread(fd, ptr, want, off_t(readPos))
        if n < 0 { return 0x10000000 }  // CURL_READFUNC_ABORT
        readPos += Int64(n)
        return n
    }

    func onHeader(_ raw: UnsafeRawBufferPointer) {
        let line = String(decoding: raw, as: UTF8.self).trimmingCharacters()
        if line.hasPrefix("HTTP/") {
            status = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
            inInformational = (100..<200).contains(status)
            if !inInformational { responseHeaders = [:] }
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = line[..<colon].lowercased()
        let value = String(line[line.index(after: colon)...]).trimmingCharacters()
        if inInformational {
            if name == "location" { informationalLocation = value }
        } else {
            responseHeaders[name] = value
        }
    }

    private func sha1(_ range: Range<Int64>) -> [UInt8]? {
        guard let ctx = EVP_MD_CTX_new() else { return nil }
        defer { EVP_MD_CTX_free(ctx) }
        EVP_DigestInit_ex(ctx, EVP_sha1(), nil)
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        var pos = range.lowerBound
        while pos < range.upperBound {
            let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, Int(min(Int64($0.count), range.upperBound - pos)), off_t(pos)) }
            if n <= 0 { return nil }
            EVP_DigestUpdate(ctx, buf, n)
            pos += Int64(n)
        }
        var out = [UInt8](repeating: 0, count: 20)
        var len: UInt32 = 0
        EVP_DigestFinal_ex(ctx, &out, &len)
        return out
    }

    /// The current request ended; returns the next handle to add, if any.
    func done(_ result: CURLcode) -> UnsafeMutableRawPointer? {
        if silent { releaseHandle(); return nil }
        if result != CURLE_OK {
            let message = String(cString: ccurl_easy_strerror(result))
            releaseHandle()
            finished = true
            // A dropped connection mid-body: the retry asks the server for its offset first.
            engine.emit(.failed(id: job.id, error: TransferError(message, transient: result != CURLE_UNSUPPORTED_PROTOCOL && result != CURLE_URL_MALFORMAT)))
            return nil
        }
        var code = 0
        if let easy { code = CurlCheck.infoLong(easy, CURLINFO_RESPONSE_CODE, "the response code", engine.logger) ?? 0 }
        let body = responseBody.isEmpty ? nil : LogText.escape(String(decoding: responseBody, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init) ?? "")
        let response = UploadResponse(status: code, headers: responseHeaders, informationalLocation: informationalLocation, body: body)
        return perform(machine.handle(response))
    }

    func releaseHandle() {
        if let easy { ccurl_easy_cleanup(easy) }
        easy = nil
        ccurl_slist_free_all(headers)
        headers = nil
    }

    func close() {
        releaseHandle()
        Sys.close(fd, ignoringErrors: .nothingToFlush)  // the source file, opened for reading
    }
}
