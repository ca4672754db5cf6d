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

    @Test("the JSON shape holds every key docs/contract.md lists, nulls included")
    func json() throws {
        var t = Transfer(id: "t1", app: "weather", session: "s", kind: .upload, url: "https://h/up", destination: nil,
            sha256: "ab", createdAt: 0)
        t.state = .running
        t.bytesDone = 1 << 40
        let j = t.json(wall: 0)
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

    @Test("times are shown in wall time: the timeline's times plus the wall clock's skew")
    func jsonWallTime() {
        var t = Transfer(id: "t1", app: "a", session: "s", kind: .download, url: "http://x/", destination: "/tmp/f", sha256: nil, createdAt: 1000)
        t.finishedAt = 1100
        t.timeoutAt = 2000
        t.nextRetryAt = 1500
        let j = t.json(wall: 86400)
        #expect(j["created_at"] == .number(87400))
        #expect(j["finished_at"] == .number(87500))
        #expect(j["timeout_at"] == .number(88400))
        #expect(j["next_retry_at"] == .number(87900))
        #expect(t.json(wall: 0)["created_at"] == .number(1000))
    }

    @Test("a transfer drowsed could have written has no problem")
    func validHasNoProblem() {
        var t = Transfer(id: "t1", app: "a", session: "s", kind: .download, url: "https://h/f", destination: nil, sha256: nil,
            createdAt: 1_700_000_000)
        t.bytesDone = 10
        t.bytesTotal = 20
        #expect(t.problem == nil)
    }

    @Test("values no drowsed writes are problems", arguments: [
        "timeout_at=1e300", "timeout_at=inf", "created_at", "finished_at", "bytes_done=-1", "bytes_done=max", "bytes_total",
        "url", "id",
    ])
    func problems(spoil: String) {
        var t = Transfer(id: "t1", app: "a", session: "s", kind: .download, url: "https://h/f", destination: nil, sha256: nil,
            createdAt: 1_700_000_000)
        switch spoil {
        case "timeout_at=1e300": t.timeoutAt = 1e300
        case "timeout_at=inf": t.timeoutAt = .infinity
        case "created_at": t.createdAt = -1
        case "finished_at": t.finishedAt = .nan
        case "bytes_done=-1": t.bytesDone = -1
        case "bytes_done=max": t.bytesDone = .max
        case "bytes_total": t.bytesTotal = -5
        case "url": t.url = "file:///etc/shadow"
        default: t.id = ""
        }
        let field = String(spoil.prefix { $0 != "=" })
        #expect(t.problem?.contains(field) == true, "\(t.problem ?? "no problem")")
    }

    @Test("a refused transfer is failed, says why, and keeps no value that could arm a timer")
    func refused() {
        var t = Transfer(id: "t1", app: "a", session: "s", kind: .download, url: "https://h/f", destination: nil, sha256: nil,
            createdAt: .infinity)
        t.timeoutAt = 1e300
        t.bytesDone = -3
        t.bytesTotal = .max
        t.finishedAt = 1e300
        let r = t.refused(t.problem ?? "")
        #expect(r.state == .failed)
        #expect(r.reason?.hasPrefix("refused: the stored transfer is invalid (") == true)
        #expect(r.timeoutAt == nil && r.finishedAt == nil && r.bytesTotal == nil)
        #expect(r.bytesDone == 0 && r.createdAt == 0)
        #expect(r.refused("again").problem == nil)
    }
}
