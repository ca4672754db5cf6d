import DrowseCore
import Testing

@Suite("Update journal")
struct UpdateJournalTests {
    @Test("an update id names a directory and a unit: no slashes, no dots or dashes first, at most 64")
    func ids() {
        for ok in ["u1", "board-v2.0", "A_b.c-9", String(repeating: "x", count: 56)] { #expect(UpdateRequest.isValidID(ok), "\(ok)") }
        for bad in ["", ".", "..", "-x", ".hidden", "a/b", "a b", "kept/..", String(repeating: "x", count: 57), "é"] {
            #expect(!UpdateRequest.isValidID(bad), "\(bad)")
        }
        #expect(UpdateRequest.isValidUnit("drowsed.service") && !UpdateRequest.isValidUnit("-x") && !UpdateRequest.isValidUnit("a b"))
        #expect(UpdateRequest.defaultService(forPackage: "drowse") == "drowsed.service")
        #expect(UpdateRequest.defaultService(forPackage: "hello") == nil)
        #expect(UpdateRequest(id: "u1").session == "update-u1" && UpdateRequest.id(ofSession: "update-u1") == "u1")
        #expect(UpdateRequest.id(ofSession: "updates") == nil && UpdateRequest.id(ofSession: "update-../x") == nil)
        #expect(UpdateRequest.isValidPackage("drowse") && UpdateRequest.isValidPackage("libc6.1-dev+x"))
        #expect(!UpdateRequest.isValidPackage("D") && !UpdateRequest.isValidPackage("-x") && !UpdateRequest.isValidPackage("a b"))
    }

    @Test("a request and a progress round-trip through their files; what is not one is refused")
    func roundTrip() throws {
        let r = UpdateRequest(
            id: "u1", service: "hello.service", check: ["/bin/sh", "-c", "true"], healthFor: 5, checkWithin: 60, package: "hello", installBy: 1.5e9)
        #expect(UpdateRequest.parse(try JSON.parse(r.json.serialized)) == r)
        #expect(UpdateRequest.parse(try JSON.parse(#"{"id": "u2"}"#)) == UpdateRequest(id: "u2"))
        for bad in [#"{"id": "../x"}"#, #"{"id": "u", "service": "a b"}"#, #"{"id": "u", "health_for": -1}"#, #"{"id": "u", "check_within": 0}"#, #"{"id": "u", "package": "Hello"}"#, "{}"] {
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

    @Test("a stop and a start between two looks is a break: the service's run changed")
    func restartBetweenLooks() {
        var w = HealthWatch(service: "crashy.service", healthFor: 5, start: 0, within: 12)
        #expect(w.observe("active", run: "0/100", at: 0) == .wait)
        #expect(w.observe("active", run: "0/100", at: 2) == .wait)
        #expect(w.observe("active", run: "1/2600", at: 3) == .wait)
        #expect(w.observe("active", run: "1/2600", at: 7) == .wait)
        #expect(w.observe("active", run: "2/7100", at: 8) == .wait)
        #expect(w.observe("active", run: "3/11600", at: 12)
            == .unhealthy("crashy.service was not active for 5 s within 12 s (at the deadline: active for only 0 s, 3 stops seen)"))
        // The same run all along is healthy.
        var steady = HealthWatch(service: "s", healthFor: 5, start: 0, within: 12)
        _ = steady.observe("active", run: "0/100", at: 0)
        #expect(steady.observe("active", run: "0/100", at: 5) == .healthy)
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

@Suite("Update notice")
struct UpdateNoticeTests {
    static let sha = String(repeating: "ab", count: 32)

    @Test("a notification's payload names the package and the update's check; [updates] gives the defaults")
    func parse() throws {
        var defaults = MainConfig.UpdatesConfig()
        defaults.healthFor = .seconds(12)
        let minimal = try UpdateNotice.parse(#"{"id": "v2", "url": "https://x/p.deb", "sha256": "\#(Self.sha.uppercased())"}"#, defaults: defaults)
        #expect(minimal == UpdateNotice(request: UpdateRequest(id: "v2", healthFor: 12, checkWithin: 300), url: "https://x/p.deb", sha256: Self.sha, discretionary: false))
        let full = try UpdateNotice.parse(
            #"{"aps": {"content-available": 1}, "id": "v3", "url": "http://x/p.deb", "sha256": "\#(Self.sha)", "package": "hello", "service": "hello.service", "check": "curl -fs localhost", "health_for": "5s", "check_within": 60, "install_by": 1800000000, "discretionary": true}"#,
            defaults: defaults)
        #expect(full.request == UpdateRequest(
            id: "v3", service: "hello.service", check: ["/bin/sh", "-c", "curl -fs localhost"], healthFor: 5, checkWithin: 60, package: "hello",
            installBy: 1_800_000_000))
        #expect(full.discretionary)
    }

    @Test("what is not an update is refused, saying which key", arguments: [
        ("[1]", "object"), (#"{"url": "http://x", "sha256": "SHA"}"#, "'id'"), (#"{"id": "a/b", "url": "http://x", "sha256": "SHA"}"#, "'id'"),
        (#"{"id": "a", "url": "file:///etc/passwd", "sha256": "SHA"}"#, "'url'"), (#"{"id": "a", "url": "http://x", "sha256": "12"}"#, "'sha256'"),
        (#"{"id": "a", "url": "http://x", "sha256": "SHA", "package": "A B"}"#, "'package'"),
        (#"{"id": "a", "url": "http://x", "sha256": "SHA", "service": "-x"}"#, "'service'"),
        (#"{"id": "a", "url": "http://x", "sha256": "SHA", "check": 5}"#, "'check'"),
        (#"{"id": "a", "url": "http://x", "sha256": "SHA", "health_for": "soon"}"#, "'health_for'"),
        (#"{"id": "a", "url": "http://x", "sha256": "SHA", "health_for": 400}"#, "'check_within'"),
        (#"{"id": "a", "url": "http://x", "sha256": "SHA", "install_by": "tomorrow"}"#, "'install_by'"),
    ])
    func refused(text: String, key: String) {
        #expect {
            _ = try UpdateNotice.parse(text.replacingOccurrences("SHA", with: Self.sha), defaults: MainConfig.UpdatesConfig())
        } throws: { e in "\(e)".contains(key) }
    }
}
