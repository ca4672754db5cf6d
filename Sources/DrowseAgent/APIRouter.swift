import DrowseCore
import DrowseSystem

/// One parsed API request.
package struct APIRequest: Sendable {
    package var method: String
    package var path: String
    package var query: [String: String]
    package var body: [UInt8]
}

/// Every route of the local API: its method and path template, as docs/openapi.json lists them
/// (a test checks that the two agree, both ways).
package enum APIRoute: String, CaseIterable, Sendable {
    case status, conditions, refreshConditions, apps, app, fetch, used, report, quit, activate, deactivate
    case events, completeEvent, beginTask, task, endTask, endTaskByDelete
    case transfers, createTransfer, transfer, cancelTransfer, cancelTransferByDelete, metrics, refreshUpdates

    package var method: String {
        switch self {
        case .status, .conditions, .apps, .app, .events, .task, .transfers, .transfer, .metrics: "GET"
        case .endTaskByDelete, .cancelTransferByDelete: "DELETE"
        default: "POST"
        }
    }

    /// The path, with `{app}`, `{event}`, `{task}` and `{transfer}` for its parameters.
    package var template: String {
        switch self {
        case .status: "/v1/status"
        case .conditions: "/v1/conditions"
        case .refreshConditions: "/v1/conditions/refresh"
        case .apps: "/v1/apps"
        case .app: "/v1/apps/{app}"
        case .fetch: "/v1/apps/{app}/fetch"
        case .used: "/v1/apps/{app}/used"
        case .report: "/v1/apps/{app}/report"
        case .quit: "/v1/apps/{app}/quit"
        case .activate: "/v1/apps/{app}/activate"
        case .deactivate: "/v1/apps/{app}/deactivate"
        case .events: "/v1/apps/{app}/events"
        case .completeEvent: "/v1/apps/{app}/events/{event}/complete"
        case .beginTask: "/v1/apps/{app}/tasks"
        case .task, .endTaskByDelete: "/v1/apps/{app}/tasks/{task}"
        case .endTask: "/v1/apps/{app}/tasks/{task}/end"
        case .transfers, .createTransfer: "/v1/transfers"
        case .transfer, .cancelTransferByDelete: "/v1/transfers/{transfer}"
        case .cancelTransfer: "/v1/transfers/{transfer}/cancel"
        case .metrics: "/v1/metrics"
        case .refreshUpdates: "/v1/updates/refresh"
        }
    }

    /// The route a request asks for, with its path parameters in order; nil: no route.
    package static func match(method: String, path: String) -> (route: APIRoute, parameters: [String])? {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map(String.init)
        guard path.hasPrefix("/") else { return nil }
        for route in allCases where route.method == method {
            let pattern = route.template.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
            guard pattern.count == segments.count else { continue }
            var parameters: [String] = []
            var matches = true
            for (want, got) in zip(pattern, segments) {
                if want.hasPrefix("{") {
                    guard !got.isEmpty else { matches = false; break }
                    parameters.append(got)
                } else if want != got {
                    matches = false
                    break
                }
            }
            if matches { return (route, parameters) }
        }
        return nil
    }
}

/// Maps `/v1/...` routes to the agent (docs/api.md; docs/openapi.json).
package struct APIRouter: Sendable {
    let agent: Agent

    /// `GET /v1/apps/ID/events`: the app id when the request asks for an app's event stream.
    static func eventStreamApp(method: String, path: String) -> String? {
        guard let m = APIRoute.match(method: method, path: path), m.route == .events else { return nil }
        return m.parameters[0]
    }

    /// Opens the app's event stream on `sink`, or says why not.
    package func openEventStream(_ app: String, caller: Caller, sink: EventSink) async -> APIError? {
        do { try await agent.openEventStream(app, caller: caller, sink: sink) } catch { return error }
        return nil
    }

    package func eventStreamClosed(_ app: String, sink: EventSink) async {
        await agent.eventStreamClosed(app, sink: sink)
    }

    package init(agent: Agent) { self.agent = agent }

    /// Transfers in one `GET /v1/transfers` answer unless `limit` says otherwise: about 50 KiB
    /// of JSON. A full page means there may be more: ask again with `after=` its last id.
    package static let defaultPage = 100
    /// The most `limit` may ask for (about 250 KiB of JSON).
    package static let maxPage = 500

    /// `GET /v1/metrics` answers text, not JSON (the one route that does).
    static func isMetrics(method: String, path: String) -> Bool { APIRoute.match(method: method, path: path)?.route == .metrics }

    /// The metrics in the Prometheus text format, or the error as JSON text; with the answer's Content-Type.
    /// Admin callers only (root, drowsed's user, the `drowse` group): the series name every app
    /// and say what each did, which `drowse status` shows only to them too.
    package func metrics(caller: Caller) async -> (status: Int, body: String, contentType: String) {
        await agent.worked()
        if caller.isAdmin { return (200, await agent.metricsText(), "text/plain; version=0.0.4; charset=utf-8") }
        let error = APIError.forbidden("metrics are for root and the drowse group")
        return (error.status, error.wire.json.pretty + "\n", "application/json")
    }

    package func handle(_ req: APIRequest, caller: Caller) async -> (Int, JSON) {
        await agent.worked()
        do {
            return (200, try await route(req, caller: caller))
        } catch {
            return (error.status, error.wire.json)
        }
    }

    private func body(_ req: APIRequest) throws(APIError) -> JSON {
        if req.body.isEmpty { return .object([]) }
        let j: JSON
        do { j = try JSON.parse(bytes: req.body) } catch { throw .badRequest(error.description) }
        guard case .object = j else { throw APIError.badRequest("the body must be a JSON object") }
        return j
    }

    /// A string member, absent or null for nil; any other type is the caller's mistake, said
    /// so rather than read as absent (`"to": 5` must not download to the inbox instead).
    private func string(_ b: JSON, _ key: String) throws(APIError) -> String? {
        guard let v = b[key], !v.isNull else { return nil }
        guard let s = v.stringValue else { throw .badRequest("'\(key)' must be a string") }
        return s
    }

    private func flag(_ b: JSON, _ key: String) throws(APIError) -> Bool {
        guard let v = b[key], !v.isNull else { return false }
        guard let f = v.boolValue else { throw .badRequest("'\(key)' must be true or false") }
        return f
    }

    /// `timeout_resource`: seconds as a number, or a duration such as "7d". Checked here, at the
    /// edge, to be finite, above zero and at most `TimeLimits.maxDuration` (3650 days): 1e300
    /// or 1e999 (which parses as infinity) once became a deadline that trapped in a timer.
    private func duration(_ b: JSON, _ key: String) throws(APIError) -> Double? {
        guard let v = b[key], !v.isNull else { return nil }
        let seconds: Double?
        switch v {
        case .number(let n): seconds = n
        case .string(let s): seconds = DurationText.parse(s)?.seconds
        default: seconds = nil
        }
        guard let seconds, TimeLimits.isValidDuration(seconds) else {
            throw .badRequest("'\(key)' is a number of seconds or a duration like \"7d\", above 0 and at most 3650 days")
        }
        return seconds
    }

    private func route(_ req: APIRequest, caller: Caller) async throws(APIError) -> JSON {
        guard let (route, p) = APIRoute.match(method: req.method, path: req.path) else {
            throw .notFound("no route \(req.method) \(req.path)")
        }
        switch route {
        case .status:
            return await agent.status(caller: caller)
        case .conditions:
            return await agent.conditions(refresh: req.query["refresh"] == "1" || req.query["refresh"] == "true")
        case .refreshConditions:
            return await agent.conditions(refresh: true)
        case .refreshUpdates:
            guard caller.isAdmin else { throw .forbidden("updates are for root and the drowse group") }
            return await agent.refreshUpdates()
        case .apps:
            return await agent.appsList(caller: caller)
        case .app:
            return try await agent.appDetail(p[0], caller: caller)
        case .fetch:
            let outcome = try await agent.fetchNow(p[0], caller: caller)
            let end = APIWire.RunEnd(
                result: outcome.result.rawValue, ending: outcome.summary,
                startedAt: agent.timeline.wall(outcome.startedAt), endedAt: agent.timeline.wall(outcome.endedAt))
            return APIWire.FetchResult(id: p[0], end: end).json
        case .used:
            try await agent.used(p[0], caller: caller)
            return APIWire.Recorded(id: p[0]).json
        case .report:
            let b = try body(req)
            let fields: [String: String]
            do throws(ReportError) { fields = try AppReport.fields(b) } catch { throw .badRequest(error.description) }
            return try await agent.report(p[0], fields: fields, caller: caller)
        case .quit:
            let n = try await agent.quit(p[0], caller: caller)
            return APIWire.QuitAnswer(id: p[0], cancelledTransfers: n).json
        case .completeEvent:
            let b = try body(req)
            guard let text = try string(b, "result"), let result = FetchResult(rawValue: text) else {
                throw .badRequest("'result' is one of new-data, no-data, failed")
            }
            try await agent.completeEvent(p[0], event: p[1], result: result, caller: caller)
            return APIWire.Recorded(id: p[1]).json
        case .beginTask:
            let b = try body(req)
            let name = try string(b, "name")
            if let name, name.utf8.count > 256 { throw .badRequest("'name' is at most 256 bytes") }
            return try await agent.beginTask(p[0], name: name, caller: caller)
        case .task:
            return try await agent.task(p[0], task: p[1], caller: caller)
        case .endTask, .endTaskByDelete:
            return try await agent.endTask(p[0], task: p[1], caller: caller)
        case .activate, .deactivate:
            return try await agent.activate(p[0], route == .activate, caller: caller)
        case .transfers:
            var limit = Self.defaultPage
            if let text = req.query["limit"] {
                guard let n = Int(text), (1...Self.maxPage).contains(n) else { throw .badRequest("'limit' is a number from 1 to \(Self.maxPage)") }
                limit = n
            }
            let after = req.query["after"].flatMap { $0.isEmpty ? nil : $0 }
            let skew = agent.timeline.skew
            return .array(try await agent.transfers(app: req.query["app"], after: after, limit: limit, caller: caller).map { $0.json(wall: skew) })
        case .createTransfer:
            let b = try body(req)
            guard let url = try string(b, "url"), let app = try string(b, "app") else {
                throw .badRequest("'url' and 'app' are required")
            }
            let kind = Transfer.Kind(rawValue: try string(b, "kind") ?? "download")
            guard let kind else { throw .badRequest("'kind' is download or upload") }
            var r = TransferRequest(
                kind: kind, url: url, app: app, session: try string(b, "session") ?? "default",
                destination: try string(b, "to"), sha256: try string(b, "sha256"), source: try string(b, "file"))
            if let text = try string(b, "protocol") {
                guard let proto = UploadProtocol(rawValue: text) else { throw .badRequest("'protocol' is one of auto, ietf, ietf-3, tus, put") }
                r.uploadProtocol = proto
            }
            if let ct = try string(b, "content_type") {
                // It goes into a request header: one line of visible ASCII, type/subtype.
                guard (3...255).contains(ct.utf8.count), ct.contains("/"),
                    ct.utf8.allSatisfy({ (0x21...0x7e).contains($0) || $0 == 0x20 })
                else { throw .badRequest("'content_type' is a media type such as \"image/jpeg\"") }
                r.contentType = ct
            }
            r.requirements = TransferRequirements(
                discretionary: try flag(b, "discretionary"), noCellular: try flag(b, "no_cellular"),
                requiresPower: try flag(b, "requires_power"))
            if let seconds = try duration(b, "timeout_resource") { r.timeoutResource = seconds }
            return try await agent.createTransfer(r, caller: caller).json(wall: agent.timeline.skew)
        case .transfer:
            guard let text = req.query["wait"] else {
                return try await agent.transfer(p[0], caller: caller).json(wall: agent.timeline.skew)
            }
            guard let seconds = Double(text), seconds.isFinite, (0...Agent.maxTransferWait).contains(seconds) else {
                throw .badRequest("'wait' is a number of seconds from 0 to \(Int(Agent.maxTransferWait))")
            }
            return try await agent.transfer(p[0], caller: caller, waitingUpTo: seconds).json(wall: agent.timeline.skew)
        case .cancelTransfer, .cancelTransferByDelete:
            return try await agent.cancel(p[0], caller: caller).json(wall: agent.timeline.skew)
        case .events, .metrics:
            // Answered by the server before it reaches here (a stream; Prometheus text).
            throw .notFound("no route \(req.method) \(req.path)")
        }
    }
}

/// A part's refusal of a request, as the API answers it. The conformances below are the one
/// place that knows which HTTP status and error code each refusal is (docs/api.md, "Errors").
protocol APIRefusal: Error {
    var answer: APIError { get }
}

extension AppRegistry.Refusal: APIRefusal {
    var answer: APIError {
        switch self {
        case .noApp: .notFound(description)
        case .invalid: APIError(409, "invalid_app", description)
        }
    }
}

extension FetchService.Refusal: APIRefusal {
    var answer: APIError {
        switch self {
        case .busy(let why): APIError(409, "busy", why)
        case .noFetchCommand(let app): APIError(409, "no_fetch_command", "app '\(app)' has no fetch command")
        case .stopping: APIError(409, "busy", "drowsed is stopping")
        case .store(let why): .internal(why)
        }
    }
}

extension MQTTLink.Refusal: APIRefusal {
    var answer: APIError {
        switch self {
        case .store(let why): .internal(why)
        }
    }
}

extension LifecycleService.Refusal: APIRefusal {
    var answer: APIError {
        switch self {
        case .unknownApp(let app): .notFound("no app '\(app)'")
        case .unknownTask(let app, let id?): .notFound("no task '\(id)' of app '\(app)'")
        case .unknownTask(let app, nil): .notFound("no such task of app '\(app)'")
        case .unknownEvent(let app, let id): .notFound("no event '\(id)' waiting for completion by app '\(app)'")
        case .noBackgroundTime(let app):
            APIError(409, "no_background_time", "app '\(app)' has used its background task time; it gets more after it has been suspended")
        }
    }
}

extension TransferService.Refusal: APIRefusal {
    var answer: APIError {
        switch self {
        case .app(let r): r.answer
        case .badRequest: .badRequest(description)
        case .noSuchUser: APIError(409, "no_such_user", description)
        case .forbidden: .forbidden(description)
        case .tooMany: APIError(429, "too_many_transfers", description)
        case .store: .internal(description)
        case .noTransfer: .notFound(description)
        case .noPageStart: .badRequest(description)
        }
    }
}

/// A part asked on the API's behalf: its refusal becomes the API's answer.
func refused<T, R: APIRefusal>(_ body: () throws(R) -> T) throws(APIError) -> T {
    do { return try body() } catch { throw error.answer }
}
