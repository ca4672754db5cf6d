import DrowseCore
import DrowseSystem
import Logging

/// Where a resident app's events go: its open `GET /v1/apps/ID/events` stream.
package protocol EventSink: AnyObject, Sendable {
    /// Writes one line (the newline is added here).
    func send(_ line: String)
    /// Ends the stream (a newer one replaced it).
    func close()
}

/// App lifecycles as a service: it owns `AppLifecycle` (every decision about states, freezing,
/// restarts, event deadlines, tasks and memory pressure), the apps' event streams and the runs
/// waiting for a resident app's completion. Every action of its machine becomes an order, in the
/// machine's order (`takeOrders`), for its owner, `AppProcesses`, to carry out: what concerns the
/// processes and the wake itself, the rest (send an event, end one, log) through `perform`. It
/// holds no reference back (docs/architecture.md, "Services").
@DaemonActor package final class LifecycleService {
    /// What the lifecycle asks of the apps' processes and of its owner's clock.
    package enum Order: Equatable, Sendable {
        case freeze(String), thaw(String), startProcess(String), killProcess(String), killApp(String)
        /// The app overran its background-task allowance (recorded like a fetch killed at its deadline).
        case overran(String)
        /// Call `timerFired` at this time (on the timeline), replacing the earlier wake; nil: no wake.
        case wake(at: Double?)
        /// The service's own action (send an event, end one, log), in its place among the others
        /// (an app is thawed before an event is sent to it): `perform` carries it out.
        case own(AppLifecycle.Action)
    }

    package private(set) var machine: AppLifecycle
    let clock: AgentClock
    let logger: Logger
    var sinks: [String: EventSink] = [:]
    /// Delivered or waiting events of resident apps: what to send (its line is built when it is
    /// sent, with its id and deadline), and the run it finishes.
    struct Pending {
        var body: APIWire.Event.Body
        var attempt: Int
        var run: HandlerRun
        var sentAt: Double?
    }
    var events: [String: Pending] = [:]
    /// Orders not yet taken by the owner, in the order the machine gave them.
    private var orders: [Order] = []

    package init(settings: AppLifecycle.Settings, clock: AgentClock, logger: Logger) {
        machine = AppLifecycle(settings: settings)
        self.clock = clock
        self.logger = logger
    }

    /// The orders given since the last call, oldest first.
    package func takeOrders() -> [Order] {
        defer { orders = [] }
        return orders
    }

    func now() -> Double { clock.timeline.now() }

    private func drive(_ step: (inout AppLifecycle) -> [AppLifecycle.Action]) {
        carryOut(step(&machine))
    }

    // MARK: events in

    package func configure(_ apps: [AppDefinition], adopted: Set<String>) {
        let specs = apps.map { AppLifecycle.Spec(id: $0.id, resident: $0.isResident, alwaysActive: $0.alwaysActive) }
        drive { $0.configured(specs, adopted: adopted, now: now()) }
    }

    package func processStarted(_ app: String) { drive { $0.processStarted(app, now: now()) } }

    package func processExited(_ app: String, description: String) {
        // The stream of a process that is gone is gone too.
        sinks.removeValue(forKey: app)?.close()
        drive { $0.processExited(app, description: description, now: now()) }
    }

    /// A resident app's event: sent now or when its stream opens. `run` finishes when the app
    /// completes it, or fails at its deadline.
    package func deliver(_ app: String, _ body: APIWire.Event.Body, attempt: Int, run: HandlerRun) {
        let now = self.now()
        let (id, actions) = machine.deliver(app, kind: body.kind, now: now)
        events[id] = Pending(body: body, attempt: attempt, run: run)
        carryOut(actions)
    }

    /// Why a request was refused.
    package enum Refusal: Error, Sendable, Equatable {
        case unknownApp(String)
        /// No task of that id (or none of the app's).
        case unknownTask(app: String, id: String?)
        /// No event of that id waits for the app's completion.
        case unknownEvent(app: String, id: String)
        /// The app used its background task time; it gets more after it has been suspended.
        case noBackgroundTime(String)
    }

    package func complete(_ app: String, event id: String, result: FetchResult) throws(Refusal) {
        guard let actions = machine.completed(app, id: id, result: result, now: now()) else {
            throw .unknownEvent(app: app, id: id)
        }
        carryOut(actions)
    }

    package func handlerStarting(_ app: String) { drive { $0.handlerStarting(app, now: now()) } }
    package func handlerEnded(_ app: String) { drive { $0.handlerEnded(app, now: now()) } }

    /// A new stream for the app replaces the one it had (which is closed).
    package func openStream(_ app: String, sink: EventSink) {
        if let old = sinks[app], old !== sink { old.close() }
        sinks[app] = sink
        let s = machine.state(of: app)
        sink.send(APIWire.Event.hello(app: app, state: s?.state.rawValue).json.serialized)
        drive { $0.streamOpened(app, now: now()) }
    }

    package func streamClosed(_ app: String, sink: EventSink) {
        guard let cur = sinks[app], cur === sink else { return }
        sinks[app] = nil
        drive { $0.streamClosed(app, now: now()) }
    }

    package func activate(_ app: String, _ on: Bool) -> Bool {
        guard let actions = machine.activate(app, on, now: now()) else { return false }
        carryOut(actions)
        return true
    }

    package func beginTask(_ app: String, name: String?) throws(Refusal) -> AppLifecycle.Task {
        try carryOut(machine.beginTask(app, name: name, now: now()), app: app)
    }

    package func endTask(_ app: String, id: String) throws(Refusal) -> AppLifecycle.Task {
        try carryOut(machine.endTask(app, id: id, now: now()), app: app)
    }

    /// A task step's answer: its actions carried out, or the refusal.
    private func carryOut(_ step: Result<(AppLifecycle.Task, [AppLifecycle.Action]), AppLifecycle.Refusal>, app: String) throws(Refusal)
        -> AppLifecycle.Task
    {
        switch step {
        case .success(let (task, actions)):
            carryOut(actions)
            return task
        case .failure(.unknownApp): throw .unknownApp(app)
        case .failure(.unknownTask): throw .unknownTask(app: app, id: nil)
        case .failure(.noBackgroundTime): throw .noBackgroundTime(app)
        }
    }

    package func task(_ app: String, id: String) throws(Refusal) -> AppLifecycle.Task {
        guard let t = machine.task(id, app: app) else { throw .unknownTask(app: app, id: id) }
        return t
    }

    package func memoryPressure() { drive { $0.memoryPressure(now: now()) } }
    package func timerFired() { drive { $0.timerFired(now: now()) } }

    package func state(of app: String) -> (state: AppLifecycle.State, reason: String, since: Double)? { machine.state(of: app) }

    /// Shutdown: streams end; runs still waiting for a completion end as failed.
    package func stop() {
        for sink in sinks.values { sink.close() }
        sinks = [:]
        let now = self.now()
        for (_, e) in events {
            e.run.finish(HandlerOutcome(ending: .launchFailed("drowsed is stopping"), startedAt: e.sentAt ?? now, endedAt: now))
        }
        events = [:]
    }

    // MARK: actions out

    private func carryOut(_ actions: [AppLifecycle.Action]) {
        for action in actions {
            switch action {
            case .freeze(let app): orders.append(.freeze(app))
            case .thaw(let app): orders.append(.thaw(app))
            case .startProcess(let app): orders.append(.startProcess(app))
            case .killProcess(let app): orders.append(.killProcess(app))
            case .killApp(let app): orders.append(.killApp(app))
            case .overran(let app): orders.append(.overran(app))
            case .setTimer(let at): orders.append(.wake(at: at))
            case .log, .send, .eventEnded: orders.append(.own(action))
            }
        }
    }

    /// Carries out one of its own actions, when its owner reaches it among the orders.
    package func perform(_ action: AppLifecycle.Action) {
        switch action {
        case .log(let app, let message):
            if app.isEmpty { logger.warning("\(message)") } else { logger.warning("\(message)", metadata: ["app.id": "\(app)"]) }
        case .send(let app, let event): send(app, event)
        case .eventEnded(_, let id, let result, let timedOut):
            guard let e = events.removeValue(forKey: id) else { return }
            let now = self.now()
            let ending: HandlerOutcome.Ending = timedOut ? .timedOut : .completed(result ?? .failed)
            e.run.finish(HandlerOutcome(ending: ending, startedAt: e.sentAt ?? now, endedAt: now))
        case .freeze, .thaw, .startProcess, .killProcess, .killApp, .overran, .setTimer:
            break
        }
    }

    private func send(_ app: String, _ event: AppLifecycle.Event) {
        guard let sink = sinks[app] else { return }
        let line: APIWire.Event
        if event.kind == .taskExpiring {
            let t = event.task.flatMap { tid in machine.task(tid, app: app).map { (tid, $0) } }
            let now = self.now()
            line = .taskExpiring(id: event.id, task: t.map { ($0.0, clock.timeline.wall($0.1.expiresAt), $0.1.timeRemaining(now: now)) })
        } else if var e = events[event.id] {
            e.sentAt = now()
            events[event.id] = e
            line = .delivered(id: event.id, deadline: event.deadline.map(clock.timeline.wall), e.body, attempt: e.attempt)
        } else {
            return
        }
        sink.send(line.json.serialized)
    }
}

extension APIWire.Event.Body {
    /// The lifecycle's kind of the event.
    var kind: AppLifecycle.EventKind {
        switch self {
        case .fetch: .fetch
        case .notification: .notification
        case .transfers: .transfers
        }
    }
}

extension AppLifecycle.Task {
    /// `wall`: the wall clock's skew from the timeline (`expires_at` is shown in wall time).
    package func json(now: Double, wall skew: Double) -> JSON {
        APIWire.Task(id: id, app: app, name: name, state: status.rawValue, expiresAt: expiresAt + skew, timeRemaining: timeRemaining(now: now)).json
    }
}
