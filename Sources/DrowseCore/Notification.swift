/// A notification payload as received over MQTT, checked (docs/contract.md, "Notifications over MQTT").
package struct Notification: Sendable, Equatable {
    /// The default of `[notifications] max_payload`.
    package static let maxBytes = 4096

    package var payload: JSON
    package var raw: [UInt8]
    package var contentAvailable: Bool
    package var id: String?
    package var collapseID: String?
    package var expiration: Double?
    package var priority: Int
    /// Staged rollout: the device acts at a delay in [0, spread) seconds (`RolloutDelay`); nil: at once.
    package var spread: Double?
    /// A download the provider asks Drowse to make before waking the app (push to transfer).
    package var download: DownloadRequest?

    package struct DownloadRequest: Sendable, Equatable {
        package var url: String
        package var sha256: String?
        package var size: Int64?
        package var session: String?
    }

    package enum Refusal: Error, Equatable, CustomStringConvertible {
        case tooLarge(Int, limit: Int)
        case notJSON(String)
        case notAnObject
        case badKey(String, String)

        package var description: String {
            switch self {
            case .tooLarge(let n, let limit): "payload of \(n) bytes is over the \(limit)-byte limit"
            case .notJSON(let why): "payload is not JSON (\(why))"
            case .notAnObject: "payload is not a JSON object"
            case .badKey(let key, let why): "key '\(key)' \(why)"
            }
        }
    }

    /// Checks a raw payload strictly.
    package static func parse(_ bytes: [UInt8], maxBytes: Int = Notification.maxBytes) throws(Refusal) -> Notification {
        guard bytes.count <= maxBytes else { throw .tooLarge(bytes.count, limit: maxBytes) }
        let json: JSON
        do { json = try JSON.parse(bytes: bytes, maxDepth: 32) } catch { throw .notJSON(error.description) }
        guard case .object = json else { throw .notAnObject }
        var contentAvailable = false
        if let aps = json["aps"] {
            guard case .object = aps else { throw .badKey("aps", "must be an object") }
            if let ca = aps["content-available"] {
                guard let n = ca.intValue, n == 0 || n == 1 else { throw .badKey("aps.content-available", "must be 0 or 1") }
                contentAvailable = n == 1
            }
        }
        func optionalString(_ key: String) throws(Refusal) -> String? {
            guard let v = json[key], !v.isNull else { return nil }
            if let s = v.stringValue { return s }
            if let n = v.intValue { return String(n) }
            throw .badKey(key, "must be a string")
        }
        let id = try optionalString("id")
        let collapse = try optionalString("collapse-id")
        var expiration: Double?
        if let e = json["expiration"], !e.isNull {
            guard let d = e.doubleValue else { throw .badKey("expiration", "must be a Unix time") }
            expiration = d
        }
        var priority = 5
        if let p = json["priority"], !p.isNull {
            guard let n = p.intValue, n == 5 || n == 10 else { throw .badKey("priority", "must be 5 or 10") }
            priority = n
        }
        var spread: Double?
        if let v = json["spread"], !v.isNull {
            // JSON has no NaN or infinity (the parser refuses them); a negative or oversized window is refused here.
            guard let d = v.doubleValue, d.isFinite, d >= 0, d <= RolloutDelay.maxSpread else {
                throw .badKey("spread", "must be a number of seconds from 0 to \(Int(RolloutDelay.maxSpread))")
            }
            spread = d
        }
        var download: DownloadRequest?
        if let d = json["download"], !d.isNull {
            guard case .object = d, let url = d["url"]?.stringValue, URLParts.isTransferURL(url) else {
                throw .badKey("download", "must be an object with an http(s) \"url\"")
            }
            let sha = d["sha256"]?.stringValue
            if let sha, sha.count != 64 || !sha.allSatisfy(\.isHexDigit) { throw .badKey("download.sha256", "must be 64 hex digits") }
            let size = d["size"]?.int64Value
            if d["size"] != nil, size == nil || size! < 0 { throw .badKey("download.size", "must be a byte count") }
            let session = d["session"]?.stringValue
            if let session, !Identifier.isValid(session) { throw .badKey("download.session", "must be a plain name") }
            download = DownloadRequest(url: url, sha256: sha?.lowercased(), size: size, session: session)
        }
        return Notification(
            payload: json, raw: bytes, contentAvailable: contentAvailable, id: id, collapseID: collapse,
            expiration: expiration, priority: priority, spread: spread, download: download)
    }
}

/// MQTT topics Drowse uses (docs/contract.md).
package enum Topics {
    package static func notify(prefix: String, device: String, app: String) -> String {
        "\(prefix)/\(device)/apps/\(app)/notify"
    }

    package static func status(prefix: String, device: String) -> String { "\(prefix)/\(device)/status" }

    /// A topic filter the device never subscribes to: its pings between CONNECT keepalives
    /// unsubscribe it (docs/design.md, "The adaptive keepalive").
    package static func keepalive(prefix: String, device: String) -> String { "\(prefix)/\(device)/keepalive" }

    /// A group's notify topic: every device in `group` (`[mqtt] groups`) gets it for its app `app`.
    package static func groupNotify(prefix: String, group: String, app: String) -> String {
        "\(prefix)/groups/\(group)/apps/\(app)/notify"
    }

    /// The topics a device subscribes to for `app`: its own, then one per group.
    package static func notifyTopics(prefix: String, device: String, groups: [String], app: String) -> [String] {
        [notify(prefix: prefix, device: device, app: app)] + groups.map { groupNotify(prefix: prefix, group: $0, app: app) }
    }

    /// The filter matching every device's retained status (`drowse fleet`).
    package static func allStatuses(prefix: String) -> String { "\(prefix)/+/status" }

    /// The roll call: every online device that receives a message here publishes its status
    /// again, so `drowse fleet` sees it live where a broker does not hand out retained statuses
    /// to a wildcard (docs/brokers.md, "RabbitMQ"). Two levels: no device topic has fewer than three.
    package static func rollCall(prefix: String) -> String { "\(prefix)/rollcall" }

    /// The mark a listing's persistent session (`drowse fleet --session`) publishes to itself: it
    /// comes back after everything the broker queued for the session before it. Four levels, so
    /// no status filter (`<prefix>/+/status`) matches it.
    package static func listingMark(prefix: String, session: String) -> String { "\(prefix)/fleet-sessions/\(session)/mark" }

    /// The device id in a status topic, if it is one.
    package static func device(inStatusTopic topic: String, prefix: String) -> String? {
        let head = "\(prefix)/"
        guard topic.hasPrefix(head), topic.hasSuffix("/status") else { return nil }
        let mid = topic.dropFirst(head.count).dropLast("/status".count)
        return mid.isEmpty || mid.contains("/") || topic.count < head.count + "/status".count ? nil : String(mid)
    }

    /// The app id in a notify topic, if the topic is one of this device's: its own
    /// (`<prefix>/<device>/apps/<app>/notify`) or one of its groups'
    /// (`<prefix>/groups/<group>/apps/<app>/notify`, `group` in `groups`).
    package static func app(inNotifyTopic topic: String, prefix: String, device: String, groups: [String] = []) -> String? {
        if let app = app(in: topic, head: "\(prefix)/\(device)/apps/") { return app }
        let groupsHead = "\(prefix)/groups/"
        guard !groups.isEmpty, topic.hasPrefix(groupsHead) else { return nil }
        let rest = topic.dropFirst(groupsHead.count)
        guard let slash = rest.firstIndex(of: "/"), groups.contains(String(rest[..<slash])) else { return nil }
        return app(in: topic, head: groupsHead + rest[..<slash] + "/apps/")
    }

    private static func app(in topic: String, head: String) -> String? {
        guard topic.hasPrefix(head), topic.hasSuffix("/notify"), topic.count >= head.count + "/notify".count else { return nil }
        let mid = topic.dropFirst(head.count).dropLast("/notify".count)
        return mid.isEmpty || mid.contains("/") ? nil : String(mid)
    }
}
