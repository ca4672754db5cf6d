import DrowseCore
import Testing

/// The event stream's lines and the handlers' standard input, as `APIWire` writes them: the
/// exact text docs/api.md ("Event stream") and docs/handlers.md ("Standard input") show, key for
/// key and in that order, and read back again.
@Suite("APIWire: event lines and handler input")
struct WireEventTests {
    static let transfer = APIWire.Transfer(
        id: "0b912cc7d5098305", app: "updater", session: "updates", kind: "download", state: "completed", url: "https://example.org/README",
        bytesDone: 300_000, bytesTotal: 300_000, reason: nil, location: "/var/lib/drowse/inbox/updater/0b912cc7d5098305-README",
        sha256: nil, destination: nil, source: nil, uploadProtocol: nil, createdAt: 1_764_110_400.4, finishedAt: 1_764_110_401.2,
        timeoutAt: nil, discretionary: false, noCellular: false, requiresPower: false, bytesSent: nil, bytesConfirmed: nil,
        uploadURL: nil, contentType: nil, attempts: nil, retries: nil, nextRetryAt: nil)

    /// The transfer as every transfers line and document carries it (`Transfer`'s own text).
    static let transferText =
        #"{"id":"0b912cc7d5098305","app":"updater","session":"updates","kind":"download","state":"completed","url":"https://example.org/README","bytes_done":300000,"bytes_total":300000,"reason":null,"location":"/var/lib/drowse/inbox/updater/0b912cc7d5098305-README","sha256":null,"destination":null,"source":null,"protocol":null,"created_at":1764110400.4,"finished_at":1764110401.2,"timeout_at":null,"discretionary":false,"no_cellular":false,"requires_power":false,"bytes_sent":null,"bytes_confirmed":null,"upload_url":null,"content_type":null,"attempts":null,"retries":null,"next_retry_at":null}"#

    static let payload = JSON.object([("aps", .object([("content-available", 1)])), ("content-id", 42)])

    /// Each line or document and the text drowsed sent for it before the wire types wrote it.
    static let texts: [(JSON, String)] = [
        (APIWire.Event.hello(app: "logger", state: "background").json, #"{"event":"hello","app":"logger","state":"background"}"#),
        (APIWire.Event.hello(app: "logger", state: nil).json, #"{"event":"hello","app":"logger","state":null}"#),
        (APIWire.Event.delivered(id: "e7", deadline: 1_764_110_430, .fetch(reason: "scheduled"), attempt: 1).json,
         #"{"event":"fetch","id":"e7","deadline":1764110430,"reason":"scheduled","attempt":1}"#),
        (APIWire.Event.delivered(id: "e7", deadline: nil, .fetch(reason: "manual"), attempt: 2).json,
         #"{"event":"fetch","id":"e7","deadline":null,"reason":"manual","attempt":2}"#),
        (APIWire.Event.delivered(id: "e8", deadline: 1_764_110_431.5, .notification(payload: payload), attempt: 1).json,
         #"{"event":"notification","id":"e8","deadline":1764110431.5,"payload":{"aps":{"content-available":1},"content-id":42},"attempt":1}"#),
        (APIWire.Event.delivered(id: "e8", deadline: 1_764_110_431.5, .notification(payload: "not json"), attempt: 3).json,
         #"{"event":"notification","id":"e8","deadline":1764110431.5,"payload":"not json","attempt":3}"#),
        (APIWire.Event.delivered(id: "e9", deadline: 1_764_110_460, .transfers(session: "updates", transfers: [transfer]), attempt: 1).json,
         #"{"event":"transfers","id":"e9","deadline":1764110460,"session":"updates","transfers":["# + transferText + #"],"attempt":1}"#),
        (APIWire.Event.delivered(id: "e9", deadline: 1_764_110_460, .transfers(session: "", transfers: []), attempt: 1).json,
         #"{"event":"transfers","id":"e9","deadline":1764110460,"session":"","transfers":[],"attempt":1}"#),
        (APIWire.Event.taskExpiring(id: "e10", task: ("t3", 1_764_110_465, 4.99)).json,
         #"{"event":"task-expiring","id":"e10","task":"t3","expires_at":1764110465,"time_remaining":4.99}"#),
        (APIWire.Event.taskExpiring(id: "e10", task: nil).json, #"{"event":"task-expiring","id":"e10"}"#),
        (APIWire.FetchInput(app: "weather", reason: "scheduled").json, #"{"event":"fetch","app":"weather","reason":"scheduled"}"#),
        (APIWire.TransfersInput(app: "updater", session: "updates", transfers: [transfer]).json,
         #"{"event":"transfers","app":"updater","session":"updates","transfers":["# + transferText + #"]}"#),
        (APIWire.TransfersInput(app: "updater", session: "default", transfers: []).json,
         #"{"event":"transfers","app":"updater","session":"default","transfers":[]}"#),
    ]

    @Test("each line and document is the text sent before, byte for byte")
    func sameBytes() {
        for (json, text) in Self.texts { #expect(json.serialized == text) }
    }

    @Test("what is written reads back the same")
    func roundTrip() throws {
        for (json, text) in Self.texts {
            let parsed = try JSON.parse(text)
            if json["app"] != nil, json["id"] == nil, json["event"]?.stringValue != "hello" {
                if json["event"]?.stringValue == "fetch" {
                    #expect(APIWire.FetchInput(json: parsed).json.serialized == text)
                } else {
                    #expect(APIWire.TransfersInput(json: parsed).json.serialized == text)
                }
            } else {
                #expect(APIWire.Event(json: parsed).json.serialized == text)
            }
        }
        let e = APIWire.Event.delivered(id: "e9", deadline: 1, .transfers(session: "s", transfers: [Self.transfer]), attempt: 1)
        #expect(APIWire.Event(json: e.json) == e)
    }

    @Test("reading takes what is there: unknown kinds and keys, missing and mistyped members")
    func tolerantReading() throws {
        let newer = APIWire.Event(json: try JSON.parse(#"{"event":"reboot","id":"e1","deadline":"soon","attempt":1.5,"new":true}"#))
        #expect(newer.event == "reboot" && newer.id == "e1" && newer.deadline == nil && newer.attempt == nil && newer.payload == nil)
        let null = APIWire.Event(json: try JSON.parse(#"{"event":"notification","id":"e2","payload":null}"#))
        #expect(null.payload == .null, "a null payload is the payload")
        #expect(APIWire.Event(json: "not an object").event == nil)
        let input = APIWire.TransfersInput(json: try JSON.parse(#"{"session":"s","transfers":[{"id":"t"},3]}"#))
        #expect(input.session == "s" && input.transfers?.map(\.id) == ["t", nil] && input.app == nil)
    }
}
