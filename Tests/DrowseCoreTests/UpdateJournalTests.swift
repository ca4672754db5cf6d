import DrowseCore
import Testing

@Suite("Update journal")
struct UpdateJournalTests {
    @Test("an update id names a directory and a unit: no slashes, no dots or dashes first, at most 64")
    func ids() {
        for ok in ["u1", "board-v2.0", "A_b.c-9", String(repeating: "x", count: 64)] { #expect(UpdateRequest.isValidID(ok), "\(ok)") }
        for bad in ["", ".", "..", "-x", ".hidden", "a/b", "a b", "kept/..", String(repeating: "x", count: 65), "é"] {
            #expect(!UpdateRequest.isValidID(bad), "\(bad)")
        }
        #expect(UpdateRequest.isValidUnit("drowsed.service") && !UpdateRequest.isValidUnit("-x") && !UpdateRequest.isValidUnit("a b"))
        #expect(UpdateRequest.defaultService(forPackage: "drowse") == "drowsed.service")
        #expect(UpdateRequest.defaultService(forPackage: "hello") == nil)
    }

    @Test("a request and a progress round-trip through their files; what is not one is refused")
    func roundTrip() throws {
        let r = UpdateRequest(id: "u1", service: "hello.service", check: ["/bin/sh", "-c", "true"], healthFor: 5, checkWithin: 60)
        #expect(UpdateRequest.parse(try JSON.parse(r.json.serialized)) == r)
        #expect(UpdateRequest.parse(try JSON.parse(#"{"id": "u2"}"#)) == UpdateRequest(id: "u2"))
        for bad in [#"{"id": "../x"}"#, #"{"id": "u", "service": "a b"}"#, #"{"id": "u", "health_for": -1}"#, #"{"id": "u", "check_within": 0}"#, "{}"] {
            #expect(UpdateRequest.parse(try JSON.parse(bad)) == nil, "\(bad)")
        }
        var p = UpdateProgress(report: UpdateReport(id: "u1", state: .installing), step: .prepare)
        p.enter(.installing, at: 100)
        p.package = "hello"
        p.report.from = "1.0"
        p.report.to = "2.0"
        p.step = .check
        p.enter(.checking, at: 110)
        p.enter(.installing, at: 120)  // a rollback installs again: the first time stays
        #expect(p.report.times == [.installing: 100, .checking: 110])
        #expect(UpdateProgress.parse(try JSON.parse(p.json.serialized)) == p)
        #expect(UpdateProgress.parse(try JSON.parse(#"{"step": "flying", "report": {"id": "u", "state": "waiting"}}"#)) == nil)
    }

    @Test("healthy once active for health_for without a break; a break starts the count again")
    func healthy() {
        var w = HealthWatch(service: "hello.service", healthFor: 10, start: 0, within: 60)
        #expect(w.observe("activating", at: 0) == .wait)
        #expect(w.observe("active", at: 1) == .wait)
        #expect(w.observe("active", at: 9) == .wait)
        #expect(w.observe("failed", at: 10) == .wait)
        #expect(w.observe("active", at: 12) == .wait)
        #expect(w.observe("active", at: 21) == .wait)
        #expect(w.observe("active", at: 22) == .healthy)
    }

    @Test("unhealthy at the deadline, saying what the service did")
    func unhealthy() {
        var w = HealthWatch(service: "hello.service", healthFor: 10, start: 100, within: 30)
        #expect(w.observe("active", at: 100) == .wait)
        #expect(w.observe("failed", at: 105) == .wait)
        #expect(w.observe("activating", at: 125) == .wait)
        #expect(w.observe("failed", at: 130) == .unhealthy("hello.service was not active for 10 s within 30 s (at the deadline: 'failed', 1 stop seen)"))
        var flapping = HealthWatch(service: "s", healthFor: 10, start: 0, within: 20)
        _ = flapping.observe("active", at: 0)
        _ = flapping.observe("failed", at: 9)
        #expect(flapping.observe("active", at: 15) == .wait)
        #expect(flapping.observe("active", at: 20) == .unhealthy("s was not active for 10 s within 20 s (at the deadline: active for only 5 s, 1 stop seen)"))
    }
}
