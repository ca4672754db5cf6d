/// Every app's lifecycle: its state (`not-running`, `active`, `background`, `suspended`), when it
/// is frozen and thawed, when its resident process is started again, its events' deadlines, its
/// finite background tasks and who goes first under memory pressure. A pure value type: events
/// in (each with `now`), actions out; drowsed's `LifecycleService` carries the actions out with
/// cgroups (or signals), processes and the event streams.
///
/// The rules, in iOS's and Android's terms:
/// - An app with a reason to run is `background`: an event delivered and not yet completed, a
///   handler running, an open background task, a resident process launching (until it opens its
///   stream, at most an event's deadline). Without one, a resident app stays `background
///   (idle)` for `suspendAfter` (Android's 10 s before freezing a cached app), then is frozen:
///   `suspended`. It is thawed before anything is delivered to it.
/// - `active` apps (marked through the API, or `always_active`) are never frozen and never
///   chosen under memory pressure.
/// - A resident process that exits without being asked is started again after a backoff
///   (1 s, doubling, at most `maxRestartDelay`; back to 1 s once it has run a minute).
/// - Background tasks share one allowance per app (`taskAllowance`, iOS's 30 s), counted from
///   the first task. `taskExpiryWarning` before its end the app is told (`task-expiring`); at
///   the end open tasks are ended for it, a resident app is suspended at once and a handler app's
///   processes are killed, and the overrun counts against the app like a deadline kill. A new
///   allowance needs a rest first: the app must have been suspended, not running or active
///   since the last one ended, so ending and beginning tasks cannot extend it for ever.
/// - Under memory pressure the suspended app used least recently goes first, then background
///   apps; active apps never. A resident app ended so stays `not-running (memory pressure)` until
///   an event needs it.
package struct AppLifecycle: Sendable {
    package struct Settings: Sendable, Equatable {
        package var suspendAfter: Double = 10
        package var taskAllowance: Double = 30
        package var taskExpiryWarning: Double = 5
        /// How long an app has to complete an event (the handler deadline).
        package var eventDeadline: Double = 30
        package var minRestartDelay: Double = 1
        package var maxRestartDelay: Double = 300
        /// A resident process that ran this long without a crash restarts with the shortest delay again.
        package var stableRun: Double = 60
        /// Events kept for an app whose process is down; the oldest beyond this are failed.
        package var maxPendingEvents = 256
        package init() {}
    }

    package enum State: String, Sendable, Equatable {
        case notRunning = "not-running", active, background, suspended
    }

    /// What an app is declared as.
    package struct Spec: Sendable, Equatable {
        package var id: String
        /// Declares `[process] command`: events go to its stream, not to handlers.
        package var resident: Bool
        package var alwaysActive: Bool
        package init(id: String, resident: Bool, alwaysActive: Bool = false) {
            self.id = id
            self.resident = resident
            self.alwaysActive = alwaysActive
        }
    }

    /// What an event delivered to a resident app is about.
    package enum EventKind: String, Sendable, Equatable {
        case fetch, notification, transfers
        case taskExpiring = "task-expiring"
    }

    package struct Event: Sendable, Equatable {
        package var id: String
        package var kind: EventKind
        /// Set when it is sent.
        package var deadline: Double?
        package var task: String?
    }

    package struct Task: Sendable, Equatable {
        package enum Status: String, Sendable { case open, ended, expired }
        package var id: String
        package var app: String
        package var name: String?
        package var status: Status
        package var expiresAt: Double
        package func timeRemaining(now: Double) -> Double { status == .open ? max(0, expiresAt - now) : 0 }
    }

    package enum Action: Sendable, Equatable {
        case freeze(app: String)
        case thaw(app: String)
        case startProcess(app: String)
        /// Ends the resident process (memory pressure: at once, no grace needed).
        case killProcess(app: String)
        /// Kills every process of the app (its handlers and their children).
        case killApp(app: String)
        /// Writes the event to the app's open stream.
        case send(app: String, event: Event)
        /// A delivered event ended: completed with a result, or not by its deadline.
        case eventEnded(app: String, id: String, result: FetchResult?, timedOut: Bool)
        /// The app overran its background-task allowance: penalize it as a deadline kill.
        case overran(app: String)
        /// The single earliest time `timerFired` is needed; nil cancels.
        case setTimer(at: Double?)
        case log(app: String, message: String)
    }

    package enum Refusal: Error, Equatable, Sendable {
        case unknownApp
        case noBackgroundTime(until: Double?)
        case unknownTask
    }

    struct AppRecord: Sendable {
        var spec: Spec
        var activated = false
        enum Process: Sendable, Equatable { case notStarted, running(since: Double), waitingRestart(at: Double), stoppedForMemory, gone }
        var process: Process = .notStarted
        var failures = 0
        var lastExit: String?
        var streamOpen = false
        /// The running process has opened its stream since it started (or was adopted).
        var connected = false
        var pending: [Event] = []
        var outstanding: [Event] = []
        var handlers = 0
        var tasks: [String: Task] = [:]
        var allowanceEnds: Double?
        var warned = false
        /// The allowance ran out (or tasks ended) and the app has not rested since.
        var needsRest = false
        var frozen = false
        var idleSince: Double?
        var state: State = .notRunning
        var reason = "not started"
        var since: Double = 0
    }

    package let settings: Settings
    private var apps: [String: AppRecord] = [:]
    private var nextEvent = 1
    private var nextTask = 1
    private var timerAt: Double?
    /// Ended tasks kept for reads (`GET .../tasks/ID` after the end), the newest 256.
    private var endedTasks: [String: Task] = [:]
    private var endedOrder: [String] = []

    package init(settings: Settings = Settings()) { self.settings = settings }

    // MARK: reading

    package func state(of app: String) -> (state: State, reason: String, since: Double)? {
        apps[app].map { ($0.state, $0.reason, $0.since) }
    }

    package func task(_ id: String, app: String) -> Task? {
        if let t = apps[app]?.tasks[id] { return t }
        if let t = endedTasks[id], t.app == app { return t }
        return nil
    }

    package func isFrozen(_ app: String) -> Bool { apps[app]?.frozen ?? false }

    // MARK: events

    /// The apps as loaded (at start and on every reload). New residents are started; apps that
    /// are gone are dropped (their processes are the service's to stop).
    package mutating func configured(_ specs: [Spec], adopted: Set<String> = [], now: Double) -> [Action] {
        let ids = Set(specs.map(\.id))
        for gone in apps.keys where !ids.contains(gone) { apps[gone] = nil }
        for spec in specs {
            if var r = apps[spec.id] {
                r.spec = spec
                apps[spec.id] = r
                continue
            }
            var r = AppRecord(spec: spec)
            r.since = now
            if spec.resident {
                if adopted.contains(spec.id) {
                    r.process = .running(since: now)
                } else {
                    r.process = .waitingRestart(at: now)
                }
            }
            apps[spec.id] = r
        }
        return settle(now: now)
    }

    /// The service started the resident process.
    package mutating func processStarted(_ app: String, now: Double) -> [Action] {
        apps[app]?.process = .running(since: now)
        apps[app]?.connected = false
        return settle(now: now)
    }

    /// The resident process ended (`description`: "exit status 1", "killed by signal 9").
    /// It is started again after the backoff, unless memory pressure ended it.
    package mutating func processExited(_ app: String, description: String, now: Double) -> [Action] {
        guard var r = apps[app] else { return [] }
        var actions: [Action] = []
        r.streamOpen = false
        r.frozen = false
        r.lastExit = description
        if case .running(let since) = r.process, now - since >= settings.stableRun { r.failures = 0 }
        if r.process == .stoppedForMemory {
            r.process = .stoppedForMemory
        } else if !r.spec.resident {
            r.process = .gone
        } else {
            r.failures += 1
            let delay = min(settings.maxRestartDelay, settings.minRestartDelay * Double(1 << min(r.failures - 1, 20)))
            r.process = .waitingRestart(at: now + delay)
            actions.append(.log(app: app, message: "resident process ended (\(description)); starting it again in \(DurationText.format(.milliseconds(Int64(saturating: delay * 1000))))"))
        }
        // Delivered events are lost with the process: they end as failed at their deadline, as
        // a handler killed mid-run would. Events not yet sent wait for the next process.
        apps[app] = r
        return actions + settle(now: now)
    }

    package mutating func streamOpened(_ app: String, now: Double) -> [Action] {
        guard var r = apps[app] else { return [] }
        r.streamOpen = true
        r.connected = true
        apps[app] = r
        return settle(now: now)
    }

    package mutating func streamClosed(_ app: String, now: Double) -> [Action] {
        apps[app]?.streamOpen = false
        return settle(now: now)
    }

    /// An event for a resident app: sent at once if its stream is open (thawed first), else
    /// kept until it is. Returns the event's id.
    package mutating func deliver(_ app: String, kind: EventKind, now: Double) -> (id: String, actions: [Action]) {
        let id = "e\(nextEvent)"
        nextEvent += 1
        guard var r = apps[app] else { return (id, [.eventEnded(app: app, id: id, result: .failed, timedOut: false)]) }
        var actions: [Action] = []
        r.pending.append(Event(id: id, kind: kind))
        if r.pending.count > settings.maxPendingEvents {
            let dropped = r.pending.removeFirst()
            actions.append(.eventEnded(app: app, id: dropped.id, result: .failed, timedOut: false))
            actions.append(.log(app: app, message: "event \(dropped.id) failed: more than \(settings.maxPendingEvents) events wait for the resident process"))
        }
        // Memory pressure ended it: an event is a reason to start it again.
        if r.process == .stoppedForMemory { r.process = .waitingRestart(at: now) }
        apps[app] = r
        return (id, actions + settle(now: now))
    }

    /// The app completed a delivered event.
    package mutating func completed(_ app: String, id: String, result: FetchResult, now: Double) -> [Action]? {
        guard var r = apps[app], let i = r.outstanding.firstIndex(where: { $0.id == id }) else { return nil }
        r.outstanding.remove(at: i)
        apps[app] = r
        return [.eventEnded(app: app, id: id, result: result, timedOut: false)] + settle(now: now)
    }

    /// A handler of this app is about to start (the app is thawed first) or has ended.
    package mutating func handlerStarting(_ app: String, now: Double) -> [Action] {
        apps[app]?.handlers += 1
        return settle(now: now, changed: app)
    }

    package mutating func handlerEnded(_ app: String, now: Double) -> [Action] {
        if let h = apps[app]?.handlers, h > 0 { apps[app]?.handlers = h - 1 }
        return settle(now: now, changed: app)
    }

    package mutating func activate(_ app: String, _ on: Bool, now: Double) -> [Action]? {
        guard apps[app] != nil else { return nil }
        apps[app]?.activated = on
        return settle(now: now)
    }

    /// Begins a background task, sharing the app's allowance.
    package mutating func beginTask(_ app: String, name: String?, now: Double) -> Result<(Task, [Action]), Refusal> {
        guard var r = apps[app] else { return .failure(.unknownApp) }
        if let ends = r.allowanceEnds, now >= ends { return .failure(.noBackgroundTime(until: nil)) }
        if r.allowanceEnds == nil {
            if r.needsRest { return .failure(.noBackgroundTime(until: nil)) }
            r.allowanceEnds = now + settings.taskAllowance
            r.warned = false
        }
        let task = Task(id: "t\(nextTask)", app: app, name: name, status: .open, expiresAt: r.allowanceEnds!)
        nextTask += 1
        r.tasks[task.id] = task
        if r.process == .stoppedForMemory { r.process = .waitingRestart(at: now) }
        apps[app] = r
        return .success((task, settle(now: now)))
    }

    package mutating func endTask(_ app: String, id: String, now: Double) -> Result<(Task, [Action]), Refusal> {
        guard var r = apps[app] else { return .failure(.unknownApp) }
        guard var t = r.tasks.removeValue(forKey: id) else {
            if let t = endedTasks[id], t.app == app { return .success((t, [])) }
            return .failure(.unknownTask)
        }
        t.status = .ended
        apps[app] = r
        keepEnded(t)
        return .success((t, settle(now: now)))
    }

    /// Memory is short: end one app, the least recently used suspended one first, then a
    /// background one; never an active one. Returns nothing when no app can go.
    package mutating func memoryPressure(now: Double) -> [Action] {
        func candidates(_ s: State) -> [AppRecord] {
            apps.values.filter { r in
                guard r.state == s else { return false }
                if r.spec.resident, case .running = r.process { return true }
                return !r.spec.resident && r.handlers > 0
            }.sorted { ($0.since, $0.spec.id) < ($1.since, $1.spec.id) }
        }
        guard let victim = candidates(.suspended).first ?? candidates(.background).first else {
            return [.log(app: "", message: "memory pressure: no suspended or background app to end")]
        }
        let id = victim.spec.id
        var actions: [Action] = [.log(app: id, message: "memory pressure: ending this \(victim.state.rawValue) app")]
        if victim.spec.resident {
            apps[id]?.process = .stoppedForMemory
            actions.append(.killProcess(app: id))
        } else {
            actions.append(.killApp(app: id))
        }
        return actions + settle(now: now)
    }

    package mutating func timerFired(now: Double) -> [Action] {
        timerAt = nil
        return settle(now: now)
    }

    // MARK: the rules

    private mutating func keepEnded(_ t: Task) {
        endedTasks[t.id] = t
        endedOrder.append(t.id)
        if endedOrder.count > 256 { endedTasks[endedOrder.removeFirst()] = nil }
    }

    /// Applies every rule that time or the last event made due, then derives each app's state,
    /// freezes or thaws to match, and asks for the next timer.
    private mutating func settle(now: Double) -> [Action] {
        settle(now: now, ids: apps.keys.sorted())
    }

    /// `settle` after an event that changed only `app`: while no rule of any app has fallen due
    /// (the timer is ahead), every other app is as the last settle left it, and only `app` is
    /// settled; else every app is. A handler's start and end in a burst no longer walk every
    /// app's record.
    private mutating func settle(now: Double, changed app: String) -> [Action] {
        if let at = timerAt, now >= at { return settle(now: now) }
        return settle(now: now, ids: apps[app] == nil ? [] : [app])
    }

    private mutating func settle(now: Double, ids: [String]) -> [Action] {
        var actions: [Action] = []
        var thaws: [Action] = []
        for id in ids {
            guard var r = apps[id] else { continue }
            var local: [Action] = []
            // Resident process due to (re)start.
            if r.spec.resident, case .waitingRestart(let at) = r.process, now >= at {
                r.process = .running(since: now)
                r.connected = false
                local.append(.startProcess(app: id))
            }
            // Events sent and not completed by their deadline.
            for e in r.outstanding where (e.deadline ?? .infinity) <= now {
                local.append(.eventEnded(app: id, id: e.id, result: .failed, timedOut: true))
                local.append(.log(app: id, message: "event \(e.id) (\(e.kind.rawValue)) not completed by its deadline: counted as failed"))
            }
            r.outstanding.removeAll { ($0.deadline ?? .infinity) <= now }
            // Task allowance: the warning, then the end.
            if let ends = r.allowanceEnds {
                if !r.warned, !r.tasks.isEmpty, now >= ends - settings.taskExpiryWarning, now < ends {
                    r.warned = true
                    for t in r.tasks.values.sorted(by: { $0.id < $1.id }) {
                        r.pending.append(Event(id: "e\(nextEvent)", kind: .taskExpiring, task: t.id))
                        nextEvent += 1
                    }
                }
                if now >= ends {
                    if !r.tasks.isEmpty {
                        for var t in r.tasks.values.sorted(by: { $0.id < $1.id }) {
                            t.status = .expired
                            keepEnded(t)
                        }
                        r.tasks = [:]
                        local.append(.log(app: id, message: "background task time (\(DurationText.format(.milliseconds(Int64(saturating: settings.taskAllowance * 1000))))) ran out: tasks ended for the app"))
                        local.append(.overran(app: id))
                        if r.spec.resident {
                            r.idleSince = now - settings.suspendAfter  // suspended at once
                        } else {
                            local.append(.killApp(app: id))
                        }
                    }
                    r.allowanceEnds = nil
                    r.needsRest = true
                }
            }
            // Sending: only to a live stream of a running process (or a stream a handler app's
            // script opened).
            let processUp: Bool = {
                if case .running = r.process { return true }
                return false
            }()
            if r.streamOpen, processUp || !r.spec.resident, !r.pending.isEmpty {
                for var e in r.pending {
                    if e.kind != .taskExpiring {
                        e.deadline = now + settings.eventDeadline
                        r.outstanding.append(e)
                    }
                    local.append(.send(app: id, event: e))
                }
                r.pending = []
            } else if !r.spec.resident, !r.streamOpen {
                // A handler app without a stream: a task warning has nowhere to go.
                r.pending.removeAll { $0.kind == .taskExpiring }
            }
            // The state.
            let (state, reason) = derive(r, processUp: processUp, now: now)
            if state != .background || reason != "idle" { r.idleSince = nil }
            if state == .background, reason == "idle", r.idleSince == nil { r.idleSince = now }
            var finalState = state, finalReason = reason
            if state == .background, reason == "idle", let since = r.idleSince, now - since >= settings.suspendAfter {
                finalState = .suspended
            }
            if finalState == .suspended || finalState == .notRunning || finalState == .active, r.allowanceEnds == nil {
                r.needsRest = false
            }
            if finalState != r.state || finalReason != r.reason {
                r.state = finalState
                r.reason = finalReason
                r.since = now
            }
            // Freeze to match: thaw before anything is sent.
            let shouldFreeze = finalState == .suspended
            if shouldFreeze != r.frozen {
                r.frozen = shouldFreeze
                if shouldFreeze { local.append(.freeze(app: id)) } else { thaws.append(.thaw(app: id)) }
            }
            apps[id] = r
            actions += local
        }
        actions = thaws + actions
        // The next time a rule falls due.
        var next: Double?
        func consider(_ t: Double?) {
            guard let t else { return }
            next = min(next ?? t, t)
        }
        for r in apps.values {
            if case .waitingRestart(let at) = r.process { consider(at) }
            for e in r.outstanding { consider(e.deadline) }
            if let ends = r.allowanceEnds {
                if !r.warned, !r.tasks.isEmpty { consider(ends - settings.taskExpiryWarning) }
                consider(ends)
            }
            if r.state == .background, r.reason == "idle", let since = r.idleSince { consider(since + settings.suspendAfter) }
            if r.state == .background, r.reason == "launching", case .running(let since) = r.process { consider(since + settings.eventDeadline) }
        }
        if next != timerAt {
            timerAt = next
            actions.append(.setTimer(at: next))
        }
        return actions
    }

    private func derive(_ r: AppRecord, processUp: Bool, now: Double) -> (State, String) {
        let hasProcess = r.spec.resident ? processUp : (r.handlers > 0 || !r.tasks.isEmpty)
        if r.spec.alwaysActive, r.spec.resident, processUp { return (.active, "always active") }
        if r.activated, hasProcess || r.streamOpen { return (.active, "activated") }
        if let e = r.outstanding.first(where: { $0.kind != .taskExpiring }) ?? (processUp ? r.pending.first : nil) {
            return (.background, e.kind == .transfers ? "transfer events" : "event")
        }
        if r.handlers > 0 { return (.background, "event") }
        if !r.tasks.isEmpty { return (.background, "task") }
        if r.spec.resident {
            // A process that has just started gets up to an event's deadline to open its stream
            // (load, connect) before it can be frozen for having nothing to do.
            if processUp, !r.connected, case .running(let since) = r.process, now - since < settings.eventDeadline {
                return (.background, "launching")
            }
            if processUp { return (.background, "idle") }
            switch r.process {
            case .stoppedForMemory: return (.notRunning, "memory pressure")
            case .waitingRestart: return (.notRunning, r.lastExit.map { "exited (\($0))" } ?? "starting")
            default: return (.notRunning, "not started")
            }
        }
        return (.notRunning, "idle")
    }
}
