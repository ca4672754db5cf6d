import DrowseCore
import DrowseSystem
import ServiceLifecycle

/// The one isolation every part of the daemon shares (docs/architecture.md, "Services"). Each
/// part owns its own state; sharing an executor means a part asks another synchronously, so a
/// notification's handler starts in the same turn the message is recorded, with no hop between
/// them. Swift concurrency runs on NIO's event loops in drowsed (see its entry point), so this
/// costs no thread of its own.
@globalActor package actor DaemonActor {
    package static let shared = DaemonActor()
}

/// What one part of the daemon tells the others: the part that knows posts, the parts that care
/// listen. Requests that need an answer (queue this run, what is the next window) are typed
/// calls on the part that answers; these events are the fan-out.
package enum DaemonEvent: Sendable {
    /// A scheduled fetch window opened: deferred notifications, the fleet status and the MQTT
    /// keepalive ride it.
    case windowOpened
    /// Something uses the network now (a handler or a transfer started): due fetches may ride along.
    case radioUsed
    /// An app's run ended and is recorded (a handler, a resident app's event, a task that
    /// overran): the fetch scheduler counts its time and the radio's tail (a fetch's own end it
    /// hears from the fetch part, in the run's transaction), the fleet status its failure.
    case runEnded(app: String, event: HandlerEvent, failed: Bool, startedAt: Double, endedAt: Double)
    /// An app overran its background-task allowance (`AppProcesses`): it counts like a fetch
    /// killed at its deadline.
    case taskOverran(app: String)
    /// Power or network were read afresh (the MQTT session's network flag follows every reading).
    case conditionsRead(Conditions)
    /// The kernel reported a change, or a client asked for a fresh reading: waiting work may start,
    /// running work that may not go on pauses.
    case conditionsChanged
    /// The wall clock was set by `step` seconds (docs/design.md, "Time on a board without a
    /// real-time clock"): only how times are shown changes.
    case clockStepped(step: Double)
    /// The app files were read again (`systemctl reload drowsed`).
    case appsReloaded
}

/// The daemon's event fan-out, delivered at the end of a turn: listeners run in order, on the
/// daemon's executor, but never inside another delivery and never inside a turn (`turn`) of the
/// part that posted. A part carries out its actions in full before anyone hears what it posted;
/// an event posted while another is delivered waits until every listener of that one has run
/// (docs/architecture.md, "Services").
@DaemonActor package final class DaemonEvents {
    private var listeners: [(DaemonEvent) -> Void] = []
    private var queued: [DaemonEvent] = []
    /// Turns and deliveries in progress: while above 0, a post waits.
    private var depth = 0

    package init() {}

    package func listen(_ body: @escaping (DaemonEvent) -> Void) { listeners.append(body) }

    /// Delivered now when nothing is in progress, else once the outermost turn or delivery ends.
    package func post(_ event: DaemonEvent) {
        queued.append(event)
        if depth == 0 { deliver() }
    }

    /// Runs a part's step (a machine's actions carried out) as one turn: what it posts is
    /// delivered after it.
    package func turn<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        depth += 1
        defer {
            depth -= 1
            if depth == 0 { deliver() }
        }
        return try body()
    }

    private func deliver() {
        depth += 1
        defer { depth -= 1 }
        while !queued.isEmpty {
            let event = queued.removeFirst()
            for listener in listeners { listener(event) }
        }
    }
}

/// One wake of a part of the daemon on the injected clock: set, moved or cancelled, never two.
/// A wake that fires after it was moved (its task was already on its way) is ignored.
@DaemonActor package final class ServiceWake {
    let clock: AgentClock
    private let slack: Double
    private var timer: WakeTimer?
    private var generation = 0
    private var fire: () -> Void = {}
    /// Closed at its part's stop: nothing set afterwards (a handler ending during the drain) fires.
    private var closed = false
    /// When it fires (on the timeline), if set.
    package private(set) var at: Double?

    /// `slack`: added to each delay (a deadline's timer fires just after it).
    package init(clock: AgentClock, slack: Double = 0) {
        self.clock = clock
        self.slack = slack
    }

    /// Wakes `fire` at `at` (on the timeline); nil cancels.
    package func set(_ at: Double?, _ fire: @escaping () -> Void) {
        timer?.cancel()
        timer = nil
        generation += 1
        self.at = at
        guard let at, !closed else {
            self.at = nil
            return
        }
        self.fire = fire
        let mine = generation
        timer = clock.wake(after: max(0, at - clock.timeline.now()) + slack) {
            Task { @DaemonActor in self.fired(mine) }
        }
    }

    package func cancel() { set(nil) {} }

    /// Cancels the wake for good: its part has stopped.
    package func close() {
        cancel()
        closed = true
    }

    private func fired(_ g: Int) {
        guard g == generation, at != nil else { return }
        timer = nil
        at = nil
        fire()
    }
}

/// A part of the daemon as the ServiceGroup runs it: started by the agent in dependency order,
/// stopped by the group in reverse order of its list (docs/architecture.md, "Shutdown").
@DaemonActor package protocol DaemonPart: AnyObject, Sendable {
    /// What the ServiceGroup's log calls it.
    nonisolated var partName: String { get }
    /// Graceful shutdown reached this part: stop, and return when it has.
    func stop() async
}

/// Runs a part in the ServiceGroup: it waits for graceful shutdown, then stops the part.
package struct PartService: Service, CustomStringConvertible {
    let part: any DaemonPart

    package init(_ part: any DaemonPart) { self.part = part }

    package var description: String { part.partName }

    package func run() async throws {
        // Cancellation (the group's) ends the wait too: the part stops either way.
        try? await gracefulShutdown()
        await part.stop()
    }
}
