import DrowseCore
import DrowseSystem
import Logging

/// `GET /v1/metrics`, `drowse metrics` and the `[metrics] textfile`: the counters in
/// `AgentMetrics`, with gauges read at the moment of asking.
extension Agent {
    /// The Prometheus text (the router gives it to admin callers only).
    package func metricsText() -> String { metricsExposition() }

    func metricsExposition() -> String { parts.metricsFile.exposition() }
}

/// The `[metrics] textfile`: written at start, and again after whatever the counters call worth
/// it (a wake window, a handler's or a transfer's end, a notification, the MQTT session coming
/// or going). Never on a timer: an idle daemon writes nothing.
@DaemonActor package final class MetricsTextfile: DaemonPart {
    let path: String?
    let metrics: AgentMetrics
    /// The gauges read at the moment of writing: apps, running and queued handlers.
    let registry: AppRegistry
    let handlers: HandlerRunner
    let logger: Logger
    /// The file, its folder opened once at start-up (see `ReplacedFile`).
    var file: ReplacedFile?
    /// A write is queued (`serve` makes it once the turn that asked is over).
    var pending = false
    let writes = Reports<Void>()
    var stopped = false

    package nonisolated var partName: String { "metrics textfile" }

    init(path: String?, metrics: AgentMetrics, registry: AppRegistry, handlers: HandlerRunner, logger: Logger) {
        self.path = path
        self.metrics = metrics
        self.registry = registry
        self.handlers = handlers
        self.logger = logger
    }

    /// The Prometheus text: the counters, and the gauges as they are now.
    func exposition() -> String {
        metrics.exposition(apps: registry.apps.count, runningHandlers: handlers.running, queuedHandlers: handlers.waiting)
    }

    package func start() {
        guard let path else { return }
        do { file = try ReplacedFile(path: path, mode: 0o644) } catch {
            logger.warning("metrics textfile not written: \(error)")
            return
        }
        metrics.onFlush = { [weak self] in self?.changed() }
        write()
    }

    /// The writes asked for, one at a time, until `stop`.
    package func serve() async -> Served {
        for await _ in writes.stream { write() }
        return .ended
    }

    package func stop() async {
        stopped = true
        metrics.onFlush = nil
        writes.finish()
    }

    /// Queues one write for after this turn: many changes in one turn cost one write.
    func changed() {
        guard file != nil, !pending, !stopped else { return }
        pending = true
        writes.yield(())
    }

    func write() {
        pending = false
        guard let file else { return }
        // Rewritten at every change: atomic for node_exporter (and readable by it: 0644), but not
        // flushed to the SD card each time.
        do { try file.write(Array(exposition().utf8), durable: false) } catch {
            logger.warning("metrics textfile not written: \(error)")
        }
    }
}
