@testable import DrowseAgent
import DrowseCore
@testable import DrowseStore
import DrowseSystem
import Logging
import Synchronization
import DrowseTestSupport
import Testing

/// The notification service over in-memory doubles: a store that can fail, a handler queue that
/// only records, a manual clock and a deferral timer the test fires. No broker, socket, database
/// or process is involved.
@Suite("Notification service")
@DaemonActor struct NotificationServiceTests {
    @DaemonActor final class Rig {
        let clock = ManualClock(wall: 3_000_000, boot: 3_000_000)
        var now: Double {
            get { clock.now }
            set { clock.now = newValue }
        }
        let runs = RecordingRunQueue()
        var ran: [(app: String, seq: Int64)] {
            runs.runs.compactMap { if case let .notification(app, seq, _, _) = $0 { (app, seq) } else { nil } }
        }
        var timer: Double? { service.wake.at }
        let store: MemoryNotificationStore
        var service: NotificationService!
        let topic = Topics.notify(prefix: "drowse", device: "dev", app: "news")

        init(maxPerHour: Int = 12, groups: [String] = [], store: MemoryNotificationStore = MemoryNotificationStore()) throws {
            self.store = store
            let news = try AppDefinition.parse("""
                id = "news"
                [notification]
                command = ["/bin/true"]
                """, file: "/etc/drowse/apps.d/news.toml")
            service = NotificationService(admission: NotificationAdmission(budget: NotificationBudget(maxPerHour: maxPerHour), deviceID: "dev"),
                                          store: store, clock: clock, registry: AppRegistry(apps: [news]), runs: runs, downloads: NoDownloads(),
                                          windows: NoWindows(), events: DaemonEvents(), topicPrefix: "drowse", deviceID: "dev", groups: groups,
                                          logger: Logger(label: "test"))
        }

        /// Whether the message is acknowledged (now, or once its record is synced).
        func push(_ json: String, topic: String? = nil) -> Bool {
            let acked = Mutex<Bool?>(nil)
            service.settle(service.receive(topic: topic ?? self.topic, payload: Array(json.utf8))) { ok in acked.withLock { $0 = ok } }
            return acked.withLock { $0 } ?? false
        }
    }

    static let silent = #"{"aps": {"content-available": 1}, "id": "n1"}"#

    @Test("a silent notification is recorded, charged to the budget and run once; its duplicate is not")
    func runsOnce() throws {
        let rig = try Rig()
        #expect(rig.push(Self.silent))
        #expect(rig.ran.map(\.app) == ["news"] && rig.store.rows.count == 1 && rig.store.budget.count == 1)
        #expect(rig.push(Self.silent), "a duplicate is acknowledged")
        #expect(rig.ran.count == 1)
    }

    @Test("metrics: received, accepted, duplicate, ignored, and refusals by reason")
    func metrics() throws {
        let rig = try Rig()
        let m = rig.service.metrics
        func outcome(_ o: String) -> Double? { m.registry.value("drowse_notifications_total", [("outcome", o)]) }
        func refused(_ r: String) -> Double? { m.registry.value("drowse_notifications_refused_total", [("reason", r)]) }
        #expect(rig.push(Self.silent))
        #expect(rig.push(Self.silent))
        #expect(rig.push(#"{"aps": {}, "id": "loud"}"#))
        #expect(rig.push("not json"))
        #expect(rig.push(Self.silent, topic: Topics.notify(prefix: "drowse", device: "dev", app: "ghost")))
        #expect(rig.push(#"{"aps": {"content-available": 1}, "pad": "\#(String(repeating: "x", count: 5000))"}"#))
        #expect(outcome("received") == 6)
        #expect(outcome("accepted") == 1 && outcome("duplicate") == 1 && outcome("ignored") == 1 && outcome("refused") == 3)
        #expect(refused("malformed") == 1 && refused("unknown_app") == 1 && refused("too_large") == 1)
        #expect(refused("bad_signature") == 0 && refused("unsigned") == 0 && refused("expired") == 0)
        #expect(outcome("deferred") == 0 && outcome("collapsed") == 0 && outcome("expired") == 0)
    }

    @Test("what cannot be a notification is refused and counted; the device's own status topic is ignored")
    func refusals() throws {
        let rig = try Rig()
        #expect(rig.push(String(repeating: " ", count: Notification.maxBytes + 1)))
        #expect(rig.push("not json"))
        #expect(rig.push(#"{"aps": {"content-available": 1}}"#, topic: Topics.notify(prefix: "drowse", device: "dev", app: "ghost")))
        #expect(rig.service.refusedNotifications == 3)
        #expect(rig.push("x", topic: "elsewhere/topic") && rig.service.unexpectedMessages == 1)
        #expect(rig.push("x", topic: Topics.status(prefix: "drowse", device: "dev")) && rig.service.unexpectedMessages == 1)
        #expect(rig.ran.isEmpty && rig.store.rows.isEmpty)
    }

    @Test("a notification the store cannot record is not acknowledged, and nothing runs")
    func storeFull() throws {
        let rig = try Rig()
        rig.store.broken = true
        #expect(!rig.push(Self.silent))
        #expect(rig.ran.isEmpty)
    }

    @Test("a notification whose record cannot be synced is not acknowledged (its handler has started: it runs again on redelivery)")
    func syncFails() throws {
        let rig = try Rig()
        rig.store.syncFails = true
        #expect(!rig.push(Self.silent))
        #expect(rig.ran.count == 1 && rig.store.rows.count == 1)
        rig.store.syncFails = false
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "n2"}"#))
    }

    @Test("a record whose commit fails after it was admitted runs nothing, and the machine forgets it: its number, given again, runs once")
    func commitFails() throws {
        let rig = try Rig(maxPerHour: 1)
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "a"}"#))
        // Past the budget: admitted as deferred, then the commit fails.
        rig.store.failsAtCommit = true
        #expect(!rig.push(#"{"aps": {"content-available": 1}, "id": "b"}"#))
        #expect(rig.store.rows.count == 1)
        #expect(rig.service.admission.deferredCount == 0, "the failed record's deferral was forgotten")
        rig.store.failsAtCommit = false
        // The next record gets the rolled-back number (2), deferred too.
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "c"}"#))
        #expect(rig.store.rows.map(\.seq) == [1, 2])
        #expect(rig.service.admission.deferredCount == 1)
        rig.now = try #require(rig.timer)
        rig.service.deferredTimerFired()
        #expect(rig.ran.map(\.seq) == [1, 2])
    }

    @Test("a fresh notification's budget use is written with its record, before its handler is queued")
    func chargedWithRecord() throws {
        let rig = try Rig()
        #expect(rig.push(Self.silent))
        #expect(rig.ran.map(\.seq) == [1])
        #expect(rig.store.budget[1] != nil, "the charge came back from the record's transaction")
    }

    @Test("a handler that starts as its notification arrives has its start counted in the record's commit; one that waits for a slot, at its start")
    func startCountedWithRecord() throws {
        let rig = try Rig(maxPerHour: 3)
        func counted() -> [Int64: Int?] {
            Dictionary(uniqueKeysWithValues: rig.runs.runs.compactMap { if case let .notification(_, seq, _, c) = $0 { (seq, c) } else { nil } })
        }
        rig.runs.startsAtOnce = true
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "a"}"#))
        #expect(rig.store.startsCounted == [1] && counted()[1] == .some(1))
        // A redelivery (MQTT's DUP): an earlier start may have happened, so this one is the second.
        rig.service.settle(rig.service.receive(topic: rig.topic, payload: Array(#"{"aps": {"content-available": 1}, "id": "b"}"#.utf8),
                                               redelivered: true)) { _ in }
        #expect(rig.store.startsCounted == [1, 2] && counted()[2] == .some(2))
        // No free slot: it waits in the queue, and the runner counts its start when it comes.
        rig.runs.startsAtOnce = false
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "c"}"#))
        #expect(rig.store.startsCounted == [1, 2] && counted()[3] == .some(nil))
        // Past the budget it is deferred: nothing starts, nothing is counted.
        rig.runs.startsAtOnce = true
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "d"}"#))
        #expect(rig.store.startsCounted == [1, 2] && counted()[4] == nil && rig.store.rows[3].state == .deferred)
    }

    @Test("a held notification released after a reload has its start counted on its own, before it starts: no PUBACK's sync covers its record")
    func releasedHeldCountedAtStart() throws {
        try withTempDirSync { dir in
            let store = MemoryNotificationStore()
            let rig = try Rig(store: store)
            let registry = AppRegistry(directory: dir, logger: Logger(label: "test"))
            try put("id = \"news\"\n[notification\n", at: dir + "/news.toml")  // cut short: invalid
            registry.load()
            let service = NotificationService(admission: NotificationAdmission(budget: NotificationBudget(maxPerHour: 12), deviceID: "dev"),
                                              store: store, clock: rig.clock, registry: registry, runs: rig.runs, downloads: NoDownloads(),
                                              windows: NoWindows(), events: DaemonEvents(), topicPrefix: "drowse", deviceID: "dev",
                                              heldStore: try Store(path: dir + "/state.db"), logger: Logger(label: "test"))
            rig.runs.startsAtOnce = true
            #expect(service.receive(topic: rig.topic, payload: Array(Self.silent.utf8)) == .acknowledgeWhenSynced)
            #expect(rig.runs.runs.isEmpty, "held, not run")
            try put("id = \"news\"\n[notification]\ncommand = [\"/bin/true\"]\n", at: dir + "/news.toml")
            registry.load()
            service.releaseHeld()
            let queued = rig.runs.runs.compactMap { if case let .notification(_, seq, _, c) = $0 { (seq, c) } else { nil } }
            #expect(queued.count == 1 && queued.first?.1 == nil, "the runner counts its start, on disk: \(queued)")
            #expect(store.startsCounted.isEmpty)
        }
    }

    @Test("past the hourly budget a notification waits, and runs when the hour has room again")
    func budget() throws {
        let rig = try Rig(maxPerHour: 1)
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "a"}"#))
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "b"}"#))
        #expect(rig.ran.count == 1)
        #expect(rig.store.rows[1].state == .deferred)
        let at = try #require(rig.timer)
        #expect(at > rig.now && at <= rig.now + 3600 + 1)
        rig.now = at
        rig.service.deferredTimerFired()
        #expect(rig.ran.map(\.seq) == [1, 2])
    }

    @Test("an app's budget uses are read from the store once, then kept: each charge counts, and an hour later they have left")
    func budgetKept() throws {
        let rig = try Rig(maxPerHour: 3)
        for id in ["a", "b", "c", "d", "e"] {
            #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "\#(id)"}"#))
            rig.now += 1
        }
        #expect(rig.ran.map(\.seq) == [1, 2, 3], "the kept uses count each charge: the 4th and 5th wait")
        #expect(rig.store.budgetReads == 1, "not read back for each notification")
        // An hour after the first use, that one has left: room for one.
        rig.now = try #require(rig.timer)
        rig.service.deferredTimerFired()
        #expect(rig.ran.map(\.seq) == [1, 2, 3, 4])
        rig.now = try #require(rig.timer)
        rig.service.deferredTimerFired()
        #expect(rig.ran.map(\.seq) == [1, 2, 3, 4, 5])
        rig.now += 3600
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "f"}"#))
        #expect(rig.ran.map(\.seq) == [1, 2, 3, 4, 5, 6])
    }

    @Test("what another connection commits to state.db has the budget uses read again")
    func budgetReadAgainAfterOthersWrite() throws {
        let rig = try Rig(maxPerHour: 1)
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "a"}"#))
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "b"}"#))
        #expect(rig.ran.map(\.seq) == [1], "b waits: the hour's one use is spent")
        rig.service.flushDeferred()
        #expect(rig.ran.map(\.seq) == [1])
        // An operator's sqlite3 moves the use an hour back (as the end-to-end tests do).
        rig.store.budget[1] = rig.now - 3601
        rig.store.version += 1
        rig.service.flushDeferred()
        #expect(rig.ran.map(\.seq) == [1, 2], "the window has room once the uses are read again")
    }

    // MARK: - Fleets: one notification by two routes

    @Test("the same id by the device's own topic and a group's, or by two groups, runs once", arguments: [
        #"{"aps": {"content-available": 1}, "id": "same"}"#,
        // No id: the payload is the identity, whichever topic brought it.
        #"{"aps": {"content-available": 1}, "content-id": 7}"#,
    ])
    func crossRouteDedupe(payload: String) throws {
        let rig = try Rig(groups: ["eu", "beta"])
        #expect(rig.push(payload))
        #expect(rig.push(payload, topic: Topics.groupNotify(prefix: "drowse", group: "eu", app: "news")))
        #expect(rig.push(payload, topic: Topics.groupNotify(prefix: "drowse", group: "beta", app: "news")))
        #expect(rig.ran.map(\.app) == ["news"])
        #expect(rig.store.rows.count == 1)
    }

    @Test("a group notification runs the app's handler; a group the device is not in is not its")
    func groupRoute() throws {
        let rig = try Rig(groups: ["eu"])
        #expect(rig.push(Self.silent, topic: "drowse/groups/us/apps/news/notify"))
        #expect(rig.ran.isEmpty && rig.service.unexpectedMessages == 1)
        #expect(rig.push(Self.silent, topic: "drowse/groups/eu/apps/news/notify"))
        #expect(rig.ran.map(\.app) == ["news"])
    }

    @Test("different payloads without an id by two routes are two notifications")
    func differentPayloads() throws {
        let rig = try Rig(groups: ["eu"])
        #expect(rig.push(#"{"aps": {"content-available": 1}, "n": 1}"#))
        #expect(rig.push(#"{"aps": {"content-available": 1}, "n": 2}"#, topic: "drowse/groups/eu/apps/news/notify"))
        #expect(rig.ran.count == 2)
    }

    @Test("a spread notification stays pending on one timer, runs at its delay, and after a restart at the same time")
    func spread() throws {
        let rig = try Rig()
        let t0 = rig.now
        let delay = RolloutDelay.delay(deviceID: "dev", notificationID: "r1", spread: 600)
        #expect(rig.push(#"{"aps": {"content-available": 1}, "id": "r1", "spread": 600}"#))
        #expect(rig.service.metrics.registry.value("drowse_notifications_total", [("outcome", "spread")]) == 1)
        #expect(rig.ran.isEmpty && rig.store.rows[0].state == .pending)
        let at = try #require(rig.timer)
        #expect(abs(at - (t0 + delay)) < 0.1)
        // A restart before it is due: a new service over the same store sets the same timer.
        let again = try Rig(store: rig.store)
        again.now = t0 + delay / 2
        again.service.handlePendingNotifications()
        #expect(again.ran.isEmpty)
        #expect(again.timer == at)
        again.now = at
        again.service.deferredTimerFired()
        #expect(again.ran.map(\.seq) == [1])
    }

    @Test("a spread that is not 0 to 86400 seconds is refused as malformed")
    func badSpread() throws {
        let rig = try Rig()
        #expect(rig.push(#"{"aps": {"content-available": 1}, "spread": -5}"#))
        #expect(rig.push(#"{"aps": {"content-available": 1}, "spread": 90000}"#))
        #expect(rig.service.refusedNotifications == 2 && rig.store.rows.isEmpty && rig.ran.isEmpty)
    }
}
