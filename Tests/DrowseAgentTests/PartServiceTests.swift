@testable import DrowseAgent
import DrowseCore
import DrowseTestSupport
import Logging
import ServiceLifecycle
import Testing

/// The daemon's parts as services in a real ServiceGroup: one order for start and (reversed)
/// for stop, and a part whose thread ends taking the group down gracefully.
@Suite("Parts are services")
struct PartServiceTests {
    /// What the parts did, in order.
    @DaemonActor final class Log {
        var lines: [String] = []
    }

    /// A part that notes its start and stop; its "thread" reports until the test ends it (or its stop).
    @DaemonActor final class NotingPart: DaemonPart {
        let name: String
        let log: Log
        let thread = Reports<Void>()
        nonisolated var partName: String { name }
        init(_ name: String, log: Log) {
            self.name = name
            self.log = log
        }
        func start() { log.lines.append("start \(name)") }
        func serve() async -> Served {
            for await _ in thread.stream {}
            return .ended
        }
        func stop() async {
            log.lines.append("stop \(name)")
            thread.finish()
        }
    }

    /// Step 0 of the start, as the local API is: ready once it "listens" (after `delay`, or never).
    struct Listener: Service {
        let order: StartOrder
        let log: Log
        let delay: Duration?
        func run() async throws {
            if let delay {
                try? await Task.sleep(for: delay)
                await noteAndReady()
            }
            try? await gracefulShutdown()
        }
        @DaemonActor func noteAndReady() {
            log.lines.append("listening")
            order.ready(0)
        }
    }

    /// Last in the group, as `AgentService` is: notes when every step is ready.
    struct Last: Service {
        let order: StartOrder
        let log: Log
        let started: AsyncStream<Void>.Continuation
        func run() async throws {
            if await order.allReady() { await note("all ready") }
            started.yield()
            try? await gracefulShutdown()
        }
        @DaemonActor func note(_ line: String) { log.lines.append(line) }
    }

    @DaemonActor static func group(_ parts: [any DaemonPart], log: Log, listenAfter delay: Duration?) -> (ServiceGroup, AsyncStream<Void>) {
        let order = StartOrder(count: 1 + parts.count)
        let (started, signal) = AsyncStream<Void>.makeStream()
        let services: [any Service] = [Listener(order: order, log: log, delay: delay)]
            + parts.enumerated().map { PartService($1, order: order, step: 1 + $0) }
            + [Last(order: order, log: log, started: signal)]
        let group = ServiceGroup(configuration: .init(
            services: services.map { .init(service: $0, failureTerminationBehavior: .gracefullyShutdownGroup) },
            logger: Logger(label: "test")))
        return (group, started)
    }

    @Test("the parts start in the one order, each once the one before is ready, and stop in reverse")
    func order() async throws {
        let log = await Log()
        let parts = await ["apps", "conditions", "mqtt"].asyncMap { await NotingPart($0, log: log) }
        let (group, started) = await Self.group(parts, log: log, listenAfter: .milliseconds(100))
        let run = Task { try await group.run() }
        for await _ in started { break }
        await group.triggerGracefulShutdown()
        try await run.value
        #expect(await log.lines == ["listening", "start apps", "start conditions", "start mqtt", "all ready",
                                    "stop mqtt", "stop conditions", "stop apps"])
    }

    @Test("a part whose thread ends stops itself, and the group stops the others gracefully and fails with it")
    func threadEnds() async throws {
        let log = await Log()
        let parts = await ["apps", "conditions", "mqtt"].asyncMap { await NotingPart($0, log: log) }
        let (group, started) = await Self.group(parts, log: log, listenAfter: .zero)
        let run = Task { try await group.run() }
        for await _ in started { break }
        await parts[1].thread.finish()
        let error = await #expect(throws: PartEnded.self) { try await run.value }
        #expect(error?.part == "conditions")
        #expect(await log.lines.suffix(3) == ["stop conditions", "stop mqtt", "stop apps"])
    }

    @Test("a graceful shutdown during the start leaves the parts not yet started unstarted, and the group ends cleanly")
    func shutdownDuringStart() async throws {
        let log = await Log()
        let parts = await ["apps", "mqtt"].asyncMap { await NotingPart($0, log: log) }
        // The API never listens: no part may start.
        let (group, _) = await Self.group(parts, log: log, listenAfter: nil)
        let run = Task { try await group.run() }
        try await Task.sleep(for: .milliseconds(100))
        await group.triggerGracefulShutdown()
        try await run.value
        #expect(await log.lines.isEmpty)
    }

    @Test("the conditions part: when the kernel watch's thread ends on its own, the daemon shuts down")
    func conditionsThreadEnds() async throws {
        let log = await Log()
        let conditions = await ConditionsService(reader: ConditionsServiceTests.Reader(), policy: ConditionsPolicy(batteryLowPercent: 20),
                                                 radioModel: .auto, now: 1, logger: Logger(label: "t"))
        let after = await NotingPart("mqtt", log: log)
        let (group, started) = await Self.group([conditions, after], log: log, listenAfter: .zero)
        let run = Task { try await group.run() }
        for await _ in started { break }
        // The watch's thread ends without the part's stop (as if its poll had failed for good).
        let monitor = await conditions.monitor
        monitor.stop()
        let error = await #expect(throws: PartEnded.self) { try await run.value }
        #expect(error?.part == "conditions")
        let lines = await log.lines
        #expect(lines == ["listening", "start mqtt", "all ready", "stop mqtt"], "\(lines)")
    }
}

extension Array {
    func asyncMap<T>(_ body: (Element) async -> T) async -> [T] {
        var out: [T] = []
        for e in self { out.append(await body(e)) }
        return out
    }
}
