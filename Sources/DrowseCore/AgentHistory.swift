/// What a running agent recorded over a stretch of time, as `drowse timeline` draws it: the
/// store's run history, notifications, transfers and uses, and, from a scheduler trace
/// (`drowsed --scheduler-trace`), the windows the scheduler opened and the conditions it saw.
/// Times are on drowsed's timeline (Unix seconds, docs/design.md). Pure data.
package struct AgentHistory: Sendable, Equatable {
    /// One handler run (`runs` table).
    package struct Run: Sendable, Equatable {
        package var app: String
        /// fetch, notification, transfers or resident.
        package var event: String
        package var trigger: String?
        /// new-data, no-data or failed.
        package var result: String
        /// How it ended ("exit status 0", "killed at its deadline", ...).
        package var ending: String
        package var start: Double
        package var end: Double
        package init(app: String, event: String, trigger: String?, result: String, ending: String, start: Double, end: Double) {
            (self.app, self.event, self.trigger, self.result, self.ending, self.start, self.end) = (app, event, trigger, result, ending, start, end)
        }
    }

    /// A notification drowsed received (`notifications` table; handled ones are kept a while).
    package struct Notification: Sendable, Equatable {
        package var app: String
        package var receivedAt: Double
        package var handledAt: Double?
        package var state: String
        package init(app: String, receivedAt: Double, handledAt: Double?, state: String) {
            (self.app, self.receivedAt, self.handledAt, self.state) = (app, receivedAt, handledAt, state)
        }
    }

    /// A transfer (`transfers` table), from its creation to its end (or now).
    package struct Transfer: Sendable, Equatable {
        package var id: String
        package var app: String
        /// download or upload.
        package var kind: String
        package var state: String
        package var createdAt: Double
        package var finishedAt: Double?
        package var bytes: Int64
        package var retries: Int
        package init(id: String, app: String, kind: String, state: String, createdAt: Double, finishedAt: Double?, bytes: Int64, retries: Int) {
            (self.id, self.app, self.kind, self.state, self.createdAt, self.finishedAt, self.bytes, self.retries)
                = (id, app, kind, state, createdAt, finishedAt, bytes, retries)
        }
    }

    /// A window the scheduler opened (a scheduled `start_fetch` in the trace).
    package struct Window: Sendable, Equatable {
        package var at: Double
        package var apps: [String]
        package init(at: Double, apps: [String]) { (self.at, self.apps) = (at, apps) }
    }

    /// The conditions from `at` on: as drowsed kept them (power source, network kind, battery), or
    /// as the scheduler saw them (trace `started` and `conditions_changed`: online, low battery).
    package struct ConditionsChange: Sendable, Equatable {
        package var at: Double
        package var online: Bool
        package var lowBattery: Bool
        /// ac, battery or unknown (from the store; nil from a trace).
        package var power: String?
        /// none, ethernet, wifi or cellular (from the store; nil from a trace).
        package var network: String?
        package var battery: Int?
        package init(at: Double, online: Bool, lowBattery: Bool, power: String? = nil, network: String? = nil, battery: Int? = nil) {
            (self.at, self.online, self.lowBattery, self.power, self.network, self.battery) = (at, online, lowBattery, power, network, battery)
        }
    }

    package var runs: [Run] = []
    package var notifications: [Notification] = []
    package var transfers: [Transfer] = []
    /// (app, at): reads of an app's data (`drowse used`).
    package var uses: [(app: String, at: Double)] = []
    package var windows: [Window] = []
    package var conditions: [ConditionsChange] = []
    /// Whether `windows` and `conditions` came from a trace (else windows are read off the runs).
    package var traced = false

    package init() {}

    package static func == (a: AgentHistory, b: AgentHistory) -> Bool {
        a.runs == b.runs && a.notifications == b.notifications && a.transfers == b.transfers && a.windows == b.windows
            && a.conditions == b.conditions && a.traced == b.traced && a.uses.elementsEqual(b.uses, by: { $0 == $1 })
    }

    /// Adds the windows and conditions of a scheduler trace (one JSON object a line, config first),
    /// those from `from` on and the conditions in force at `from`.
    package mutating func addTrace(_ text: String, from: Double) throws(FetchScheduler.TraceError) {
        traced = true
        // What the store kept of the conditions says more (power source, network kind): kept.
        let kept = conditions
        defer { if !kept.isEmpty { conditions = kept } }
        var before: ConditionsChange?
        for (n, line) in text.split(separator: "\n").enumerated() where n > 0 {
            let entry: JSON
            do { entry = try JSON.parse(String(line)) } catch { continue }  // a line being written
            guard let eventJSON = entry["event"] else { throw .init("line \(n + 1): expected {\"event\", \"actions\"}") }
            let event = try FetchScheduler.Event(json: eventJSON)
            let now = event.now
            switch event {
            case .started(_, let c, _), .conditionsChanged(let c, _):
                let change = ConditionsChange(at: now, online: c.online, lowBattery: c.lowBattery)
                if now < from { before = change } else { conditions.append(change) }
            default: break
            }
            guard now >= from else { continue }
            for a in entry["actions"]?.arrayValue ?? [] where a["type"]?.stringValue == "start_fetch" && a["trigger"]?.stringValue == "scheduled" {
                windows.append(Window(at: now, apps: (a["apps"]?.arrayValue ?? []).compactMap(\.stringValue)))
            }
        }
        if var b = before {
            b.at = from
            conditions.insert(b, at: 0)
        }
    }
}
