#if canImport(Glibc)
import Glibc
#endif
import CCurl
import Logging

/// The one place libcurl's return codes are looked at. Every option set on a handle goes
/// through `setopt`, which says what its failure means:
/// - `.refuse`: the transfer must not run without it — the URL, the http/https-only rule, TLS
///   verification, redirect limits, stall detection, the byte caps, the headers that carry
///   `Range`/`If-Range`, and the callbacks (without them libcurl would write the body to
///   stdout or read the upload from stdin). The transfer fails with the option's name and
///   libcurl's own words.
/// - `.warn`: a tuning whose libcurl default is acceptable (buffer sizes, the user agent,
///   the connect timeout). Logged, and the transfer goes on.
struct CurlCheck {
    enum OnFailure { case refuse, warn }

    let easy: UnsafeMutableRawPointer
    let logger: Logger

    func setopt(_ o: CURLoption, _ name: String, _ v: Int, _ f: OnFailure = .refuse) throws(TransferError) {
        try Self.check(ccurl_setopt_long(easy, o, v), name, f, logger)
    }

    func setopt(_ o: CURLoption, _ name: String, _ v: Int64, _ f: OnFailure = .refuse) throws(TransferError) {
        try Self.check(ccurl_setopt_off(easy, o, curl_off_t(v)), name, f, logger)
    }

    func setopt(_ o: CURLoption, _ name: String, _ v: String, _ f: OnFailure = .refuse) throws(TransferError) {
        try Self.check(ccurl_setopt_str(easy, o, v), name, f, logger)
    }

    func setopt(_ o: CURLoption, _ name: String, _ v: UnsafeMutablePointer<curl_slist>?, _ f: OnFailure = .refuse) throws(TransferError) {
        try Self.check(ccurl_setopt_slist(easy, o, v), name, f, logger)
    }

    func setopt(_ o: CURLoption, _ name: String, _ v: UnsafeMutableRawPointer, _ f: OnFailure = .refuse) throws(TransferError) {
        try Self.check(ccurl_setopt_ptr(easy, o, v), name, f, logger)
    }

    func setopt(_ o: CURLoption, _ name: String, callback: ccurl_data_cb, _ f: OnFailure = .refuse) throws(TransferError) {
        try Self.check(ccurl_setopt_data_cb(easy, o, callback), name, f, logger)
    }

    /// Checks one return code. `what` names the call (`CURLOPT_RANGE`).
    static func check(_ code: CURLcode, _ what: String, _ f: OnFailure, _ logger: Logger) throws(TransferError) {
        guard code != CURLE_OK else { return }
        let message = "libcurl refused \(what): \(String(cString: ccurl_easy_strerror(code)))"
        switch f {
        case .warn:
            logger.warning("\(message); going on with libcurl's default")
        case .refuse:
            // Out of memory may pass; an option this libcurl lacks or rejects will not.
            throw TransferError("\(message); not transferring without it", transient: code == CURLE_OUT_OF_MEMORY)
        }
    }

    /// Appends a header line; libcurl returns nil (keeping the old list) when out of memory.
    static func append(_ list: inout UnsafeMutablePointer<curl_slist>?, _ line: String) throws(TransferError) {
        guard let longer = ccurl_slist_append(list, line) else {
            throw TransferError("libcurl could not add a request header (out of memory)", transient: true)
        }
        list = longer
    }

    /// Checks a multi-interface return code; logs and returns false on failure.
    @discardableResult
    static func multi(_ code: CURLMcode, _ what: String, _ logger: Logger) -> Bool {
        guard code != CURLM_OK else { return true }
        logger.error("libcurl: \(what) failed: \(String(cString: ccurl_multi_strerror(code)))")
        return false
    }

    /// Reads a long (the response code); nil, logged, if libcurl cannot say.
    static func infoLong(_ easy: UnsafeMutableRawPointer, _ i: CURLINFO, _ what: String, _ logger: Logger) -> Int? {
        var v = 0
        let code = ccurl_getinfo_long(easy, i, &v)
        guard code == CURLE_OK else {
            logger.warning("libcurl: reading \(what) failed: \(String(cString: ccurl_easy_strerror(code)))")
            return nil
        }
        return v
    }
}

/// How the http/https-only rule is given to libcurl (docs/contract.md, "Transfers": also on redirects).
package enum ProtocolRule: Sendable, Equatable {
    /// `CURLOPT_PROTOCOLS_STR` and `CURLOPT_REDIR_PROTOCOLS_STR` = "http,https" (libcurl 7.85+).
    case names
    /// `CURLOPT_PROTOCOLS` and `CURLOPT_REDIR_PROTOCOLS` = CURLPROTO_HTTP | CURLPROTO_HTTPS:
    /// the only way before 7.85; deprecated (still honoured) since.
    case bitmask

    /// The first libcurl with the `_STR` options.
    package static let namesSince: UInt32 = 0x07_55_00

    /// The rule to try first with the libcurl of this version (`curl_version_info`'s `version_num`).
    package static func preferred(forVersion v: UInt32) -> ProtocolRule { v >= namesSince ? .names : .bitmask }

    /// The rule that takes: the preferred one for `version`, else the other; nil if `apply`
    /// (which sets a rule on a handle and says whether libcurl took both options) fails for both.
    package static func choose(version: UInt32, apply: (ProtocolRule) -> Bool) -> ProtocolRule? {
        let first = preferred(forVersion: version)
        if apply(first) { return first }
        let other: ProtocolRule = first == .names ? .bitmask : .names
        return apply(other) ? other : nil
    }

    /// Sets both options (the request's and its redirects') on a handle; the first failure code.
    func apply(to easy: UnsafeMutableRawPointer) -> (CURLcode, String) {
        switch self {
        case .names:
            let a = ccurl_setopt_protocols_str(easy, "http,https")
            if a != CURLE_OK { return (a, "CURLOPT_PROTOCOLS_STR") }
            return (ccurl_setopt_redir_protocols_str(easy, "http,https"), "CURLOPT_REDIR_PROTOCOLS_STR")
        case .bitmask:
            let a = ccurl_setopt_protocols_mask(easy, ccurl_proto_http_https())
            if a != CURLE_OK { return (a, "CURLOPT_PROTOCOLS") }
            return (ccurl_setopt_redir_protocols_mask(easy, ccurl_proto_http_https()), "CURLOPT_REDIR_PROTOCOLS")
        }
    }

    /// Tries the rules on a scratch handle of the loaded libcurl: the one every transfer will
    /// use, or why transfers must not run at all.
    package static func probe() -> Result<ProtocolRule, TransferError> {
        let version = String(cString: ccurl_version_str())
        guard let easy = ccurl_easy_init() else {
            return .failure(TransferError("libcurl \(version) could not make a handle", transient: false))
        }
        defer { ccurl_easy_cleanup(easy) }
        var codes: [String] = []
        let rule = choose(version: ccurl_version_num()) { r in
            let (code, name) = r.apply(to: easy)
            if code != CURLE_OK { codes.append("\(name): \(String(cString: ccurl_easy_strerror(code)))") }
            return code == CURLE_OK
        }
        guard let rule else {
            return .failure(TransferError(
                "libcurl \(version) cannot restrict transfers to http and https (\(codes.joined(separator: "; "))): refusing to run transfers",
                transient: false))
        }
        return .success(rule)
    }
}
