import DrowseCore
import DrowsePOSIX

/// One line of an app's event stream, understood.
package enum EventLine: Equatable {
    /// `{"event":"hello",…}`: the stream is open; consumed, never handed to the app.
    case hello(app: String?, state: String?)
    case event(DrowseEvent)
    /// Not JSON, not an object, no id, or a kind this version does not know: dropped, the stream goes on.
    case skipped(String)

    package static func parse(_ bytes: [UInt8]) -> EventLine {
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return .skipped("empty line") }
        let j: JSON
        do { j = try JSON.parse(bytes: bytes) } catch { return .skipped(error.description) }
        guard case .object = j, let name = j["event"]?.stringValue else { return .skipped("not an event object") }
        if name == "hello" { return .hello(app: j["app"]?.stringValue, state: j["state"]?.stringValue) }
        guard let kind = DrowseEvent.Kind(rawValue: name) else { return .skipped("unknown event '\(name)'") }
        guard let id = j["id"]?.stringValue else { return .skipped("\(name) event without an id") }
        var e = DrowseEvent(kind: kind, id: id, json: DrowseJSON(j))
        e.deadline = j["deadline"]?.doubleValue
        e.reason = j["reason"]?.stringValue
        e.payload = j["payload"].map(DrowseJSON.init)
        e.session = j["session"]?.stringValue
        e.transfers = (j["transfers"]?.arrayValue ?? []).compactMap(DrowseTransfer.init)
        e.task = j["task"]?.stringValue.map(BackgroundTaskID.init)
        e.expiresAt = j["expires_at"]?.doubleValue
        e.timeRemaining = j["time_remaining"]?.doubleValue
        if kind == .taskExpiring && e.task == nil { return .skipped("task-expiring event without a task") }
        return .event(e)
    }
}

/// The bytes of one `GET /v1/apps/ID/events` connection in, lines of the stream out.
package struct EventStreamParser {
    package private(set) var http = HTTPResponseDecoder()
    private var lines = LineSplitter()
    /// The body of an answer other than 200 (an error), kept to report it.
    package private(set) var errorBody: [UInt8] = []

    package init() {}

    package var status: Int? { http.status }

    package mutating func feed(_ bytes: some Collection<UInt8>) throws(DrowseError) -> [EventLine] {
        let body: [UInt8]
        do { body = try http.feed(bytes) } catch { throw DrowseError(error) }
        guard let status = http.status else { return [] }
        guard status == 200 else {
            if errorBody.count < 65536 { errorBody += body.prefix(65536 - errorBody.count) }
            return []
        }
        return lines.feed(body).map(EventLine.parse)
    }

    /// The connection closed.
    package mutating func closed() throws(DrowseError) {
        do { try http.closed() } catch { throw DrowseError(error) }
    }
}
