import Logging
import Synchronization

/// Keeps every log message, for assertions on what was logged.
package struct CapturingLogHandler: LogHandler {
    package final class Box: Sendable {
        package let lines = Mutex<[(Logger.Level, String)]>([])
        package var all: [(Logger.Level, String)] { lines.withLock { $0 } }
        package func contains(_ s: String) -> Bool { all.contains { $0.1.contains(s) } }
    }

    package let box: Box
    package var metadata: Logger.Metadata = [:]
    package var logLevel: Logger.Level = .trace

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        box.lines.withLock { $0.append((event.level, "\(event.message)")) }
    }

    package static func logger() -> (Logger, Box) {
        let box = Box()
        return (Logger(label: "test") { _ in CapturingLogHandler(box: box) }, box)
    }
}
