import DrowseCore
import Testing

@Suite("Transfer")
struct TransferTests {
    @Test("a new transfer waits with nothing done")
    func initialState() {
        let t = Transfer(id: "t1", app: "weather", session: "default", kind: .download, url: "https://h/f.zip",
            destination: nil, sha256: nil, createdAt: 100)
        #expect(t.state == .waiting)
        #expect(t.bytesDone == 0)
        #expect(t.bytesTotal == nil)
        #expect(t.reason == nil && t.location == nil && t.finishedAt == nil)
        #expect(!t.delivered)
    }

    @Test("finished states are completed, failed and cancelled")
    func finishedStates() {
        let finished: [Transfer.State] = [.completed, .failed, .cancelled]
        for s in [Transfer.State.waiting, .running, .paused, .completed, .failed, .cancelled] {
            #expect(s.isFinished == finished.contains(s))
        }
    }

    @Test("the JSON shape holds every key the SPEC lists, nulls included")
    func json() throws {
        var t = Transfer(id: "t1", app: "weather", session: "s", kind: .upload, url: "https://h/up", destination: nil,
            sha256: "ab", createdAt: 0)
        t.state = .running
        t.bytesDone = 1 << 40
        let j = t.json
        for key in ["id", "app", "session", "kind", "state", "url", "bytes_done", "bytes_total", "reason", "location"] {
            #expect(j[key] != nil, "missing \(key)")
        }
        #expect(j["kind"] == "upload")
        #expect(j["state"] == "running")
        #expect(j["bytes_done"] == .number(1_099_511_627_776))
        #expect(j["bytes_total"] == .null)
        #expect(j["location"] == .null)
        #expect(j["sha256"] == "ab")
        #expect(try JSON.parse(j.serialized) == j)
        #expect(j.serialized.hasPrefix(#"{"id":"t1","app":"weather","session":"s","kind":"upload","state":"running""#))
    }
}
