extension APIWire {
    /// `Event`: one line of a resident app's event stream, `GET /v1/apps/ID/events` (NDJSON;
    /// docs/api.md, "Event stream"). Which members a line has depends on its `event`: `hello`
    /// (app, state), `fetch` (reason), `notification` (payload), `transfers` (session,
    /// transfers), the last three with id, deadline and attempt; `task-expiring` (id, task,
    /// expires_at, time_remaining). `json` writes them in that order.
    package struct Event: WireBody, Sendable, Equatable {
        /// hello, fetch, notification, transfers or task-expiring (kept as text).
        package var event: String?
        /// The id the app completes the event with (every kind but hello).
        package var id: String?
        /// hello: the app, and its lifecycle state (null when it has none).
        package var app: String?
        package var state: String?
        /// fetch, notification, transfers: the wall-clock Unix time by which to complete it
        /// (null when there is none).
        package var deadline: Double?
        /// fetch: scheduled or manual (kept as text).
        package var reason: String?
        /// notification: the payload as received (a string when it is not JSON).
        package var payload: JSON?
        /// transfers: the session and its finished transfers.
        package var session: String?
        package var transfers: [Transfer]?
        /// fetch, notification, transfers: 1, or more when an earlier start's end is not known
        /// (docs/handlers.md, "What a power cut repeats").
        package var attempt: Int?
        /// task-expiring: the task, when it runs out (wall clock) and the seconds of background
        /// time left.
        package var task: String?
        package var expiresAt: Double?
        package var timeRemaining: Double?

        /// What an event the app completes carries besides its id, deadline and attempt.
        package enum Body: Sendable, Equatable {
            case fetch(reason: String)
            case notification(payload: JSON)
            case transfers(session: String, transfers: [Transfer])
        }

        /// The first line of a stream.
        package static func hello(app: String, state: String?) -> Event {
            var e = Event(event: "hello")
            e.app = app
            e.state = state
            return e
        }

        /// A fetch, notification or transfers event.
        package static func delivered(id: String, deadline: Double?, _ body: Body, attempt: Int) -> Event {
            var e: Event
            switch body {
            case .fetch(let reason):
                e = Event(event: "fetch")
                e.reason = reason
            case .notification(let payload):
                e = Event(event: "notification")
                e.payload = payload
            case .transfers(let session, let transfers):
                e = Event(event: "transfers")
                e.session = session
                e.transfers = transfers
            }
            e.id = id
            e.deadline = deadline
            e.attempt = attempt
            return e
        }

        /// A task-expiring event; without `task` (the task is gone) it carries its id alone.
        package static func taskExpiring(id: String, task: (id: String, expiresAt: Double, timeRemaining: Double)?) -> Event {
            var e = Event(event: "task-expiring")
            e.id = id
            e.task = task?.id
            e.expiresAt = task?.expiresAt
            e.timeRemaining = task?.timeRemaining
            return e
        }

        private init(event: String) { self.event = event }

        package var json: JSON {
            var m: [(String, JSON)] = [("event", JSON(event))]
            switch event {
            case "hello":
                m += [("app", JSON(app)), ("state", JSON(state))]
            case "task-expiring":
                m.append(("id", JSON(id)))
                if let task { m += [("task", .string(task)), ("expires_at", JSON(expiresAt)), ("time_remaining", JSON(timeRemaining))] }
            default:
                m += [("id", JSON(id)), ("deadline", JSON(deadline))]
                if let reason { m.append(("reason", .string(reason))) }
                if let payload { m.append(("payload", payload)) }
                if let session { m.append(("session", .string(session))) }
                if let transfers { m.append(("transfers", .array(transfers.map(\.json)))) }
                m.append(("attempt", JSON(attempt)))
            }
            return .object(m)
        }

        package init(json: JSON) {
            let r = Reader(json)
            event = r.string("event")
            id = r.string("id")
            app = r.string("app")
            state = r.string("state")
            deadline = r.double("deadline")
            reason = r.string("reason")
            payload = r.object("payload") { $0 }
            session = r.string("session")
            transfers = r.json["transfers"]?.arrayValue?.map(Transfer.init(json:))
            attempt = r.int("attempt")
            task = r.string("task")
            expiresAt = r.double("expires_at")
            timeRemaining = r.double("time_remaining")
        }
    }

    /// What a fetch handler reads on its standard input (docs/handlers.md, "Standard input").
    /// A notification handler reads the payload itself, as received.
    package struct FetchInput: WireBody, Sendable, Equatable {
        package var app: String?
        /// scheduled or manual (kept as text).
        package var reason: String?

        package init(app: String, reason: String) {
            self.app = app
            self.reason = reason
        }

        package var json: JSON { .object([("event", "fetch"), ("app", JSON(app)), ("reason", JSON(reason))]) }

        package init(json: JSON) {
            let r = Reader(json)
            app = r.string("app")
            reason = r.string("reason")
        }
    }

    /// What a transfers events handler reads on its standard input: the session's finished
    /// transfers (docs/handlers.md, "Standard input").
    package struct TransfersInput: WireBody, Sendable, Equatable {
        package var app: String?
        package var session: String?
        package var transfers: [Transfer]?

        package init(app: String, session: String, transfers: [Transfer]) {
            self.app = app
            self.session = session
            self.transfers = transfers
        }

        package var json: JSON {
            .object([
                ("event", "transfers"), ("app", JSON(app)), ("session", JSON(session)),
                ("transfers", transfers.map { .array($0.map(\.json)) } ?? .null),
            ])
        }

        package init(json: JSON) {
            let r = Reader(json)
            app = r.string("app")
            session = r.string("session")
            transfers = r.json["transfers"]?.arrayValue?.map(Transfer.init(json:))
        }
    }
}
