import DrowseCore
import Logging

/// Every log line drowsed writes goes through here: the message and every metadata value are
/// escaped (`LogText.escape`), so a URL, an app's reason string, an MQTT topic or a server's
/// words cannot forge a log line with a newline or drive the operator's terminal with escape
/// sequences, whichever code path logged them.
struct EscapingLogHandler<Inner: LogHandler>: LogHandler {
    var inner: Inner

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
             file: String, function: String, line: UInt) {
        inner.log(
            level: level, message: "\(LogText.escape(message.description))", metadata: metadata.map(Self.escape),
            source: source, file: file, function: function, line: line)
    }

    static func escape(_ m: Logger.Metadata) -> Logger.Metadata { m.mapValues(escape) }

    static func escape(_ v: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch v {
        case .string(let s): .string(LogText.escape(s))
        case .stringConvertible(let c): .string(LogText.escape(c.description))
        case .dictionary(let d): .dictionary(escape(d))
        case .array(let a): .array(a.map(escape))
        }
    }
}
