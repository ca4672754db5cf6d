import DrowseCore
import Testing

/// Every answer type of `APIWire` against its component schema in docs/openapi.json: a fully
/// populated and a minimal instance each, encoded as the agent sends them.
@Suite("APIWire against docs/openapi.json")
struct WireSchemaTests {
    static let spec: JSON = {
        guard let text = try? RepoFile.read("docs/openapi.json"), let json = try? JSON.parse(text) else { return .null }
        return json
    }()
    static let schemas: [(String, JSON)] = {
        guard case .object(let members)? = spec["components"]?["schemas"] else { return [] }
        return members
    }()
    static let schemaByName = Dictionary(schemas, uniquingKeysWith: { a, _ in a })

    /// Component schemas that are request bodies, not answers: they have no wire type.
    static let requestBodies: Set<String> = ["TransferRequest", "Completion", "TaskRequest"]

    static let report = APIWire.Report(["battery": "ok", "version": "2.1"])
    static let update = UpdateReport(
        id: "u1", from: "0.1.0-1", to: "0.2.0-1", state: .rolledBack, reason: "drowsed.service was not active",
        times: [.downloading: 1_700_000_000, .installing: 1_700_000_100.5, .rolledBack: 1_700_000_400])
    static let limits = APIWire.Limits(processes: 64, memory: 268_435_456, memoryText: "256M", processesEnforcedBy: "cgroup", memoryEnforcedBy: "rlimit")
    static let noLimits = APIWire.Limits(processes: nil, memory: nil, memoryText: "unlimited", processesEnforcedBy: "rlimit", memoryEnforcedBy: "rlimit")
    static let run = APIWire.Run(event: "fetch", trigger: "scheduled", end: end)
    static let end = APIWire.RunEnd(result: "new-data", ending: "exit status 0", startedAt: 1_700_000_000.5, endedAt: 1_700_000_002)
    static let state = APIWire.AppState(state: "background", reason: "handler running", since: 1_700_000_000)
    static let conditions = APIWire.Conditions(powerSource: "battery", batteryPercent: 71, charging: true, network: "wifi", interface: "wlan0", ssid: "home", metered: true)
    static let noConditions = APIWire.Conditions(powerSource: "unknown", batteryPercent: nil, charging: nil, network: "none", interface: nil, ssid: nil, metered: false)

    static func app(history: [APIWire.Run]?, full: Bool) -> APIWire.ValidApp {
        full
            ? APIWire.ValidApp(
                id: "news", file: "/etc/drowse/apps.d/news.toml", lastResult: "no-data", lastFetch: 1_700_000_000, nextFetch: 1_700_003_600,
                nextFetchReason: "interval", eligibleAt: 1_700_003_000, dueBy: 1_700_004_000, toleranceSeconds: 600, minimumInterval: "1h",
                consecutiveFailures: 2, lastUsed: 1_699_999_000, user: "news", running: true, resident: true, limits: limits, report: report,
                state: state, history: history)
            : APIWire.ValidApp(
                id: "news", file: "/etc/drowse/apps.d/news.toml", lastResult: nil, lastFetch: nil, nextFetch: nil, nextFetchReason: "",
                eligibleAt: nil, dueBy: nil, toleranceSeconds: nil, minimumInterval: "15m", consecutiveFailures: nil, lastUsed: nil, user: nil,
                running: false, resident: false, limits: noLimits, report: APIWire.Report([:]),
                state: APIWire.AppState(state: nil, reason: nil, since: nil), history: history)
    }

    static let invalid = APIWire.InvalidApp(id: "broken", error: "no fetch command", file: "/etc/drowse/apps.d/broken.toml")

    static func status(full: Bool) -> APIWire.Status {
        APIWire.Status(
            version: "1.4.0", deviceID: "pi-kitchen",
            mqtt: full
                ? APIWire.Status.MQTT(
                    configured: true, connected: true, url: "mqtts://broker:8883", broker: "broker:8883", subscribed: true, failedAttempts: 1,
                    lastError: "connection refused", refusedNotifications: 3, unexpectedMessages: 1, inboundGate: true, protocolVersion: "5",
                    pingInterval: 600, pingLearnedOn: "wlan0", maxKeepalive: 1200)
                : APIWire.Status.MQTT(
                    configured: false, connected: false, url: nil, broker: nil, subscribed: false, failedAttempts: 0, lastError: nil,
                    refusedNotifications: 0, unexpectedMessages: 0, inboundGate: false, protocolVersion: nil, pingInterval: nil,
                    pingLearnedOn: nil, maxKeepalive: nil),
            conditions: full ? conditions : noConditions, nextWindow: full ? 1_700_000_300 : nil, nextWindowApps: full ? ["news", "weather"] : [],
            apps: full ? 3 : 0, invalidApps: full ? 1 : 0,
            lifecycle: full
                ? APIWire.Status.Lifecycle(suspension: "cgroup-v2", cgroup: "/sys/fs/cgroup/drowse", memoryPressure: "psi", spawnerPID: 812, spawnerRefused: 1, spawnerFallbacks: 2)
                : APIWire.Status.Lifecycle(suspension: "sigstop", cgroup: nil, memoryPressure: "unavailable", spawnerPID: nil, spawnerRefused: 0, spawnerFallbacks: 0),
            journal: APIWire.Status.Journal(syncs: full ? 12 : 0, maxWaitMS: full ? 20.5 : 0, lastWaitMS: full ? 3.2 : 0),
            runningHandlers: full ? 2 : 0, queuedHandlers: full ? 1 : 0)
    }

    static func transfer(full: Bool) -> APIWire.Transfer {
        full
            ? APIWire.Transfer(
                id: "t-1", app: "news", session: "photos", kind: "upload", state: "running", url: "https://example.org/up", bytesDone: 1000,
                bytesTotal: 4000, reason: "retrying", location: "https://example.org/up/1", sha256: String(repeating: "a", count: 64),
                destination: "/var/lib/news/x", source: "/var/lib/news/y", uploadProtocol: "tus", createdAt: 1_700_000_000.25,
                finishedAt: 1_700_000_100, timeoutAt: 1_700_600_000, discretionary: true, noCellular: true, requiresPower: true,
                bytesSent: 2000, bytesConfirmed: 1000, uploadURL: "https://example.org/up/1", contentType: "image/jpeg", attempts: 2,
                retries: 1, nextRetryAt: 1_700_000_200)
            : APIWire.Transfer(
                id: "t-2", app: "news", session: "default", kind: "download", state: "waiting", url: "https://example.org/f", bytesDone: 0,
                bytesTotal: nil, reason: nil, location: nil, sha256: nil, destination: nil, source: nil, uploadProtocol: nil,
                createdAt: 1_700_000_000, finishedAt: nil, timeoutAt: nil, discretionary: false, noCellular: false, requiresPower: false,
                bytesSent: nil, bytesConfirmed: nil, uploadURL: nil, contentType: nil, attempts: nil, retries: nil, nextRetryAt: nil)
    }

    /// Each answer schema and its instances: fully populated first, then minimal.
    static let instances: [String: [JSON]] = [
        "Error": [APIWire.Error(code: "not_found", message: "no app 'x'").json, APIWire.Error(code: "internal", message: "").json],
        "Conditions": [conditions.json, noConditions.json],
        "Status": [status(full: true).json, status(full: false).json],
        "Limits": [limits.json, noLimits.json],
        "Report": [report.json, APIWire.Report([:]).json],
        "Run": [run.json, APIWire.Run(event: "transfers", trigger: nil, end: APIWire.RunEnd(result: "failed", ending: "", startedAt: 0, endedAt: 0)).json],
        "ValidApp": [app(history: [run], full: true).json, app(history: nil, full: false).json],
        "InvalidApp": [invalid.json],
        "App": [APIWire.App.valid(app(history: nil, full: true)).json, APIWire.App.valid(app(history: nil, full: false)).json, APIWire.App.invalid(invalid).json],
        "AppDetail": [APIWire.App.valid(app(history: [run, run], full: true)).json, APIWire.App.valid(app(history: [], full: false)).json, APIWire.App.invalid(invalid).json],
        "FetchResult": [APIWire.FetchResult(id: "news", end: end).json],
        "Recorded": [APIWire.Recorded(id: "news").json],
        "ReportAnswer": [APIWire.ReportAnswer(id: "news", report: report).json, APIWire.ReportAnswer(id: "news", report: APIWire.Report([:])).json],
        "UpdateReport": [update.json, UpdateReport(id: "u2", state: .downloading).json],
        "Updates": [APIWire.Updates(["drowse": update, "hello": UpdateReport(id: "u2", state: .waiting)]).json, APIWire.Updates([:]).json],
        "QuitAnswer": [APIWire.QuitAnswer(id: "news", cancelledTransfers: 2).json],
        "StateAnswer": [APIWire.StateAnswer(id: "news", state: state).json, APIWire.StateAnswer(id: "news", state: APIWire.AppState(state: nil, reason: nil, since: nil)).json],
        "Task": [
            APIWire.Task(id: "k-1", app: "news", name: "upload", state: "open", expiresAt: 1_700_000_030, timeRemaining: 29.5).json,
            APIWire.Task(id: "k-1", app: "news", name: nil, state: "expired", expiresAt: 1_700_000_030, timeRemaining: 0).json,
        ],
        "Transfer": [transfer(full: true).json, transfer(full: false).json],
        // One line of the event stream: per kind, fully populated, then minimal.
        "Event": [
            APIWire.Event.hello(app: "news", state: "suspended").json, APIWire.Event.hello(app: "news", state: nil).json,
            APIWire.Event.delivered(id: "e1", deadline: 1_700_000_030.5, .fetch(reason: "scheduled"), attempt: 2).json,
            APIWire.Event.delivered(id: "e1", deadline: nil, .fetch(reason: "manual"), attempt: 1).json,
            APIWire.Event.delivered(id: "e2", deadline: 1_700_000_030, .notification(payload: .object([("aps", .object([("content-available", 1)]))])), attempt: 1).json,
            APIWire.Event.delivered(id: "e2", deadline: nil, .notification(payload: "not json"), attempt: 1).json,
            APIWire.Event.delivered(id: "e3", deadline: 1_700_000_030, .transfers(session: "photos", transfers: [transfer(full: true), transfer(full: false)]), attempt: 3).json,
            APIWire.Event.delivered(id: "e3", deadline: nil, .transfers(session: "default", transfers: []), attempt: 1).json,
            APIWire.Event.taskExpiring(id: "e4", task: ("k-1", 1_700_000_030, 4.5)).json,
            APIWire.Event.taskExpiring(id: "e4", task: ("k-1", 1_700_000_030, 0)).json,
        ],
    ]

    @Test("docs/openapi.json is read")
    func specRead() {
        #expect(Self.schemas.count > 10)
    }

    @Test("every answer schema has a wire type, and only request bodies have none")
    func everySchemaCovered() {
        let names = Set(Self.schemas.map(\.0))
        #expect(names.subtracting(Self.requestBodies) == Set(Self.instances.keys))
        // The exceptions are request bodies, and no answer refers to them.
        let answers = Self.refs(in: Self.spec, under: "responses")
        #expect(Self.requestBodies.isSubset(of: Self.refs(in: Self.spec, under: "requestBody")))
        #expect(Self.requestBodies.isDisjoint(with: answers))
        // Every schema an answer refers to (2xx or an error) is covered.
        #expect(answers.isSubset(of: Set(Self.instances.keys)))
    }

    @Test("every wire type's encodings match their schema")
    func encodingsMatch() {
        for (name, values) in Self.instances.sorted(by: { $0.key < $1.key }) {
            guard let schema = Self.schemaByName[name] else {
                Issue.record("no schema \(name)")
                continue
            }
            for (i, value) in values.enumerated() {
                let problems = Self.check(value, against: schema, at: "\(name)[\(i)]")
                #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
            }
        }
    }

    @Test("what the wire types encode they decode again")
    func roundTrip() throws {
        #expect(APIWire.Status(json: Self.status(full: true).json) == Self.status(full: true))
        #expect(APIWire.Status(json: Self.status(full: false).json) == Self.status(full: false))
        #expect(APIWire.Transfer(json: Self.transfer(full: true).json) == Self.transfer(full: true))
        #expect(APIWire.Transfer(json: Self.transfer(full: false).json) == Self.transfer(full: false))
        let detail = APIWire.App.valid(Self.app(history: [Self.run], full: true))
        #expect(APIWire.App(json: detail.json) == detail)
        #expect(APIWire.App(json: APIWire.App.invalid(Self.invalid).json) == .invalid(Self.invalid))
        #expect(APIWire.Error(json: APIWire.Error(code: "busy", message: "m").json) == APIWire.Error(code: "busy", message: "m"))
    }

    @Test("reading takes what is there: unknown keys and values, missing and mistyped members")
    func tolerantReading() throws {
        let newer = try JSON.parse(#"{"power_source": "solar", "battery_percent": null, "charging": "yes", "network": "lora", "new": 1}"#)
        let c = APIWire.Conditions(json: newer)
        #expect(c.powerSource == "solar" && c.network == "lora" && c.charging == nil && c.metered == nil)
        let task = APIWire.Task(json: .object([("id", "k")]))
        #expect(task.id == "k" && task.state == nil && task.timeRemaining == nil)
        #expect(APIWire.Status(json: "not an object").version == nil)
        #expect(APIWire.App(json: .object([("valid", false)])) == .invalid(APIWire.InvalidApp(json: .object([]))))
    }

    // MARK: the checker

    /// The names of the component schemas referred to anywhere under a member named `key`.
    static func refs(in json: JSON, under key: String, inside: Bool = false) -> Set<String> {
        switch json {
        case .object(let members):
            var out: Set<String> = []
            for (k, v) in members {
                if inside, k == "$ref", let r = v.stringValue, r.hasPrefix("#/components/schemas/") { out.insert(String(r.dropFirst(21))) }
                out.formUnion(refs(in: v, under: key, inside: inside || k == key))
            }
            return out
        case .array(let items): return items.reduce(into: []) { $0.formUnion(refs(in: $1, under: key, inside: inside)) }
        default: return []
        }
    }

    static func resolve(_ schema: JSON) -> JSON {
        guard let ref = schema["$ref"]?.stringValue, let name = ref.split(separator: "/").last else { return schema }
        return schemaByName[String(name)] ?? .null
    }

    static func typeName(_ v: JSON) -> String {
        switch v {
        case .null: "null"
        case .bool: "boolean"
        case .number(let n): n.rounded() == n ? "integer" : "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    static func typeMatches(_ v: JSON, _ type: String) -> Bool {
        let t = typeName(v)
        return t == type || (type == "number" && t == "integer")
    }

    /// What in `value` the schema does not allow (empty: it matches). Knows the keywords
    /// docs/openapi.json uses for answers.
    static func check(_ value: JSON, against schema: JSON, at path: String) -> [String] {
        let schema = resolve(schema)
        var problems: [String] = []
        if let t = schema["type"] {
            let types = t.arrayValue?.compactMap(\.stringValue) ?? [t.stringValue ?? ""]
            if !types.contains(where: { typeMatches(value, $0) }) { problems.append("\(path): \(typeName(value)), not \(types.joined(separator: " or "))") }
        }
        if let options = schema["enum"]?.arrayValue, !options.contains(value) { problems.append("\(path): \(value.serialized) is not one of \(JSON.array(options).serialized)") }
        if let c = schema["const"], c != value { problems.append("\(path): \(value.serialized), not \(c.serialized)") }
        if let branches = schema["allOf"]?.arrayValue {
            for b in branches { problems += check(value, against: b, at: path) }
        }
        if let branches = schema["oneOf"]?.arrayValue {
            let matching = branches.filter { check(value, against: $0, at: path).isEmpty }.count
            if matching != 1 { problems.append("\(path): matches \(matching) branches of oneOf, not 1") }
        }
        if let not = schema["not"], check(value, against: not, at: path).isEmpty { problems.append("\(path): matches what \"not\" excludes") }
        if case .object(let members) = value {
            for key in schema["required"]?.arrayValue?.compactMap(\.stringValue) ?? [] where value[key] == nil {
                problems.append("\(path): required '\(key)' missing")
            }
            let properties = schema["properties"]
            let closed = schema["additionalProperties"] == .bool(false) || properties != nil
            for (k, v) in members {
                if let p = properties?[k] {
                    problems += check(v, against: p, at: "\(path).\(k)")
                } else if let extra = schema["additionalProperties"], case .object = extra {
                    problems += check(v, against: extra, at: "\(path).\(k)")
                } else if closed {
                    problems.append("\(path): '\(k)' is not in the schema")
                }
            }
        }
        if case .array(let items) = value, let itemSchema = schema["items"] {
            for (i, item) in items.enumerated() { problems += check(item, against: itemSchema, at: "\(path)[\(i)]") }
        }
        return problems
    }
}
