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
        guard case .object = j else { return .skipped("not an event object") }
        let line = APIWire.Event(json: j)
        guard let name = line.event else { return .skipped("not an event object") }
        if name == "hello" { return .hello(app: line.app, state: line.state) }
        guard let kind = DrowseEvent.Kind(rawValue: name) else { return .skipped("unknown event '\(name)'") }
        guard let id = line.id else { return .skipped("\(name) event without an id") }
        var e = DrowseEvent(kind: kind, id: id, json: DrowseJSON(j))
        e.deadline = line.deadline
        e.reason = line.reason
        e.payload = line.payload.map(DrowseJSON.init)
        e.session = line.session
        // Each transfer read through the API's `Transfer`, and kept whole as drowsed sent it.
        e.transfers = zip(line.transfers ?? [], j["transfers"]?.arrayValue ?? []).compactMap { DrowseTransfer($0, $1) }
        e.task = line.task.map(BackgroundTaskID.init)
        e.expiresAt = line.expiresAt
        e.timeRemaining = line.timeRemaining
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
