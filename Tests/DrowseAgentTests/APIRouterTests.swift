@testable import DrowseAgent
import DrowseCore
import DrowseSystem
import Testing

/// The router over a real agent (store, apps, scheduler; handlers by a launcher double): each
/// route's status and body, the errors at the edge (bodies, members, pages), and what a caller
/// who is not an admin is told about apps that are not theirs. No socket is involved.
@Suite("API router")
struct APIRouterTests {
    typealias F = AgentFetchTests

    static let admin = Caller.daemon
    /// Someone who is not an admin and runs no app here.
    static let stranger = Caller(uid: 4242, gid: 4242, isAdmin: false, userName: "stranger")

    func router() async throws -> (APIRouter, F.Fixture) {
        let f = try await F.Fixture(apps: ["news": "1h"], launcher: F.FakeLauncher(statuses: ["news": 1]))
        await f.agent.loadApps()
        await f.agent.startScheduler()
        return (APIRouter(agent: f.agent), f)
    }

    func call(_ r: APIRouter, _ method: String, _ path: String, body: String = "", query: [String: String] = [:],
              as caller: Caller = admin) async -> (Int, JSON) {
        await r.handle(APIRequest(method: method, path: path, query: query, body: Array(body.utf8)), caller: caller)
    }

    func errorCode(_ j: JSON) -> String? { j["error"]?["code"]?.stringValue }

    @Test("status, apps and one app answer 200 with the documented members")
    func reads() async throws {
        let (r, _) = try await router()
        let (s, status) = await call(r, "GET", "/v1/status")
        #expect(s == 200 && status["device_id"]?.stringValue == "test" && status["apps"]?.intValue == 1)
        #expect(status["running_handlers"]?.intValue == 0 && status["mqtt"]?["configured"]?.boolValue == false)
        let (a, apps) = await call(r, "GET", "/v1/apps")
        #expect(a == 200 && apps.arrayValue?.map { $0["id"]?.stringValue } == ["news"])
        let (d, detail) = await call(r, "GET", "/v1/apps/news")
        #expect(d == 200 && detail["minimum_interval"]?.stringValue == "1h" && detail["history"]?.arrayValue?.isEmpty == true)
    }

    @Test("a fetch runs and answers its result and times; the run is in the app's history")
    func fetch() async throws {
        let (r, _) = try await router()
        let (s, j) = await call(r, "POST", "/v1/apps/news/fetch")
        #expect(s == 200 && j["result"]?.stringValue == "failed")
        let started = try #require(j["started_at"]?.doubleValue), ended = try #require(j["ended_at"]?.doubleValue)
        #expect(ended >= started)
        let (_, detail) = await call(r, "GET", "/v1/apps/news")
        #expect(detail["history"]?.arrayValue?.count == 1 && detail["last_result"]?.stringValue == "failed")
    }

    @Test("unknown routes and apps are 404; another user's app answers exactly as a missing one")
    func notFound() async throws {
        let (r, _) = try await router()
        let (s1, j1) = await call(r, "GET", "/v2/status")
        let (s2, _) = await call(r, "DELETE", "/v1/status")
        let (s3, ghost) = await call(r, "POST", "/v1/apps/ghost/fetch")
        let (s4, hidden) = await call(r, "POST", "/v1/apps/news/fetch", as: Self.stranger)
        #expect([s1, s2, s3, s4] == [404, 404, 404, 404] && errorCode(j1) == "not_found")
        #expect(ghost["error"]?["message"]?.stringValue == "no app 'ghost'" && hidden["error"]?["message"]?.stringValue == "no app 'news'")
        let (_, apps) = await call(r, "GET", "/v1/apps", as: Self.stranger)
        #expect(apps.arrayValue?.isEmpty == true)
    }

    @Test("bodies and members are checked at the edge: 400 with the reason")
    func badInput() async throws {
        let (r, _) = try await router()
        for (path, body) in [
            ("/v1/apps/news/report", "not json"),
            ("/v1/apps/news/report", "[1, 2]"),
            ("/v1/transfers", #"{"url": 5, "app": "news"}"#),
            ("/v1/transfers", #"{"app": "news"}"#),
            ("/v1/transfers", #"{"url": "http://127.0.0.1/x", "app": "news", "kind": "sideways"}"#),
            ("/v1/transfers", #"{"url": "http://127.0.0.1/x", "app": "news", "timeout_resource": 1e999}"#),
            ("/v1/transfers", #"{"url": "http://127.0.0.1/x", "app": "news", "discretionary": "yes"}"#),
            ("/v1/transfers", #"{"url": "http://127.0.0.1/x", "app": "news", "content_type": "text/plain\r\nX: y"}"#),
            ("/v1/apps/news/events/e1/complete", #"{"result": "great"}"#),
        ] {
            let (s, j) = await call(r, "POST", path, body: body)
            #expect(s == 400 && errorCode(j) == "bad_request", "\(path) \(body): \(s) \(j)")
        }
        for limit in ["0", "501", "x"] {
            let (s, _) = await call(r, "GET", "/v1/transfers", query: ["limit": limit])
            #expect(s == 400, "limit \(limit)")
        }
    }

    @Test("metrics are for admins only; a report is stored and shown")
    func metricsAndReport() async throws {
        let (r, _) = try await router()
        let (s, body, type) = await r.metrics(caller: Self.stranger)
        #expect(s == 403 && type == "application/json" && body.contains("forbidden"))
        let (ok, text, textType) = await r.metrics(caller: Self.admin)
        #expect(ok == 200 && textType.hasPrefix("text/plain") && text.contains("drowse_apps 1"))
        let (rs, report) = await call(r, "POST", "/v1/apps/news/report", body: #"{"version": "1.2"}"#)
        #expect(rs == 200 && report["report"]?["version"]?.stringValue == "1.2")
        let (_, detail) = await call(r, "GET", "/v1/apps/news")
        #expect(detail["report"]?["version"]?.stringValue == "1.2")
    }

    @Test("updates: refreshed from their directories for admins only, and carried by the fleet status")
    func updates() async throws {
        let (r, f) = try await router()
        let (denied, error) = await call(r, "POST", "/v1/updates/refresh", as: Self.stranger)
        #expect(denied == 403 && errorCode(error) == "forbidden")
        let (s0, none) = await call(r, "POST", "/v1/updates/refresh")
        #expect(s0 == 200 && none.serialized == #"{"updates":{}}"#)
        let files = UpdateFiles(root: UpdateFiles.directory(stateDir: f.dir + "/state"), id: "u1")
        try files.begin(request: UpdateRequest(id: "u1", package: "hello"), state: .downloading, step: .download, now: 1000)
        let (s1, one) = await call(r, "POST", "/v1/updates/refresh")
        #expect(s1 == 200 && APIWire.Updates(json: one).updates == ["hello": UpdateReport(id: "u1", state: .downloading, times: [.downloading: 1000])])
        let agent = f.agent
        let published = await Task { @DaemonActor in agent.parts.mqtt.fleetStatus().updates["hello"]?.id }.value
        #expect(published == "u1")
    }

    @Test("tasks: begun, read, ended; an unknown task is 404")
    func tasks() async throws {
        let (r, f) = try await router()
        // The lifecycles as start-up configures them (without adopting cgroups on this machine).
        await f.agent.configureLifecycles()
        let (s, task) = await call(r, "POST", "/v1/apps/news/tasks", body: #"{"name": "sync"}"#)
        #expect(s == 200 && task["state"]?.stringValue == "open" && task["name"]?.stringValue == "sync")
        let id = try #require(task["id"]?.stringValue)
        let (g, got) = await call(r, "GET", "/v1/apps/news/tasks/\(id)")
        #expect(g == 200 && got["id"]?.stringValue == id)
        let (e, ended) = await call(r, "DELETE", "/v1/apps/news/tasks/\(id)")
        #expect(e == 200 && ended["state"]?.stringValue == "ended")
        let (n, _) = await call(r, "GET", "/v1/apps/news/tasks/nosuch")
        #expect(n == 404)
    }

    // MARK: - The router and docs/openapi.json

    static func openAPI(from file: String = #filePath) throws -> JSON {
        // .../Tests/DrowseAgentTests/X.swift → the checkout's root.
        let root = file.split(separator: "/", omittingEmptySubsequences: false).dropLast(3).joined(separator: "/")
        return try JSON.parse(bytes: Array(try FileSystem.readText(root + "/docs/openapi.json", limit: 1 << 20).utf8))
    }

    @Test("each part's refusal is answered with its status and code, here and nowhere else", arguments: [
        (AppRegistry.Refusal.noApp("x") as any APIRefusal, 404, "not_found"), (AppRegistry.Refusal.invalid("x"), 409, "invalid_app"),
        (FetchService.Refusal.busy("a fetch runs"), 409, "busy"), (FetchService.Refusal.store("disk full"), 500, "internal"),
        (LifecycleService.Refusal.unknownTask(app: "a", id: "t"), 404, "not_found"),
        (LifecycleService.Refusal.unknownEvent(app: "a", id: "e"), 404, "not_found"),
        (LifecycleService.Refusal.noBackgroundTime("a"), 409, "no_background_time"),
        (TransferService.Refusal.app(.noApp("x")), 404, "not_found"), (TransferService.Refusal.badRequest("why"), 400, "bad_request"),
        (TransferService.Refusal.noSuchUser(app: "a", user: "u"), 409, "no_such_user"), (TransferService.Refusal.forbidden("why"), 403, "forbidden"),
        (TransferService.Refusal.tooMany(app: "a", unfinished: 256), 429, "too_many_transfers"),
        (TransferService.Refusal.noTransfer("t1"), 404, "not_found"), (TransferService.Refusal.noPageStart("t9"), 400, "bad_request"),
        (FetchService.Refusal.noFetchCommand("a"), 409, "no_fetch_command"), (FetchService.Refusal.stopping, 409, "busy"),
        (MQTTLink.Refusal.store("disk full"), 500, "internal"),
    ] as [(any APIRefusal, Int, String)])
    func refusals(refusal: any APIRefusal, status: Int, code: String) {
        #expect(refusal.answer.status == status && refusal.answer.code == code)
    }

    @Test("every route the router serves is in docs/openapi.json, and every documented operation is a route")
    func documentMatchesRouter() throws {
        let doc = try Self.openAPI()
        var documented: Set<String> = []
        guard case .object(let paths)? = doc["paths"] else { Issue.record("no paths"); return }
        for (path, item) in paths {
            guard case .object(let operations) = item else { Issue.record("\(path): not an object"); continue }
            for (method, operation) in operations {
                documented.insert("\(method.uppercased()) \(path)")
                // The operation's id names the route.
                let id = try #require(operation["operationId"]?.stringValue)
                let route = try #require(APIRoute(rawValue: id), "operationId \(id) is no route")
                #expect(route.method == method.uppercased() && route.template == path, "\(id)")
            }
        }
        let served = Set(APIRoute.allCases.map { "\($0.method) \($0.template)" })
        #expect(documented == served, "documented only: \(documented.subtracting(served)); served only: \(served.subtracting(documented))")
    }

    @Test("each route matches its own path and no other route's; near misses match nothing")
    func matching() {
        for route in APIRoute.allCases {
            let path = route.template.replacingParameters()
            let m = APIRoute.match(method: route.method, path: path)
            #expect(m?.route == route, "\(route.method) \(path) matched \(String(describing: m?.route))")
        }
        for (method, path) in [("GET", "/v1/status/"), ("GET", "//v1/status"), ("GET", "/v1/apps//fetch"), ("PUT", "/v1/status"),
                               ("GET", "v1/status"), ("POST", "/v1/apps/x"), ("GET", "/v1/apps/x/tasks/y/end"), ("get", "/v1/status")] {
            #expect(APIRoute.match(method: method, path: path) == nil, "\(method) \(path)")
        }
        #expect(APIRoute.match(method: "POST", path: "/v1/apps/a.b-c_d/events/e7/complete").map { $0.parameters } == ["a.b-c_d", "e7"])
    }
}

extension String {
    /// A route's template with each `{name}` replaced by `name1`.
    fileprivate func replacingParameters() -> String {
        split(separator: "/", omittingEmptySubsequences: false).map { s in
            s.hasPrefix("{") ? String(s.dropFirst().dropLast()) + "1" : String(s)
        }.joined(separator: "/")
    }
}
