@testable import DrowseAgent
import DrowseCore
@testable import DrowseStore
import DrowseSystem
import DrowseTransfers
import Logging
import Testing

/// The transfer service over in-memory doubles: a store that can fail, an engine that only
/// records, a file system of names and sizes, a manual clock and timers the test fires. No
/// libcurl thread, socket, database or file is involved.
@Suite("Transfer service")
@DaemonActor struct TransferServiceTests {
    final class FakeEngine: TransferEngineControl {
        var downloads: [DownloadJob] = []
        var stopped: [String] = []
        func start(_ job: DownloadJob) { downloads.append(job) }
        func start(_ job: UploadJob) {}
        func stop(id: String) { stopped.append(id) }
        func cancel(_ job: UploadJob) {}
    }

    final class MemoryFiles: TransferFiles {
        var sizes: [String: Int64] = [:]
        var removed: [String] = []
        var inboxes: [String] = []
        var accounts: [String: (uid: UInt32, gid: UInt32)] = [:]
        /// Each path read, with the uid it was read as (nil: root's own rights).
        var readAs: [(path: String, uid: UInt32?)] = []
        func exists(_ path: String, as who: FileIdentity?) -> Bool { sizes[path] != nil }
        func regularFileSize(_ path: String, as who: FileIdentity?) -> Int64? {
            readAs.append((path, who?.uid))
            return sizes[path]
        }
        func sha256(ofFile path: String, as who: FileIdentity?) -> String? { nil }
        func remove(_ path: String, as who: FileIdentity?) -> SystemError? { removed.append(path); sizes[path] = nil; return nil }
        func makeInbox(_ dir: String, owner: (uid: UInt32, gid: UInt32)?) -> SystemError? { inboxes.append(dir); return nil }
        func account(_ user: String) -> (uid: UInt32, gid: UInt32)? { accounts[user] }
    }

    @DaemonActor final class Rig {
        let clock = ManualClock(wall: 2_000_000, boot: 2_000_000)
        var now: Double {
            get { clock.now }
            set { clock.now = newValue }
        }
        let source = FixedConditions()
        var conditions: Conditions {
            get { source.current }
            set { source.current = newValue }
        }
        var retryAt: [String: Double] { service.retryWakes.compactMapValues(\.at) }
        var timeoutAt: Double? { service.timeoutWake.at }
        let runs = RecordingRunQueue()
        var delivered: [(app: String, key: SessionKey, stdin: [UInt8])] {
            runs.runs.compactMap { if case let .transfers(key, stdin, _) = $0 { (key.app, key, stdin) } else { nil } }
        }
        var radio = 0
        var registry: AppRegistry!
        var apps: [String: AppDefinition] {
            get { registry.apps }
            set { registry.set(Array(newValue.values)) }
        }
        let store = MemoryTransferStore()
        let engine = FakeEngine()
        let files = MemoryFiles()
        let events = DaemonEvents()
        var service: TransferService!

        init() throws {
            conditions.network = .ethernet
            conditions.powerSource = .ac
            let dl = try AppDefinition.parse("""
                id = "dl"
                [transfers]
                events_command = ["/bin/true"]
                """, file: "/etc/drowse/apps.d/dl.toml")
            registry = AppRegistry(apps: [dl])
            events.listen { [unowned self] e in if case .radioUsed = e { self.radio += 1 } }
            let lifecycle = TransferLifecycle(policy: ConditionsPolicy(batteryLowPercent: 20), conditions: conditions, maxPerApp: 4, seed: 7)
            service = TransferService(lifecycle: lifecycle, store: store, files: files, engine: engine, clock: clock, conditions: source, registry: registry,
                                      events: events, runs: runs, stateDir: "/state", logger: Logger(label: "test"))
            service.restore(apps: registry.apps)
        }

        func submit(_ id: String, requirements: TransferRequirements = TransferRequirements()) -> Transfer {
            var t = Transfer(id: id, app: "dl", session: "s", kind: .download, url: "http://127.0.0.1/\(id).bin", destination: nil,
                             sha256: nil, createdAt: now)
            t.timeoutAt = now + 7 * 86400
            t.requirements = requirements
            try? store.save(t)
            service.submitted(t)
            return t
        }
    }

    @Test("a download starts at once into the state folder, completes, wakes the radio and goes to the app's events handler")
    func download() throws {
        let rig = try Rig()
        _ = rig.submit("t1")
        let job = try #require(rig.engine.downloads.first)
        #expect(job.partPath == "/state/transfers/t1.part" && job.finalPath == "/state/inbox/dl/t1-t1.bin")
        #expect(rig.files.inboxes == ["/state/inbox/dl"])
        #expect(rig.store.rows["t1"]?.state == .running)
        rig.service.engineEvent(.completed(id: "t1", bytes: 42, path: job.finalPath))
        #expect(rig.store.rows["t1"]?.state == .completed && rig.store.rows["t1"]?.bytesTotal == 42)
        #expect(rig.radio == 1)
        let session = try #require(rig.delivered.first)
        #expect(session.app == "dl" && session.key == SessionKey(app: "dl", session: "s"))
        let doc = try JSON.parse(bytes: session.stdin)
        #expect(doc["transfers"]?.arrayValue?.first?["id"]?.stringValue == "t1")
    }

    @Test("a wait for a transfer's end returns when it completes, or when its time is up, or at the stop")
    func waitFinished() async throws {
        let rig = try Rig()
        _ = rig.submit("t1")
        let waiting = Task { @DaemonActor in await rig.service.waitFinished("t1", upTo: 30) }
        while rig.service.finishWaiters["t1"]?.count != 1 { await Task.yield() }
        let job = try #require(rig.engine.downloads.first)
        rig.service.engineEvent(.progress(id: "t1", bytesDone: 10, bytesTotal: 42))
        #expect(rig.service.finishWaiters["t1"]?.count == 1, "progress ends no wait")
        rig.service.engineEvent(.completed(id: "t1", bytes: 42, path: job.finalPath))
        await waiting.value
        #expect(rig.service.finishWaiters.isEmpty && rig.clock.pendingWakes.count == rig.service.retryWakes.count)
        // A finished transfer answers at once.
        await rig.service.waitFinished("t1", upTo: 30)

        _ = rig.submit("t2")
        let timed = Task { @DaemonActor in await rig.service.waitFinished("t2", upTo: 5) }
        while rig.service.finishWaiters["t2"]?.count != 1 { await Task.yield() }
        rig.clock.advance(by: 4)
        for _ in 0..<10 { await Task.yield() }
        #expect(rig.service.finishWaiters["t2"]?.count == 1, "not before its time")
        rig.clock.advance(by: 1.1)
        await timed.value
        #expect(rig.service.finishWaiters.isEmpty && rig.store.rows["t2"]?.state == .running)

        let stopped = Task { @DaemonActor in await rig.service.waitFinished("t2", upTo: 30) }
        while rig.service.finishWaiters["t2"]?.count != 1 { await Task.yield() }
        await rig.service.stop()
        await stopped.value
        #expect(rig.service.finishWaiters.isEmpty)
    }

    @Test("past 64 waiting requests, one more is answered at once")
    func waitersBounded() async throws {
        let rig = try Rig()
        _ = rig.submit("t1")
        var tasks: [Task<Void, Never>] = []
        for _ in 0..<TransferService.maxFinishWaiters {
            tasks.append(Task { @DaemonActor in await rig.service.waitFinished("t1", upTo: 60) })
        }
        while rig.service.finishWaiters["t1"]?.count != TransferService.maxFinishWaiters { await Task.yield() }
        await rig.service.waitFinished("t1", upTo: 60)  // returns: the test would hang otherwise
        #expect(rig.service.finishWaiters["t1"]?.count == TransferService.maxFinishWaiters)
        let job = try #require(rig.engine.downloads.first)
        rig.service.engineEvent(.completed(id: "t1", bytes: 42, path: job.finalPath))
        for t in tasks { await t.value }
        #expect(rig.service.finishWaiters.isEmpty)
    }

    @Test("a transient failure sets a retry timer, and the retry starts the engine again")
    func retry() throws {
        let rig = try Rig()
        _ = rig.submit("t2")
        rig.service.engineEvent(.failed(id: "t2", error: TransferError("connection reset", transient: true)))
        let at = try #require(rig.retryAt["t2"])
        #expect(at > rig.now && at <= rig.now + 1.001)
        #expect(rig.store.rows["t2"]?.state == .waiting)
        rig.now = at
        rig.service.retryFired("t2")
        #expect(rig.engine.downloads.count == 2 && rig.store.rows["t2"]?.attempts == 2)
    }

    @Test("metrics: bytes moved (again after a resume), one retry, one resume, a failure by its reason")
    func metrics() throws {
        let rig = try Rig()
        let m = rig.service.metrics
        _ = rig.submit("t1")
        rig.service.engineEvent(.progress(id: "t1", bytesDone: 100, bytesTotal: 400))
        rig.service.engineEvent(.committed(id: "t1", bytesDone: 200, bytesTotal: 400, etag: nil, lastModified: nil))
        rig.service.engineEvent(.progress(id: "t1", bytesDone: 250, bytesTotal: 400))
        rig.service.engineEvent(.failed(id: "t1", error: TransferError("connection reset", transient: true)))
        #expect(m.registry.value("drowse_transfer_retries_total") == 1)
        #expect(m.registry.value("drowse_transfer_resumes_total") == 0)
        rig.now = try #require(rig.retryAt["t1"])
        rig.service.retryFired("t1")
        #expect(m.registry.value("drowse_transfer_resumes_total") == 1, "the retry starts from the 200 bytes on disk")
        rig.service.engineEvent(.progress(id: "t1", bytesDone: 300, bytesTotal: 400))
        rig.service.engineEvent(.completed(id: "t1", bytes: 400, path: "/state/inbox/dl/t1-t1.bin"))
        // 250 in the first attempt, 200 more (from byte 200) in the second.
        #expect(m.registry.value("drowse_transfer_bytes_total", [("app", "dl"), ("direction", "download")]) == 450)
        #expect(m.registry.value("drowse_transfer_retries_total") == 1)
        for reason in TransferFailureReason.allCases {
            #expect(m.registry.value("drowse_transfer_failures_total", [("reason", reason.rawValue)]) == 0)
        }
        _ = rig.submit("t2")
        rig.service.engineEvent(.failed(id: "t2", error: TransferError("HTTP 404", transient: false)))
        #expect(rig.store.rows["t2"]?.state == .failed)
        #expect(m.registry.value("drowse_transfer_failures_total", [("reason", "http_4xx")]) == 1)
        #expect(m.registry.value("drowse_transfer_retries_total") == 1)
    }

    @Test("a full disk keeps the newest state in memory and shows it")
    func unsaved() throws {
        let rig = try Rig()
        _ = rig.submit("t3")
        rig.store.full = true
        rig.service.cancel("t3")
        #expect(rig.engine.stopped == ["t3"])
        #expect(rig.store.rows["t3"]?.state == .running, "the store could not take it")
        #expect(rig.service.current("t3")?.state == .cancelled, "the API still tells the truth")
        #expect(rig.files.removed.contains("/state/transfers/t3.part"))
        #expect(rig.service.unsaved["t3"]?.state == .cancelled)
    }

    @Test("conditions that stop holding pause a running transfer; holding again resumes it")
    func conditions() throws {
        let rig = try Rig()
        var needs = TransferRequirements()
        needs.noCellular = true
        _ = rig.submit("t5", requirements: needs)
        rig.conditions.network = .cellular
        rig.conditions.metered = true
        rig.service.conditionsChanged()
        #expect(rig.engine.stopped == ["t5"] && rig.store.rows["t5"]?.state == .paused)
        rig.conditions.network = .wifi
        rig.conditions.metered = false
        rig.service.conditionsChanged()
        #expect(rig.engine.downloads.count == 2 && rig.store.rows["t5"]?.state == .running)
    }

    @Test("at start-up a download whose verified file is already final completes without the engine")
    func restoreFinished() throws {
        let rig = try Rig()
        var t = Transfer(id: "t6", app: "dl", session: "s", kind: .download, url: "http://127.0.0.1/t6.bin", destination: nil,
                         sha256: nil, createdAt: rig.now)
        t.state = .running
        t.bytesTotal = 10
        t.timeoutAt = rig.now + 86400
        rig.store.rows["t6"] = t
        rig.files.sizes["/state/inbox/dl/t6-t6.bin"] = 10
        let fresh = try Rig()
        fresh.store.rows = rig.store.rows
        fresh.files.sizes = rig.files.sizes
        fresh.service.restore(apps: fresh.apps)
        #expect(fresh.store.rows["t6"]?.state == .completed)
        #expect(fresh.engine.downloads.isEmpty)
    }

    /// An app that runs as uid 4242 ("bob"), its rows queued by root (no owner stored, as in
    /// rows written by an older drowsed).
    func bobRig() throws -> Rig {
        let rig = try Rig()
        rig.files.accounts["bob"] = (4242, 4242)
        rig.apps["dl"] = try AppDefinition.parse("""
            id = "dl"
            user = "bob"
            [transfers]
            events_command = ["/bin/true"]
            """, file: "/etc/drowse/apps.d/dl.toml")
        return rig
    }

    @Test("a root-queued download into an app's folder and a root-queued upload are touched as the app's user")
    func rootQueuedUsesTheAppsRights() throws {
        let rig = try bobRig()
        var t = Transfer(id: "t7", app: "dl", session: "s", kind: .download, url: "http://127.0.0.1/x", destination: "/home/bob/dl/x",
                         sha256: nil, createdAt: rig.now)
        t.timeoutAt = rig.now + 86400
        #expect(rig.service.job(t).identity?.uid == 4242, "root's request must not give root's rights to bob's paths")
        var u = Transfer(id: "t8", app: "dl", session: "s", kind: .upload, url: "http://127.0.0.1/up", destination: nil,
                         sha256: nil, createdAt: rig.now)
        u.source = "/home/bob/f"
        #expect(rig.service.uploadJob(u).identity?.uid == 4242)
        // An owner stored at queueing time wins (an admin's request for an app that runs as root).
        t.ownerUID = 1000
        t.ownerGID = 1000
        #expect(rig.service.job(t).identity?.uid == 1000)
        // An app that runs as root, queued by root: root's rights, the app file's explicit choice.
        rig.files.accounts["bob"] = (0, 0)
        t.ownerUID = nil
        t.ownerGID = nil
        #expect(rig.service.job(t).identity == nil)
    }

    @Test("at start-up an inbox file (in a folder its app's user owns) is read as that user")
    func restoreReadsInboxAsTheApp() throws {
        let rig = try bobRig()
        var t = Transfer(id: "t9", app: "dl", session: "s", kind: .download, url: "http://127.0.0.1/t9.bin", destination: nil,
                         sha256: nil, createdAt: rig.now)
        t.state = .running
        t.bytesTotal = 10
        t.timeoutAt = rig.now + 86400
        rig.store.rows["t9"] = t
        rig.files.sizes["/state/inbox/dl/t9-t9.bin"] = 10
        rig.files.readAs = []
        rig.service.restore(apps: rig.apps)
        let reads = rig.files.readAs.filter { $0.path == "/state/inbox/dl/t9-t9.bin" }
        #expect(!reads.isEmpty && reads.allSatisfy { $0.uid == 4242 }, "\(reads)")
    }
}
