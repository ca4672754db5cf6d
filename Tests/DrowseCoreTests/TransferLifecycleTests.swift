import Testing
@testable import DrowseCore

/// The transfer lifecycle on a manual clock: every test moves `clock` by hand and feeds the
/// machine events; what it asserts is the actions that come out and the transfers' states.
@Suite("TransferLifecycle")
struct TransferLifecycleTests {
    typealias Action = TransferLifecycle.Action

    static let online: Conditions = {
        var c = Conditions()
        c.powerSource = .ac
        c.network = .ethernet
        return c
    }()
    static let offline = Conditions()
    static let metered: Conditions = {
        var c = online
        c.network = .cellular
        c.metered = true
        return c
    }()

    static func machine(_ c: Conditions = online, maxPerApp: Int = 256,
                        apps: [String: TransferLifecycle.AppEvents] = ["app": .init(hasCommand: true, launches: true)]) -> TransferLifecycle {
        var m = TransferLifecycle(policy: ConditionsPolicy(batteryLowPercent: 20), conditions: c, maxPerApp: maxPerApp, seed: 42)
        m.apps = apps
        return m
    }

    static func download(_ id: String, session: String = "s", at t: Double = 1000, timeout: Double = 7 * 86400) -> Transfer {
        var tr = Transfer(id: id, app: "app", session: session, kind: .download, url: "https://h/\(id)", destination: nil,
                          sha256: nil, createdAt: t)
        tr.timeoutAt = t + timeout
        return tr
    }

    static func started(_ a: [Action]) -> [Transfer] { a.compactMap { if case .startEngine(let t) = $0 { return t }; return nil } }
    static func persisted(_ a: [Action]) -> [Transfer] { a.compactMap { if case .persist(let t) = $0 { return t }; return nil } }
    static func retryAt(_ a: [Action]) -> Double? {
        a.lazy.compactMap { if case .setRetryTimer(_, let at) = $0 { return at }; return nil }.first
    }
    static func deliveries(_ a: [Action]) -> [[String]] {
        a.compactMap { if case .deliverSession(_, _, let batch) = $0 { return batch.map(\.id) }; return nil }
    }
    static func failed(_ reason: String = "connection reset", transient: Bool = true, noSpace: Bool = false) -> TransferLifecycle.AttemptOutcome {
        .failed(reason: reason, transient: transient, noSpace: noSpace)
    }

    @Test("queued → running → completed: persisted, engine started, progress committed, the session delivered")
    func happyPath() throws {
        var clock = 1000.0
        var m = Self.machine()
        var a = m.submitted(Self.download("t1"), now: clock)
        #expect(Self.started(a).map(\.id) == ["t1"])
        #expect(Self.persisted(a).last?.state == .running && Self.persisted(a).last?.attempts == 1)
        #expect(a.contains(.setTimeoutTimer(at: 1000 + 7 * 86400)))
        #expect(m.transfer("t1")?.state == .running)

        a = m.progressCommitted(id: "t1", bytesDone: 4096, bytesTotal: 8192, etag: "\"e\"", lastModified: nil)
        #expect(a == [.commitProgress(id: "t1", bytesDone: 4096, bytesTotal: 8192, etag: "\"e\"", lastModified: nil)])
        m.progressed(id: "t1", bytesDone: 6000, bytesTotal: 8192)
        #expect(m.shown(Self.download("t1")).bytesDone == 6000)  // live progress shows while running

        clock += 5
        a = m.attemptEnded(id: "t1", .completed(bytes: 8192, path: "/inbox/app/t1-f"), now: clock)
        let done = try #require(Self.persisted(a).first)
        #expect(done.state == .completed && done.bytesDone == 8192 && done.location == "/inbox/app/t1-f" && done.finishedAt == 1005)
        #expect(a.contains(.radioBusy(until: 1005)))
        #expect(Self.deliveries(a) == [["t1"]])
        #expect(a.contains(.cancelTimeoutTimer))  // nothing unfinished: no deadline to watch

        // A second report of the same end changes nothing.
        #expect(m.attemptEnded(id: "t1", .completed(bytes: 8192, path: "/x"), now: clock).isEmpty)
    }

    @Test("blocked by conditions → waiting, saying why → conditions allow → running")
    func waitsForConditions() throws {
        var m = Self.machine(Self.offline)
        var a = m.submitted(Self.download("t1"), now: 1000)
        #expect(Self.started(a).isEmpty)
        let waiting = try #require(Self.persisted(a).last)
        #expect(waiting.state == .waiting && waiting.reason == "waiting: no network")

        // Still no network: nothing to say again.
        #expect(m.conditionsChanged(Self.offline, now: 1010).isEmpty)

        var discretionary = Self.download("t2")
        discretionary.requirements.discretionary = true
        a = m.conditionsChanged(Self.metered, now: 1020)
        #expect(Self.started(a).map(\.id) == ["t1"])
        _ = m.submitted(discretionary, now: 1021)
        #expect(m.transfer("t2")?.state == .waiting && m.transfer("t2")?.reason == "waiting: metered network")

        a = m.conditionsChanged(Self.online, now: 1030)
        #expect(Self.started(a).map(\.id) == ["t2"])
        #expect(m.transfer("t2")?.state == .running && m.transfer("t2")?.reason == nil)
    }

    @Test("running → conditions stop → paused with its progress kept → resumes from there")
    func pausesKeepingProgress() throws {
        var m = Self.machine()
        var t = Self.download("t1")
        t.requirements.noCellular = true
        _ = m.submitted(t, now: 1000)
        _ = m.progressCommitted(id: "t1", bytesDone: 3_000_000, bytesTotal: 10_000_000, etag: "\"v1\"", lastModified: nil)

        var a = m.conditionsChanged(Self.metered, now: 1100)
        #expect(a.first == .stopEngine(id: "t1"))
        let paused = try #require(Self.persisted(a).first)
        #expect(paused.state == .paused && paused.reason == "paused: cellular network" && paused.bytesDone == 3_000_000)

        // The engine's last commit after the stop still counts; a late failure report does not.
        _ = m.progressCommitted(id: "t1", bytesDone: 3_100_000, bytesTotal: 10_000_000, etag: "\"v1\"", lastModified: nil)
        #expect(m.attemptEnded(id: "t1", Self.failed("stopped"), now: 1101).isEmpty)
        #expect(m.transfer("t1")?.state == .paused)

        a = m.conditionsChanged(Self.online, now: 1200)
        let resumed = try #require(Self.started(a).first)
        #expect(resumed.bytesDone == 3_100_000 && resumed.etag == "\"v1\"" && resumed.attempts == 2 && resumed.retries == 0)
    }

    @Test("a transient failure waits for its retry timer, conditions or not, then runs again")
    func transientFailureRetries() throws {
        var clock = 1000.0
        var m = Self.machine()
        _ = m.submitted(Self.download("t1"), now: clock)
        clock = 1010
        var a = m.attemptEnded(id: "t1", Self.failed(), now: clock)
        let at = try #require(Self.retryAt(a))
        #expect((1010.5...1011).contains(at))  // the first step: 0.5–1 s
        let waiting = try #require(Self.persisted(a).first)
        #expect(waiting.state == .waiting && waiting.retries == 1 && waiting.nextRetryAt == at)
        #expect(waiting.reason == "retrying in 1s after: connection reset")
        #expect(Self.started(a).isEmpty)

        // Conditions that allow it do not cut the countdown short; ones that block it do not
        // overwrite its reason.
        #expect(m.conditionsChanged(Self.online, now: 1010.2).isEmpty)
        #expect(m.conditionsChanged(Self.offline, now: 1010.3).isEmpty)
        _ = m.conditionsChanged(Self.online, now: 1010.4)

        clock = at
        a = m.retryTimerFired(id: "t1", now: clock)
        let again = try #require(Self.started(a).first)
        #expect(again.attempts == 2 && again.retries == 1 && again.nextRetryAt == nil && again.state == .running)
        // A second firing of the same timer does not start it twice.
        #expect(m.retryTimerFired(id: "t1", now: clock).isEmpty)
    }

    @Test("a 503 with Retry-After: the retry timer is set no sooner than the server asked")
    func retryAfter() throws {
        var m = Self.machine()
        _ = m.submitted(Self.download("t1"), now: 1000)
        let a = m.attemptEnded(id: "t1", .failed(reason: "HTTP 503", transient: true, noSpace: false, retryAfter: .seconds(30)), now: 1001)
        #expect(Self.retryAt(a) == 1031)
        #expect(m.transfer("t1")?.nextRetryAt == 1031)
    }

    @Test("after a restart a planned retry (Retry-After) keeps its time; one already due starts at once")
    func restoredRetryKeepsItsTime() throws {
        var waiting = Self.download("t1")
        waiting.state = .waiting
        waiting.nextRetryAt = 1100
        var due = Self.download("t2")
        due.state = .waiting
        due.nextRetryAt = 1040
        var m = Self.machine()
        let a = m.restored([waiting, due], apps: ["app": .init(hasCommand: true, launches: true)], now: 1050)
        #expect(a.contains(.setRetryTimer(id: "t1", at: 1100)))
        #expect(Self.started(a).map(\.id) == ["t2"])
        // Conditions changing meanwhile do not bring it forward either.
        #expect(Self.started(m.conditionsChanged(Self.online, now: 1060)).isEmpty)
        #expect(Self.started(m.retryTimerFired(id: "t1", now: 1100)).map(\.id) == ["t1"])
    }

    @Test("a retry due while conditions block it waits for them instead")
    func retryIntoBlockedConditions() throws {
        var m = Self.machine()
        _ = m.submitted(Self.download("t1"), now: 1000)
        let at = try #require(Self.retryAt(m.attemptEnded(id: "t1", Self.failed(), now: 1001)))
        _ = m.conditionsChanged(Self.offline, now: 1001.1)
        var a = m.retryTimerFired(id: "t1", now: at)
        #expect(Self.started(a).isEmpty && m.transfer("t1")?.reason == "waiting: no network")
        a = m.conditionsChanged(Self.online, now: at + 60)
        #expect(Self.started(a).map(\.id) == ["t1"])
    }

    @Test("the backoff grows while attempts move nothing, restarts after a little progress, and is skipped after a megabyte")
    func progressResetsBackoff() throws {
        var clock = 1000.0
        var m = Self.machine()
        _ = m.submitted(Self.download("t1"), now: clock)
        func failAndRetry(moving bytes: Int64) throws -> Double {
            if bytes > 0 {
                let base = m.transfer("t1")!.bytesDone
                _ = m.progressCommitted(id: "t1", bytesDone: base + bytes, bytesTotal: nil, etag: nil, lastModified: nil)
            }
            let at = try #require(Self.retryAt(m.attemptEnded(id: "t1", Self.failed(), now: clock)))
            let delay = at - clock
            clock = at
            #expect(Self.started(m.retryTimerFired(id: "t1", now: clock)).count == 1)
            return delay
        }
        #expect((0.5...1).contains(try failAndRetry(moving: 0)))
        #expect((1...2).contains(try failAndRetry(moving: 0)))
        #expect((2...4).contains(try failAndRetry(moving: 0)))
        #expect((0.5...1).contains(try failAndRetry(moving: 10_000)))  // some progress: first step again
        #expect((1...2).contains(try failAndRetry(moving: 0)))
        #expect(try failAndRetry(moving: 2 << 20) == 0)  // the link works: reconnect at once
        #expect((0.5...1).contains(try failAndRetry(moving: 0)))
        #expect(m.transfer("t1")?.retries == 7 && m.transfer("t1")?.attempts == 8)
    }

    @Test("a full disk pauses on its own, slower backoff, which starts afresh once space came back")
    func diskFullPauses() throws {
        var clock = 1000.0
        var m = Self.machine()
        _ = m.submitted(Self.download("t1"), now: clock)
        var a = m.attemptEnded(id: "t1", Self.failed("No space left on device", noSpace: true), now: clock)
        let paused = try #require(Self.persisted(a).first)
        #expect(paused.state == .paused && paused.reason == "paused: disk full (No space left on device)")
        var at = try #require(Self.retryAt(a))
        #expect((5...10).contains(at - clock))
        // Conditions change: a transfer paused for space keeps waiting for its timer.
        #expect(m.conditionsChanged(Self.online, now: clock + 1).isEmpty)
        clock = at
        _ = m.retryTimerFired(id: "t1", now: clock)
        a = m.attemptEnded(id: "t1", Self.failed("No space left on device", noSpace: true), now: clock)
        at = try #require(Self.retryAt(a))
        #expect((10...20).contains(at - clock))
        clock = at
        _ = m.retryTimerFired(id: "t1", now: clock)
        // A network failure in between: the network backoff is its own, and the disk's restarts.
        at = try #require(Self.retryAt(m.attemptEnded(id: "t1", Self.failed(), now: clock)))
        #expect((0.5...1).contains(at - clock))
        clock = at
        _ = m.retryTimerFired(id: "t1", now: clock)
        at = try #require(Self.retryAt(m.attemptEnded(id: "t1", Self.failed("full", noSpace: true), now: clock)))
        #expect((5...10).contains(at - clock))
    }

    @Test("the resource timeout fails a transfer waiting for conditions, and one counting down to a retry")
    func resourceTimeout() throws {
        var m = Self.machine(Self.offline)
        var a = m.submitted(Self.download("w", timeout: 60), now: 1000)
        #expect(a.contains(.setTimeoutTimer(at: 1060)))
        a = m.submitted(Self.download("r", session: "s2", at: 1001, timeout: 100), now: 1001)
        #expect(!a.contains { if case .setTimeoutTimer = $0 { return true }; return false })  // 1060 is still the earliest

        // A timer that fires a little early expires nothing and is set again.
        #expect(m.timeoutTimerFired(now: 1059.99) == [.setTimeoutTimer(at: 1060)])

        a = m.timeoutTimerFired(now: 1060)
        let w = try #require(Self.persisted(a).first)
        #expect(w.id == "w" && w.state == .failed && w.reason == "timed out: not finished within its --timeout-resource")
        #expect(a.contains(.removePartFile(w)) && a.contains(.setTimeoutTimer(at: 1101)))
        #expect(!a.contains(.stopEngine(id: "w")))  // it never ran
        #expect(m.transfer("r")?.state == .waiting)

        _ = m.conditionsChanged(Self.online, now: 1070)
        #expect(Self.retryAt(m.attemptEnded(id: "r", Self.failed(), now: 1100.5)) != nil)
        a = m.timeoutTimerFired(now: 1101)
        #expect(a.contains(.cancelRetryTimer(id: "r")))
        #expect(!a.contains { if case .setTimeoutTimer = $0 { return true }; return false } && m.timeoutTimerAt == nil)  // nothing left to time
        #expect(m.transfer("r")?.state == .failed)
        #expect(m.retryTimerFired(id: "r", now: 1102).isEmpty)
    }

    @Test("past its deadline a transient failure fails for good, and a running transfer is stopped when it expires")
    func timeoutWhileRunning() throws {
        var m = Self.machine()
        _ = m.submitted(Self.download("a", timeout: 10), now: 1000)
        var a = m.attemptEnded(id: "a", Self.failed("stalled"), now: 1011)
        #expect(Self.persisted(a).first?.reason == "timed out after: stalled" && Self.retryAt(a) == nil)

        _ = m.submitted(Self.download("b", session: "s2", at: 1020, timeout: 10), now: 1020)
        a = m.timeoutTimerFired(now: 1030)
        #expect(a.first == .stopEngine(id: "b") && m.transfer("b")?.state == .failed)

        // A retry due after the deadline fails instead of starting.
        _ = m.submitted(Self.download("c", session: "s3", at: 1040, timeout: 10), now: 1040)
        let at = try #require(Self.retryAt(m.attemptEnded(id: "c", Self.failed(), now: 1049.5)))
        a = m.retryTimerFired(id: "c", now: max(at, 1050.1))
        #expect(Self.started(a).isEmpty && m.transfer("c")?.state == .failed)
    }

    @Test("cancel while running stops the engine; while waiting for a retry, cancels the timer; uploads end their resource")
    func cancel() throws {
        var m = Self.machine()
        _ = m.submitted(Self.download("run", session: "a"), now: 1000)
        var a = m.cancelRequested(id: "run", now: 1001)
        #expect(a.first == .stopEngine(id: "run"))
        let c = try #require(Self.persisted(a).first)
        #expect(c.state == .cancelled && c.reason == "cancelled" && c.finishedAt == 1001 && a.contains(.removePartFile(c)))
        #expect(m.cancelRequested(id: "run", now: 1002).isEmpty)  // already finished

        _ = m.submitted(Self.download("wait", session: "b"), now: 1000)
        _ = m.attemptEnded(id: "wait", Self.failed(), now: 1003)
        a = m.cancelRequested(id: "wait", now: 1003.1)
        #expect(a.contains(.cancelRetryTimer(id: "wait")) && m.transfer("wait")?.state == .cancelled)

        var up = Self.download("up", session: "c")
        up.kind = .upload
        up.uploadURL = "https://h/files/1"
        _ = m.submitted(up, now: 1000)
        _ = m.conditionsChanged(Self.offline, now: 1004)
        a = m.cancelRequested(id: "up", now: 1005)
        guard case .cancelUpload(let u)? = a.first else { Issue.record("no cancelUpload: \(a)"); return }
        #expect(u.uploadURL == "https://h/files/1")
    }

    @Test("force-quit cancels every unfinished transfer of the app and delivers each session once")
    func quit() {
        var m = Self.machine()
        _ = m.submitted(Self.download("a1", session: "x"), now: 1000)
        _ = m.submitted(Self.download("a2", session: "x"), now: 1000)
        _ = m.submitted(Self.download("a3", session: "y"), now: 1000)
        let (n, a) = m.appQuit("app", now: 1001)
        #expect(n == 3)
        #expect(Self.persisted(a).filter { $0.state == .cancelled }.allSatisfy { $0.reason == "cancelled: the app was force-quit" })
        #expect(Self.deliveries(a) == [["a1", "a2"], ["a3"]])
        #expect(m.unfinished(app: "app").isEmpty)
    }

    @Test("start-up: unfinished rows run again from their offset, delivered ones are left alone, a finished file completes")
    func restore() throws {
        var m = Self.machine(apps: [:])
        var running = Self.download("run", session: "a")
        running.state = .running
        running.bytesDone = 5000
        running.attempts = 3
        var done = Self.download("done", session: "b")
        done.state = .completed
        done.delivered = true
        var undelivered = Self.download("old", session: "c")
        undelivered.state = .failed
        var crashed = Self.download("crash", session: "d")
        crashed.state = .running
        crashed.bytesTotal = 100
        let a = m.restored([running, done, undelivered, crashed],
                           finalFiles: ["crash": .init(path: "/inbox/app/crash-f", size: 100, sha256: nil)],
                           apps: ["app": .init(hasCommand: true, launches: true)], now: 2000)
        let started = Self.started(a)
        #expect(started.map(\.id) == ["run"] && started[0].bytesDone == 5000 && started[0].attempts == 4)
        #expect(a.contains(.log(.info, "resuming transfer from byte 5000", metadata: ["transfer.id": "run", "app.id": "app"])))
        #expect(!Self.persisted(a).contains { $0.id == "done" } && m.transfer("done") == nil)
        let c = try #require(Self.persisted(a).first { $0.id == "crash" })
        #expect(c.state == .completed && c.location == "/inbox/app/crash-f" && c.finishedAt == 2000)
        #expect(Self.deliveries(a) == [["old"], ["crash"]])
        #expect(a.last == .setTimeoutTimer(at: 1000 + 7 * 86400))
    }

    @Test("reload: a finished session of an app that was just added is delivered then; a removed app's waits")
    func appsChanged() {
        var m = Self.machine(apps: [:])  // the app is not known yet (its file came after the start)
        var done = Self.download("t1")
        done.state = .completed
        let a = m.restored([done], apps: [:], now: 2000)
        #expect(Self.deliveries(a).isEmpty)
        // The app file is added and drowsed reloaded.
        let b = m.appsChanged(["app": .init(hasCommand: true, launches: true)])
        #expect(Self.deliveries(b) == [["t1"]])
        // Reloading again does not deliver it a second time while it is being handled.
        #expect(Self.deliveries(m.appsChanged(["app": .init(hasCommand: true, launches: true)])).isEmpty)
        // Removed again: nothing is delivered, nothing dropped.
        var n = Self.machine(apps: [:])
        _ = n.restored([done], apps: ["app": .init(hasCommand: true, launches: false)], now: 2000)
        #expect(Self.deliveries(n.appsChanged([:])).isEmpty)
        #expect(n.transfer("t1")?.delivered == false)
    }

    @Test("start-up: a final file of another size or digest is not taken for the download")
    func restoreRefusesWrongFile() {
        var m = Self.machine()
        var t = Self.download("t", session: "a")
        t.bytesTotal = 100
        t.sha256 = String(repeating: "a", count: 64)
        #expect(!TransferLifecycle.wantsDigest(t, size: 99) && TransferLifecycle.wantsDigest(t, size: 100))
        let a = m.restored([t], finalFiles: ["t": .init(path: "/f", size: 100, sha256: String(repeating: "b", count: 64))],
                           apps: m.apps, now: 2000)
        #expect(Self.started(a).map(\.id) == ["t"])
    }

    @Test("a session goes to the events handler once, when its last transfer finishes; inbox files go after")
    func sessionDeliveredOnce() throws {
        var m = Self.machine()
        _ = m.submitted(Self.download("a", session: "s"), now: 1000)
        _ = m.submitted(Self.download("b", session: "s"), now: 1000)
        var a = m.attemptEnded(id: "a", .completed(bytes: 1, path: "/inbox/app/a"), now: 1001)
        #expect(Self.deliveries(a).isEmpty)  // b is still running
        a = m.attemptEnded(id: "b", Self.failed("404", transient: false), now: 1002)
        #expect(Self.deliveries(a) == [["a", "b"]])

        // While the handler runs, another transfer of the session finishes: it waits its turn.
        _ = m.submitted(Self.download("c", session: "s"), now: 1003)
        a = m.cancelRequested(id: "c", now: 1004)
        #expect(Self.deliveries(a).isEmpty)

        a = m.sessionDelivered(app: "app", session: "s")
        #expect(a.contains(.removeFile(path: "/inbox/app/a")))
        let marked = Self.persisted(a)
        #expect(marked.filter(\.delivered).map(\.id) == ["a", "b"] && marked.first { $0.id == "a" }?.location == nil)
        #expect(Self.deliveries(a) == [["c"]])  // the one that finished meanwhile, alone
        #expect(m.transfer("a") == nil && m.transfer("b") == nil)
        a = m.sessionDelivered(app: "app", session: "s")
        #expect(Self.deliveries(a).isEmpty && m.transfer("c") == nil)
        #expect(m.sessionDelivered(app: "app", session: "s").isEmpty)  // nothing handed over any more
    }

    @Test("without an events handler a finished session counts as delivered; without launch events it waits")
    func sessionWithoutHandler() {
        var m = Self.machine(apps: ["app": .init(hasCommand: false, launches: false), "quiet": .init(hasCommand: true, launches: false)])
        _ = m.submitted(Self.download("a"), now: 1000)
        var a = m.attemptEnded(id: "a", .completed(bytes: 1, path: "/x"), now: 1001)
        #expect(Self.persisted(a).last?.delivered == true && Self.deliveries(a).isEmpty && m.transfer("a") == nil)

        var q = Self.download("q")
        q.app = "quiet"
        _ = m.submitted(q, now: 1000)
        a = m.attemptEnded(id: "q", .completed(bytes: 1, path: "/y"), now: 1001)
        #expect(Self.deliveries(a).isEmpty && m.transfer("q")?.delivered == false)
    }

    @Test("an app whose session could not be handed over gets it again at its next finish")
    func sessionNotDelivered() {
        var m = Self.machine()
        _ = m.submitted(Self.download("a"), now: 1000)
        #expect(Self.deliveries(m.attemptEnded(id: "a", .completed(bytes: 1, path: "/x"), now: 1001)) == [["a"]])
        m.sessionNotDelivered(app: "app", session: "s")
        _ = m.submitted(Self.download("b"), now: 1002)
        #expect(Self.deliveries(m.cancelRequested(id: "b", now: 1003)) == [["a", "b"]])
    }

    @Test("an app may have max_per_app unfinished transfers; finished ones do not count")
    func perAppCap() {
        var m = Self.machine(maxPerApp: 2)
        #expect(m.refusal(app: "app") == nil)
        _ = m.submitted(Self.download("a", session: "1"), now: 1000)
        _ = m.submitted(Self.download("b", session: "2"), now: 1000)
        #expect(m.refusal(app: "app") == 2 && m.refusal(app: "other") == nil)
        _ = m.cancelRequested(id: "a", now: 1001)
        #expect(m.refusal(app: "app") == nil)
    }

    @Test("an upload shows what went out, what the server confirmed, and where it goes")
    func uploadShown() {
        var m = Self.machine()
        var up = Self.download("u")
        up.kind = .upload
        up.bytesTotal = 1000
        _ = m.submitted(up, now: 1000)
        #expect(m.uploadResourceKnown(id: "u", url: "https://h/files/9", protocolName: "tus")
            == [.recordUploadResource(id: "u", url: "https://h/files/9", protocolName: "tus")])
        _ = m.progressCommitted(id: "u", bytesDone: 200, bytesTotal: 1000, etag: nil, lastModified: nil)
        m.sent(id: "u", bytes: 600)
        let s = m.shown(up)
        #expect(s.bytesDone == 600 && s.bytesSent == 600 && s.bytesConfirmed == 200)
        #expect(s.location == "https://h/files/9" && s.uploadProtocol == "tus")
        // What a failed attempt had sent counts as what it moved: 2 MiB out, so it reconnects at once.
        m.sent(id: "u", bytes: 2 << 20)
        #expect(Self.retryAt(m.attemptEnded(id: "u", Self.failed(), now: 1010)) == 1010)
    }
}
