import DrowseCore
import DrowseSystem

/// `GET /v1/metrics`, `drowse metrics` and the `[metrics] textfile`: the counters in
/// `AgentMetrics`, with gauges read at the moment of asking.
extension Agent {
    /// The Prometheus text. Admin callers only (root, drowsed's user, the `drowse` group): the
    /// series name every app and say what each did, which `drowse status` shows only to them too.
    package func metricsText(caller: Caller) throws(APIError) -> String {
        guard caller.isAdmin else { throw .forbidden("metrics are for root and the drowse group") }
        return metricsExposition()
    }

    func metricsExposition() -> String {
        metrics.exposition(apps: apps.count, runningHandlers: runningHandlers, queuedHandlers: handlerQueue.waitingCount)
    }

    /// With a `[metrics] textfile`: written now, and again after whatever the counters call
    /// worth it (a wake window, a handler's or a transfer's end, a notification, the MQTT
    /// session coming or going). Never on a timer: an idle daemon writes nothing.
    func startMetricsTextfile() {
        guard let path = config.metrics.textfile else { return }
        do { metricsTextfile = try ReplacedFile(path: path, mode: 0o644) } catch {
            logger.warning("metrics textfile not written: \(error)")
            return
        }
        metrics.onFlush = { self.metricsChanged() }
        writeMetricsTextfile()
    }

    /// Queues one write for the end of this turn: many changes in one turn cost one write.
    func metricsChanged() {
        guard config.metrics.textfile != nil, !metricsTextfilePending, !stopping else { return }
        metricsTextfilePending = true
        Task { self.writeMetricsTextfile() }
    }

    func writeMetricsTextfile() {
        metricsTextfilePending = false
        guard let file = metricsTextfile else { return }
        // Rewritten at every change: atomic for node_exporter (and readable by it: 0644), but not
        // flushed to the SD card each time.
        do { try file.write(Array(metricsExposition().utf8), durable: false) } catch {
            logger.warning("metrics textfile not written: \(error)")
        }
    }
}
