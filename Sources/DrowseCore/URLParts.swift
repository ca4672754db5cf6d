/// The parts of a URL Drowse needs to check before handing it to libcurl or libmosquitto.
package struct URLParts: Sendable, Equatable {
    package var scheme: String
    package var host: String
    package var port: Int?
    package var path: String
    /// Whether the authority held `user@` or `user:password@`.
    package var hasUserInfo = false

    /// Parses `scheme://[user@]host[:port][/path]`. The scheme is lower-cased.
    package static func parse(_ url: String) -> URLParts? {
        guard let sep = url.firstRange(of: "://") else { return nil }
        let scheme = url[..<sep.lowerBound].lowercased()
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == "." }) else { return nil }
        var rest = url[sep.upperBound...]
        let pathStart = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        var authority = rest[..<pathStart]
        rest = rest[pathStart...]
        var hasUserInfo = false
        if let at = authority.lastIndex(of: "@") {
            authority = authority[authority.index(after: at)...]
            hasUserInfo = true
        }
        var host = String(authority)
        var port: Int?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else { return nil }
            if after.hasPrefix(":") { guard let p = Int(after.dropFirst()), (1...65535).contains(p) else { return nil }; port = p }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            guard let p = Int(authority[authority.index(after: colon)...]), (1...65535).contains(p) else { return nil }
            port = p
        }
        if scheme != "file", host.isEmpty { return nil }
        return URLParts(scheme: scheme, host: host, port: port, path: rest.isEmpty ? "/" : String(rest), hasUserInfo: hasUserInfo)
    }

    /// `url` with any `user:password@` replaced by `***@`, for showing it: status answers and
    /// error messages reach users who must not learn a broker's password. Text that is not a
    /// URL comes back as it was.
    package static func redacting(_ url: String) -> String {
        guard let sep = url.firstRange(of: "://") else { return url }
        let rest = url[sep.upperBound...]
        let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        guard let at = rest[..<end].lastIndex(of: "@") else { return url }
        return String(url[..<sep.upperBound]) + "***" + String(rest[at...])
    }

    /// Transfers accept http and https only (docs/contract.md, "Transfers").
    package static func isTransferURL(_ url: String) -> Bool {
        guard let p = parse(url) else { return false }
        return p.scheme == "http" || p.scheme == "https"
    }

    /// The last path segment without query, for naming downloaded files.
    package var lastPathComponent: String {
        let end = path.firstIndex(where: { $0 == "?" || $0 == "#" }) ?? path.endIndex
        return path[..<end].split(separator: "/").last.map(String.init) ?? ""
    }
}
