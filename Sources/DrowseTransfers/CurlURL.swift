import CCurl

/// URL references resolved by libcurl's URL API (`curl_url`), the parser libcurl itself uses
/// for the requests: RFC 3986 section 5 for `//host/path`, `/abs`, `rel`, `../up`, `?q`.
package enum CurlURL {
    /// `reference` (a `Location` header) resolved against `base` (the URL it answered).
    /// Refused unless the result is http or https.
    package static func resolve(_ reference: String, against base: String) -> Result<String, TransferError> {
        guard let h = ccurl_url() else { return .failure(TransferError("libcurl could not make a URL handle", transient: true)) }
        defer { ccurl_url_cleanup(h) }
        let ref = reference.trimmingCharacters()
        guard !ref.isEmpty else { return .failure(TransferError("empty Location", transient: false)) }
        var code = ccurl_url_set(h, CURLUPART_URL, base, 0)
        guard code == CURLUE_OK else { return .failure(refused(reference, base: base, code)) }
        // Setting a URL on a handle that holds one resolves it as a reference against that one.
        // Schemes libcurl was built without are parsed too, to be refused below by name.
        code = ccurl_url_set(h, CURLUPART_URL, ref, UInt32(CURLU_NON_SUPPORT_SCHEME))
        guard code == CURLUE_OK else { return .failure(refused(reference, base: base, code)) }
        guard let scheme = get(h, CURLUPART_SCHEME)?.lowercased(), scheme == "http" || scheme == "https" else {
            return .failure(TransferError("refused: Location '\(reference)' is not an http or https URL", transient: false))
        }
        guard let url = get(h, CURLUPART_URL) else { return .failure(refused(reference, base: base, CURLUE_OUT_OF_MEMORY)) }
        return .success(url)
    }

    private static func get(_ h: OpaquePointer, _ part: CURLUPart) -> String? {
        var out: UnsafeMutablePointer<CChar>?
        guard ccurl_url_get(h, part, &out, 0) == CURLUE_OK, let out else { return nil }
        defer { ccurl_free(out) }
        return String(cString: out)
    }

    // Not curl_url_strerror: it came with libcurl 7.80, and older ones must still load this.
    private static func refused(_ reference: String, base: String, _ code: CURLUcode) -> TransferError {
        TransferError("refused: Location '\(reference)' (from \(base)) is not a valid URL (CURLUcode \(code.rawValue))",
                      transient: false)
    }
}
