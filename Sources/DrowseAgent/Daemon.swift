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

/// What an OS thread reports to its part (the kernel's watch, libcurl's or libmosquitto's
/// thread): one stream, consumed in its order by the part's `serve`, and finished when the
/// thread ends.
package struct Reports<Element: Sendable>: Sendable {
    package let stream: AsyncStream<Element>
    let continuation: AsyncStream<Element>.Continuation

    package init() { (stream, continuation) = AsyncStream<Element>.makeStream() }

    package func yield(_ element: Element) { continuation.yield(element) }
    /// No more reports: the part's `serve` returns once it has consumed those before.
    package func finish() { continuation.finish() }
}

/// A part of the daemon as the ServiceGroup runs it (docs/architecture.md, "Parts are
/// services"): started in the parts' order, each once the one before it is ready; then it serves
/// what its OS threads report until graceful shutdown stops it, in the reverse order.
@DaemonActor package protocol DaemonPart: AnyObject, Sendable {
    /// What the ServiceGroup's log calls it.
    nonisolated var partName: String { get }
    /// Starts the part's resources (its threads, what it resumes from the store). When this
    /// returns the part is ready: the next part may start.
    func start()
    /// Consumes what the part's threads and child tasks report, in their order, until `stop` ends
    /// it: `.ended` once every stream is finished and every child task has returned. A part with
    /// nothing to consume returns `.nothing` at once. Ending without a `stop` means a thread of the
    /// part died: the daemon shuts down gracefully (and systemd starts it again).
    func serve() async -> Served
    /// Graceful shutdown reached this part: stop, and return when it has (what `serve` still
    /// drains, the part's service waits for).
    func stop() async
}

/// How a part's `serve` returned.
package enum Served: Sendable { case nothing, ended }

extension DaemonPart {
    package func start() {}
    package func serve() async -> Served { .nothing }
}

/// A part of the daemon whose thread ended while the daemon was not stopping: the ServiceGroup
/// shuts the other parts down gracefully and drowsed exits with this error.
package struct PartEnded: Error, CustomStringConvertible {
    package let part: String
    package var description: String { "the \(part) part stopped on its own (a thread of it ended)" }
}

/// The start of the daemon in one order: step `i` starts once steps `0..<i` are ready. Step 0
/// is the local API (ready once its socket listens), then the parts (`Agent.lineup`); systemd
/// hears READY=1 once every step is (`allReady`). A graceful shutdown during the start abandons
/// the steps not yet started: they never start, and have nothing to stop.
@DaemonActor package final class StartOrder {
    package let count: Int
    private var readyCount = 0
    private var abandoned = false
    private var waiters: [(step: Int, continuation: CheckedContinuation<Bool, Never>)] = []

    package init(count: Int) { self.count = count }

    /// Waits until the steps before `step` are ready: true, start it; false, the start was
    /// abandoned (graceful shutdown or cancellation came first).
    package func turn(_ step: Int) async -> Bool {
        await withTaskCancellationOrGracefulShutdownHandler {
            await withCheckedContinuation { c in
                if abandoned { c.resume(returning: false) } else if readyCount >= step { c.resume(returning: true) } else { waiters.append((step, c)) }
            }
        } onCancelOrGracefulShutdown: {
            Task { @DaemonActor in self.abandon() }
        }
    }

    /// Step `step` is ready (steps become ready in order).
    package func ready(_ step: Int) {
        precondition(step == readyCount, "step \(step) ready out of order (\(readyCount) ready)")
        readyCount += 1
        resume { $0 <= readyCount ? true : nil }
    }

    /// Every step is ready: the daemon is up.
    package func allReady() async -> Bool { await turn(count) }

    /// The start stops here: every step still waiting is told not to start.
    package func abandon() {
        abandoned = true
        resume { _ in false }
    }

    private func resume(_ answer: (Int) -> Bool?) {
        var still: [(step: Int, continuation: CheckedContinuation<Bool, Never>)] = []
        for w in waiters {
            if let a = answer(w.step) { w.continuation.resume(returning: a) } else { still.append(w) }
        }
        waiters = still
    }
}

/// Runs a part in the ServiceGroup: waits for its turn in the start order, starts it, signals
/// ready, serves it until graceful shutdown, then stops it and waits for what it drains. If the
/// part's serving ends first (a thread died), it stops the part and throws `PartEnded`, and the
/// group shuts the rest down gracefully.
package struct PartService: Service, CustomStringConvertible {
    let part: any DaemonPart
    let order: StartOrder
    let step: Int

    package init(_ part: any DaemonPart, order: StartOrder, step: Int) {
        self.part = part
        self.order = order
        self.step = step
    }

    package var description: String { part.partName }

    private enum Event: Sendable { case served(Served), shutdown }

    package func run() async throws {
        // Not started: nothing to stop, but the group expects the part back only at its own shutdown.
        guard await order.turn(step) else {
            try? await gracefulShutdown()
            return
        }
        await part.start()
        await order.ready(step)
        let part = self.part
        let died = await withTaskGroup(of: Event.self) { group -> Bool in
            group.addTask { .served(await part.serve()) }
            // Cancellation (the group's) ends the wait too: the part stops either way.
            group.addTask { try? await gracefulShutdown(); return .shutdown }
            var stopped = false, died = false
            while let event = await group.next() {
                switch event {
                case .served(.nothing):
                    continue
                case .served(.ended):
                    guard !stopped else { continue }
                    died = !Task.isCancelled
                    stopped = true
                    group.cancelAll()
                    await part.stop()
                case .shutdown:
                    guard !stopped else { continue }
                    stopped = true
                    await part.stop()
                }
            }
            return died
        }
        if died { throw PartEnded(part: part.partName) }
    }
}
