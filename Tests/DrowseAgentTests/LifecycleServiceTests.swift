@testable import DrowseAgent
import DrowseCore
import DrowseSystem
import Logging
import Synchronization
import Testing

/// The lifecycle service over an event sink that records lines and a manual clock: no process,
/// socket or cgroup is involved (without `AppProcesses`, process actions go nowhere). What is
/// checked is what a resident app's stream receives and how each waiting run ends.
@Suite("Lifecycle service")
@DaemonActor struct LifecycleServiceTests {
    final class Sink: EventSink {
        let lines = Mutex<[String]>([])
        let closedFlag = Mutex(false)
        var closed: Bool { closedFlag.withLock { $0 } }
        func send(_ line: String) { lines.withLock { $0.append(line) } }
        func close() { closedFlag.withLock { $0 = true } }
        var events: [JSON] { lines.withLock { $0 }.compactMap { try? JSON.parse(bytes: Array($0.utf8)) } }
    }

    @DaemonActor final class Rig {
        let clock = ManualClock(wall: 1_800_000_000, boot: 5000)
        let service: LifecycleService
        /// The service's wake, as `AppProcesses` keeps it; the process orders it gave, in order.
        let wake: ServiceWake
        var orders: [LifecycleService.Order] = []

        init(deadline: Double = 30, allowance: Double = 30, suspendAfter: Double = 10, warning: Double = 5,
             alwaysActive: Bool = false) throws {
            var settings = AppLifecycle.Settings()
            settings.eventDeadline = deadline
            settings.taskAllowance = allowance
            settings.suspendAfter = suspendAfter
            settings.taskExpiryWarning = warning
            service = LifecycleService(settings: settings, clock: clock, logger: Logger(label: "test"))
            wake = ServiceWake(clock: clock)
            let app = try AppDefinition.parse("""
                id = "res"
                [process]
                command = ["/bin/true"]
                \(alwaysActive ? "always_active = true" : "")
                """, file: "/etc/drowse/apps.d/res.toml")
            drive { $0.configure([app], adopted: []) }
            drive { $0.processStarted("res") }
        }

        /// Asks the service, then carries out its orders as `AppProcesses.lifecycle` does: the
        /// wake is set, its own actions performed, the process orders kept.
        func drive<T, E: Error>(_ body: (LifecycleService) throws(E) -> T) throws(E) -> T {
            defer {
                for order in service.takeOrders() {
                    switch order {
                    case .wake(let at): wake.set(at) { [weak self] in self?.drive { $0.timerFired() } }
                    case .own(let action): service.perform(action)
                    default: orders.append(order)
                    }
                }
            }
            return try body(service)
        }

        /// Shutdown, as `AppProcesses.stop` does it: the wake closes, then the service stops.
        func stop() {
            wake.close()
            drive { $0.stop() }
        }

        /// Advances the clock and lets the wakes that fired run.
        func advance(by seconds: Double) async {
            clock.advance(by: seconds)
            for _ in 0..<20 { await Task.yield() }
        }
    }

    @Test("an event waits for the app's stream, is sent with its deadline in wall time, and the app's completion ends its run")
    func deliverAndComplete() async throws {
        let rig = try Rig()
        // The wall clock was set an hour forward (a time sync): times are shown in the new wall time.
        rig.clock.step(by: 3600)
        _ = rig.clock.timeline.resync()
        let run = HandlerRun()
        rig.drive { $0.deliver("res", .fetch(reason: "scheduled"), attempt: 1, run: run) }
        let sink = Sink()
        rig.drive { $0.openStream("res", sink: sink) }
        let events = sink.events
        #expect(events.first?["event"]?.stringValue == "hello")
        let fetch = try #require(events.last)
        #expect(fetch["event"]?.stringValue == "fetch" && fetch["reason"]?.stringValue == "scheduled")
        let deadline = try #require(fetch["deadline"]?.doubleValue)
        #expect(abs(deadline - (rig.clock.now + 3600 + 30)) < 0.01, "the deadline as the wall clock names it")
        let id = try #require(fetch["id"]?.stringValue)
        rig.clock.now += 2
        try rig.drive { try $0.complete("res", event: id, result: .newData) }
        let outcome = await run.outcome()
        #expect(outcome.result == .newData && abs(outcome.endedAt - outcome.startedAt - 2) < 0.001)
        #expect(throws: LifecycleService.Refusal.unknownEvent(app: "res", id: id)) { try rig.drive { try $0.complete("res", event: id, result: .newData) } }
    }

    @Test("an event the app does not complete fails at its deadline, on the clock's wake")
    func deadline() async throws {
        let rig = try Rig(deadline: 10)
        let sink = Sink()
        rig.drive { $0.openStream("res", sink: sink) }
        let run = HandlerRun()
        rig.drive { $0.deliver("res", .notification(payload: .object([])), attempt: 1, run: run) }
        await rig.advance(by: 9)
        #expect(run.peek == nil, "not before its deadline")
        await rig.advance(by: 2)
        let outcome = try #require(run.peek)
        #expect(outcome.ending == .timedOut && outcome.result == .failed)
    }

    @Test("a background task: begun with its allowance, shown, ended; an unknown one is not found")
    func tasks() throws {
        let rig = try Rig(allowance: 60)
        rig.clock.step(by: -600)
        _ = rig.clock.timeline.resync()
        let task = try rig.drive { try $0.beginTask("res", name: "upload") }
        #expect(task.status == .open && task.expiresAt == rig.clock.now + 60)
        let json = task.json(now: rig.clock.now, wall: rig.clock.timeline.skew)
        #expect(json["expires_at"]?.doubleValue == task.expiresAt - 600 && json["time_remaining"]?.doubleValue == 60)
        rig.clock.now += 15
        #expect(try rig.service.task("res", id: task.id).timeRemaining(now: rig.clock.now) == 45)
        #expect(try rig.drive { try $0.endTask("res", id: task.id) }.status == .ended)
        #expect(throws: LifecycleService.Refusal.unknownTask(app: "res", id: "nosuch")) { try rig.service.task("res", id: "nosuch") }
        #expect(throws: LifecycleService.Refusal.unknownApp("ghost")) { try rig.drive { try $0.beginTask("ghost", name: nil) } }
    }

    @Test("the machine's order is kept across the service and its owner: a suspended app is thawed before its event is sent")
    func thawBeforeSend() async throws {
        let rig = try Rig(suspendAfter: 1)
        let sink = Sink()
        rig.drive { $0.openStream("res", sink: sink) }
        await rig.advance(by: 1.5)
        #expect(rig.orders.last == .freeze("res"), "suspended after the grace")
        let lines = sink.events.count
        rig.service.deliver("res", .fetch(reason: "manual"), attempt: 1, run: HandlerRun())
        #expect(sink.events.count == lines, "nothing sent before the owner carries out the orders")
        let orders = rig.service.takeOrders()
        let thaw = try #require(orders.firstIndex(of: .thaw("res")))
        let send = try #require(orders.firstIndex { if case .own(.send) = $0 { true } else { false } })
        #expect(thaw < send)
    }

    @Test("at stop the streams close and runs still waiting for a completion end as failed")
    func stop() async throws {
        let rig = try Rig()
        let sink = Sink()
        rig.drive { $0.openStream("res", sink: sink) }
        let run = HandlerRun()
        rig.drive { $0.deliver("res", .fetch(reason: "manual"), attempt: 1, run: run) }
        rig.stop()
        #expect(sink.closed)
        let outcome = await run.outcome()
        #expect(outcome.result == .failed)
        if case .launchFailed(let why) = outcome.ending { #expect(why.contains("stopping")) } else { Issue.record("ended \(outcome.ending)") }
        #expect(rig.clock.pendingWakes.count == 0, "no wake left behind")
    }
}
