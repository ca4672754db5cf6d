/// The bodies of drowsed's local HTTP API, one type for each answer schema of docs/openapi.json
/// (named as its component there). The agent builds an answer as one of these and sends its
/// `json`; the CLI and DrowseKit read answers back through `init(json:)`. Key names, key order
/// and value types live here only (docs/architecture.md, "Wire types").
///
/// Each type's `init` takes what the schema requires, so what the agent builds has every
/// required member. Read back, every member is optional and reading never fails: a member
/// missing or of another JSON type is nil (the readers show "?" or nothing), keys a type does
/// not know are skipped, and enumerated values are kept as their text, so a value added to the
/// API later reads as itself.
package enum APIWire {
    /// The members of one JSON object as a wire type reads them back: each is nil when it is
    /// missing or of another JSON type (the readers show "?" or nothing for it).
    struct Reader {
        let json: JSON

        init(_ json: JSON) { self.json = json }

        func string(_ key: String) -> String? { json[key]?.stringValue }
        func int(_ key: String) -> Int? { json[key]?.intValue }
        func int64(_ key: String) -> Int64? { json[key]?.int64Value }
        func double(_ key: String) -> Double? { json[key]?.doubleValue }
        func bool(_ key: String) -> Bool? { json[key]?.boolValue }
        /// A member that is an object of its own (read whatever its JSON type; nil when absent).
        func object<T>(_ key: String, _ read: (JSON) -> T) -> T? { json[key].map(read) }
        /// An array member's items that are strings.
        func strings(_ key: String) -> [String]? { json[key]?.arrayValue?.compactMap(\.stringValue) }
    }
}

/// A wire type: one JSON object of the API.
protocol WireBody {
    var json: JSON { get }
}

extension Optional where Wrapped: WireBody {
    /// Null for a member a reader did not get.
    var json: JSON { self?.json ?? .null }
}

extension APIWire {
    /// `Error`: every refusal, with its HTTP status (docs/api.md, "Errors").
    package struct Error: WireBody, Sendable, Equatable {
        /// One of the codes docs/api.md lists (kept as text: a newer drowsed may add codes).
        package var code: String?
        package var message: String?

        package init(code: String, message: String) {
            self.code = code
            self.message = message
        }

        package var json: JSON { .object([("error", .object([("code", JSON(code)), ("message", JSON(message))]))]) }

        package init(json: JSON) {
            let r = Reader(json)
            let e = Reader(r.json["error"] ?? nil)
            code = e.string("code")
            message = e.string("message")
        }
    }

    /// `Recorded`: `POST /v1/apps/ID/used` and `…/events/EVENT/complete`.
    package struct Recorded: WireBody, Sendable, Equatable {
        /// The app (used) or the event (complete).
        package var id: String?

        package init(id: String) { self.id = id }

        package var json: JSON { .object([("id", JSON(id)), ("recorded", true)]) }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
        }
    }

    /// `QuitAnswer`: `POST /v1/apps/ID/quit`.
    package struct QuitAnswer: WireBody, Sendable, Equatable {
        package var id: String?
        package var cancelledTransfers: Int?

        package init(id: String, cancelledTransfers: Int) {
            self.id = id
            self.cancelledTransfers = cancelledTransfers
        }

        package var json: JSON { .object([("id", JSON(id)), ("cancelled_transfers", JSON(cancelledTransfers))]) }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
            cancelledTransfers = r.int("cancelled_transfers")
        }
    }

    /// `Report`: an app's last report, keys sorted when sent (one text for the same report).
    package struct Report: WireBody, Sendable, Equatable {
        package var fields: [String: String]

        package init(_ fields: [String: String]) { self.fields = fields }

        package var json: JSON { .object(fields.keys.sorted().map { ($0, .string(fields[$0]!)) }) }

        /// The string members of an object (others are skipped).
        package init(json: JSON) {
            guard case .object(let members) = json else {
                fields = [:]
                return
            }
            var f: [String: String] = [:]
            for (k, v) in members { if let s = v.stringValue { f[k] = s } }
            fields = f
        }
    }

    /// `Updates`: `POST /v1/updates/refresh`, each package's newest update as the fleet status
    /// carries it (docs/updates.md).
    package struct Updates: WireBody, Sendable, Equatable {
        package var updates: [String: UpdateReport]

        package init(_ updates: [String: UpdateReport]) { self.updates = updates }

        package var json: JSON { .object([("updates", .object(updates.keys.sorted().map { ($0, updates[$0]!.json) }))]) }

        package init(json: JSON) {
            var out: [String: UpdateReport] = [:]
            if case .object(let members)? = json["updates"] {
                for (k, v) in members { out[k] = UpdateReport.parse(v) }
            }
            updates = out
        }
    }

    /// `ReportAnswer`: `POST /v1/apps/ID/report`.
    package struct ReportAnswer: WireBody, Sendable, Equatable {
        package var id: String?
        package var report: Report?

        package init(id: String, report: Report) {
            self.id = id
            self.report = report
        }

        package var json: JSON { .object([("id", JSON(id)), ("report", report.json)]) }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
            report = r.object("report", Report.init(json:))
        }
    }

    /// An app's lifecycle state as three members (`state`, `state_reason`, `state_since`), part
    /// of `StateAnswer` and of `ValidApp`; all null when the app has none.
    package struct AppState: Sendable, Equatable {
        /// not-running, active, background or suspended (kept as text).
        package var state: String?
        package var reason: String?
        package var since: Double?

        package init(state: String?, reason: String?, since: Double?) {
            self.state = state
            self.reason = reason
            self.since = since
        }

        var members: [(String, JSON)] { [("state", JSON(state)), ("state_reason", JSON(reason)), ("state_since", JSON(since))] }

        init(_ r: Reader) {
            state = r.string("state")
            reason = r.string("state_reason")
            since = r.double("state_since")
        }
    }

    /// `StateAnswer`: `POST /v1/apps/ID/activate` and `…/deactivate`.
    package struct StateAnswer: WireBody, Sendable, Equatable {
        package var id: String?
        package var state: AppState

        package init(id: String, state: AppState) {
            self.id = id
            self.state = state
        }

        package var json: JSON { .object([("id", JSON(id))] + state.members) }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
            state = AppState(r)
        }
    }

    /// How a run ended, four members shared by `FetchResult` and `Run`.
    package struct RunEnd: Sendable, Equatable {
        /// new-data, no-data or failed (kept as text).
        package var result: String?
        package var ending: String?
        /// Wall-clock Unix times.
        package var startedAt: Double?
        package var endedAt: Double?

        package init(result: String, ending: String, startedAt: Double, endedAt: Double) {
            self.result = result
            self.ending = ending
            self.startedAt = startedAt
            self.endedAt = endedAt
        }

        var members: [(String, JSON)] {
            [("result", JSON(result)), ("ending", JSON(ending)), ("started_at", JSON(startedAt)), ("ended_at", JSON(endedAt))]
        }

        init(_ r: Reader) {
            result = r.string("result")
            ending = r.string("ending")
            startedAt = r.double("started_at")
            endedAt = r.double("ended_at")
        }
    }

    /// `FetchResult`: `POST /v1/apps/ID/fetch`, the run it waited for.
    package struct FetchResult: WireBody, Sendable, Equatable {
        package var id: String?
        package var end: RunEnd

        package init(id: String, end: RunEnd) {
            self.id = id
            self.end = end
        }

        package var json: JSON { .object([("id", JSON(id))] + end.members) }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
            end = RunEnd(r)
        }
    }

    /// `Task`: `POST /v1/apps/ID/tasks` and the task routes under it.
    package struct Task: WireBody, Sendable, Equatable {
        package var id: String?
        package var app: String?
        package var name: String?
        /// open, ended or expired (kept as text).
        package var state: String?
        /// Wall-clock Unix time.
        package var expiresAt: Double?
        package var timeRemaining: Double?

        package init(id: String, app: String, name: String?, state: String, expiresAt: Double, timeRemaining: Double) {
            self.id = id
            self.app = app
            self.name = name
            self.state = state
            self.expiresAt = expiresAt
            self.timeRemaining = timeRemaining
        }

        package var json: JSON {
            .object([
                ("id", JSON(id)), ("app", JSON(app)), ("name", JSON(name)), ("state", JSON(state)),
                ("expires_at", JSON(expiresAt)), ("time_remaining", JSON(timeRemaining)),
            ])
        }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
            app = r.string("app")
            name = r.string("name")
            state = r.string("state")
            expiresAt = r.double("expires_at")
            timeRemaining = r.double("time_remaining")
        }
    }
}
