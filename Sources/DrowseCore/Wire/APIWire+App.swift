extension APIWire {
    /// `Limits`: an app's process and memory limits, and what holds each.
    package struct Limits: WireBody, Sendable, Equatable {
        package var processes: Int?
        package var memory: Int64?
        package var memoryText: String?
        /// cgroup or rlimit (kept as text).
        package var processesEnforcedBy: String?
        /// cgroup or rlimit (kept as text).
        package var memoryEnforcedBy: String?

        package init(processes: Int?, memory: Int64?, memoryText: String, processesEnforcedBy: String, memoryEnforcedBy: String) {
            self.processes = processes
            self.memory = memory
            self.memoryText = memoryText
            self.processesEnforcedBy = processesEnforcedBy
            self.memoryEnforcedBy = memoryEnforcedBy
        }

        package var json: JSON {
            .object([
                ("processes", JSON(processes)), ("memory", JSON(memory)), ("memory_text", JSON(memoryText)),
                ("processes_enforced_by", JSON(processesEnforcedBy)), ("memory_enforced_by", JSON(memoryEnforcedBy)),
            ])
        }

        package init(json: JSON) {
            let r = Reader(json)
            // Any number: a limit past Int's range reads as the largest (as the CLI shows it).
            processes = r.double("processes").map { Int(saturating: $0) }
            memory = r.int64("memory")
            memoryText = r.string("memory_text")
            processesEnforcedBy = r.string("processes_enforced_by")
            memoryEnforcedBy = r.string("memory_enforced_by")
        }
    }

    /// `Run`: one of an app's past runs, in `history` of `GET /v1/apps/ID`.
    package struct Run: WireBody, Sendable, Equatable {
        /// fetch, notification or transfers (kept as text).
        package var event: String?
        package var trigger: String?
        package var end: RunEnd

        package init(event: String, trigger: String?, end: RunEnd) {
            self.event = event
            self.trigger = trigger
            self.end = end
        }

        package var json: JSON { .object([("event", JSON(event)), ("trigger", JSON(trigger))] + end.members) }

        package init(json: JSON) {
            let r = Reader(json)
            event = r.string("event")
            trigger = r.string("trigger")
            end = RunEnd(r)
        }
    }

    /// `ValidApp`: an app of `GET /v1/apps`, or of `GET /v1/apps/ID` with its `history`.
    package struct ValidApp: WireBody, Sendable, Equatable {
        package var id: String?
        package var file: String?
        /// new-data, no-data or failed (kept as text).
        package var lastResult: String?
        package var lastFetch: Double?
        package var nextFetch: Double?
        package var nextFetchReason: String?
        package var eligibleAt: Double?
        package var dueBy: Double?
        package var toleranceSeconds: Double?
        package var minimumInterval: String?
        package var consecutiveFailures: Int?
        package var lastUsed: Double?
        package var user: String?
        package var running: Bool?
        package var resident: Bool?
        package var limits: Limits?
        package var report: Report?
        package var state: AppState
        /// The last runs, newest first: `GET /v1/apps/ID` only (nil leaves the key out).
        package var history: [Run]?

        package init(
            id: String, file: String, lastResult: String?, lastFetch: Double?, nextFetch: Double?, nextFetchReason: String,
            eligibleAt: Double?, dueBy: Double?, toleranceSeconds: Double?, minimumInterval: String, consecutiveFailures: Int?,
            lastUsed: Double?, user: String?, running: Bool, resident: Bool, limits: Limits, report: Report, state: AppState,
            history: [Run]?
        ) {
            self.id = id
            self.file = file
            self.lastResult = lastResult
            self.lastFetch = lastFetch
            self.nextFetch = nextFetch
            self.nextFetchReason = nextFetchReason
            self.eligibleAt = eligibleAt
            self.dueBy = dueBy
            self.toleranceSeconds = toleranceSeconds
            self.minimumInterval = minimumInterval
            self.consecutiveFailures = consecutiveFailures
            self.lastUsed = lastUsed
            self.user = user
            self.running = running
            self.resident = resident
            self.limits = limits
            self.report = report
            self.state = state
            self.history = history
        }

        package var json: JSON {
            var members: [(String, JSON)] = [
                ("id", JSON(id)), ("valid", true), ("error", nil), ("file", JSON(file)),
                ("last_result", JSON(lastResult)), ("last_fetch", JSON(lastFetch)), ("next_fetch", JSON(nextFetch)),
                ("next_fetch_reason", JSON(nextFetchReason)), ("eligible_at", JSON(eligibleAt)), ("due_by", JSON(dueBy)),
                ("tolerance_seconds", JSON(toleranceSeconds)), ("minimum_interval", JSON(minimumInterval)),
                ("consecutive_failures", JSON(consecutiveFailures)), ("last_used", JSON(lastUsed)), ("user", JSON(user)),
                ("running", JSON(running)), ("resident", JSON(resident)), ("limits", limits.json), ("report", report.json),
            ] + state.members
            if let history { members.append(("history", .array(history.map(\.json)))) }
            return .object(members)
        }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
            file = r.string("file")
            lastResult = r.string("last_result")
            lastFetch = r.double("last_fetch")
            nextFetch = r.double("next_fetch")
            nextFetchReason = r.string("next_fetch_reason")
            eligibleAt = r.double("eligible_at")
            dueBy = r.double("due_by")
            toleranceSeconds = r.double("tolerance_seconds")
            minimumInterval = r.string("minimum_interval")
            consecutiveFailures = r.int("consecutive_failures")
            lastUsed = r.double("last_used")
            user = r.string("user")
            running = r.bool("running")
            resident = r.bool("resident")
            limits = r.object("limits", Limits.init(json:))
            report = r.object("report", Report.init(json:))
            state = AppState(r)
            history = r.json["history"].map { $0.arrayValue?.map(Run.init(json:)) ?? [] }
        }
    }

    /// `InvalidApp`: an app definition that did not load (shown to admins only).
    package struct InvalidApp: WireBody, Sendable, Equatable {
        package var id: String?
        /// Why it did not load.
        package var error: String?
        package var file: String?

        package init(id: String, error: String, file: String) {
            self.id = id
            self.error = error
            self.file = file
        }

        package var json: JSON {
            .object([
                ("id", JSON(id)), ("valid", false), ("error", JSON(error)), ("file", JSON(file)),
                ("last_result", nil), ("last_fetch", nil), ("next_fetch", nil), ("next_fetch_reason", "invalid app definition"),
            ])
        }

        package init(json: JSON) {
            let r = Reader(json)
            id = r.string("id")
            error = r.string("error")
            file = r.string("file")
        }
    }

    /// `App` (an item of `GET /v1/apps`) and `AppDetail` (`GET /v1/apps/ID`, a valid app with
    /// its `history`): a valid app or an invalid one, told apart by `valid`.
    package enum App: WireBody, Sendable, Equatable {
        case valid(ValidApp)
        case invalid(InvalidApp)

        package var json: JSON {
            switch self {
            case .valid(let a): a.json
            case .invalid(let a): a.json
            }
        }

        package var id: String? {
            switch self {
            case .valid(let a): a.id
            case .invalid(let a): a.id
            }
        }

        package init(json: JSON) {
            self = json["valid"]?.boolValue == false ? .invalid(InvalidApp(json: json)) : .valid(ValidApp(json: json))
        }
    }
}
