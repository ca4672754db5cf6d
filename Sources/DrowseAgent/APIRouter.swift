import DrowseCore
import DrowseSystem

/// One parsed API request.
public struct APIRequest: Sendable {
    public var method: String
    public var path: String
    public var query: [String: String]
    public var body: [UInt8]
}

/// Maps `/v1/...` routes to the agent (SPEC.md, "Local API").
public struct APIRouter: Sendable {
    let agent: Agent

    public init(agent: Agent) { self.agent = agent }

    public func handle(_ req: APIRequest, caller: Caller) async -> (Int, JSON) {
        do {
            return (200, try await route(req, caller: caller))
        } catch {
            return (error.status, .object([("error", .object([("code", .string(error.code)), ("message", .string(error.message))]))]))
        }
    }

    private func body(_ req: APIRequest) throws(APIError) -> JSON {
        if req.body.isEmpty { return .object([]) }
        do {
            let j = try JSON.parse(bytes: req.body)
            guard case .object = j else { throw APIError.badRequest("the body must be a JSON object") }
            return j
        } catch let e as JSONParseError {
            throw .badRequest(e.description)
        } catch {
            throw error as! APIError
        }
    }

    private func route(_ req: APIRequest, caller: Caller) async throws(APIError) -> JSON {
        let parts = req.path.split(separator: "/").map(String.init)
        guard parts.first == "v1" else { throw .notFound("no route \(req.path)") }
        let p = Array(parts.dropFirst())
        switch (req.method, p.count) {
        case ("GET", 1) where p[0] == "status":
            return await agent.status(caller: caller)
        case ("GET", 1) where p[0] == "conditions":
            return await agent.conditions(refresh: req.query["refresh"] == "1" || req.query["refresh"] == "true")
        case ("POST", 2) where p == ["conditions", "refresh"]:
            return await agent.conditions(refresh: true)
        case ("GET", 1) where p[0] == "apps":
            return await agent.appsList(caller: caller)
        case ("GET", 2) where p[0] == "apps":
            return try await agent.appDetail(p[1], caller: caller)
        case ("POST", 3) where p[0] == "apps" && p[2] == "fetch":
            let outcome = try await agent.fetchNow(p[1], caller: caller)
            return .object([
                ("id", .string(p[1])), ("result", .string(outcome.result.rawValue)), ("ending", .string(outcome.summary)),
                ("started_at", .number(outcome.startedAt)), ("ended_at", .number(outcome.endedAt)),
            ])
        case ("POST", 3) where p[0] == "apps" && p[2] == "used":
            try await agent.used(p[1], caller: caller)
            return .object([("id", .string(p[1])), ("recorded", true)])
        case ("POST", 3) where p[0] == "apps" && p[2] == "quit":
            let n = try await agent.quit(p[1], caller: caller)
            return .object([("id", .string(p[1])), ("cancelled_transfers", JSON(n))])
        case ("GET", 1) where p[0] == "transfers":
            return .array(try await agent.transfers(app: req.query["app"], caller: caller).map(\.json))
        case ("POST", 1) where p[0] == "transfers":
            let b = try body(req)
            guard let url = b["url"]?.stringValue, let app = b["app"]?.stringValue else {
                throw .badRequest("'url' and 'app' are required")
            }
            let kind = Transfer.Kind(rawValue: b["kind"]?.stringValue ?? "download")
            guard let kind else { throw .badRequest("'kind' is download or upload") }
            var r = TransferRequest(
                kind: kind, url: url, app: app, session: b["session"]?.stringValue ?? "default",
                destination: b["to"]?.stringValue, sha256: b["sha256"]?.stringValue, source: b["file"]?.stringValue)
            if let p = b["protocol"]?.stringValue {
                guard let proto = UploadProtocol(rawValue: p) else { throw .badRequest("'protocol' is one of auto, ietf, ietf-3, tus, put") }
                r.uploadProtocol = proto
            }
            r.requirements = TransferRequirements(
                discretionary: b["discretionary"]?.boolValue ?? false, noCellular: b["no_cellular"]?.boolValue ?? false,
                requiresPower: b["requires_power"]?.boolValue ?? false)
            if let t = b["timeout_resource"], !t.isNull {
                guard let seconds = t.doubleValue ?? t.stringValue.flatMap(DurationText.parse).map(\.seconds), seconds > 0 else {
                    throw .badRequest("'timeout_resource' is a number of seconds or a duration like \"7d\"")
                }
                r.timeoutResource = seconds
            }
            return try await agent.createTransfer(r, caller: caller).json
        case ("GET", 2) where p[0] == "transfers":
            return try await agent.transfer(p[1], caller: caller).json
        case ("POST", 3) where p[0] == "transfers" && p[2] == "cancel", ("DELETE", 2) where p[0] == "transfers":
            return try await agent.cancel(p[1], caller: caller).json
        default:
            throw .notFound("no route \(req.method) \(req.path)")
        }
    }
}
