import DrowseCore
import Testing

/// Plays the agent and the store around a `NotificationAdmission` on a manual clock: carries out
/// every action the way Agent+Notifications.swift does, against an in-memory table shaped like the
/// store's (a unique key per app, states, budget uses).
private struct World {
    typealias Action = NotificationAdmission.Action
    struct Row: Equatable {
        var app: String
        var key: String
        var at: Double
        var state: String
        var budgetAt: Double?
    }

    var m: NotificationAdmission
    var now: Double = 1_000_000
    var window: Double?
    var rows: [Int64: Row] = [:]
    var nextSeq: Int64 = 1
    /// Seqs whose handler was queued, in order.
    var ran: [Int64] = []
    var timer: Double?
    var prunes = 0

    init(maxPerHour: Int, deviceID: String = "", maxDeferred: Int = 64) {
        m = NotificationAdmission(budget: NotificationBudget(maxPerHour: maxPerHour), deviceID: deviceID, maxDeferred: maxDeferred)
    }

    func uses() -> [String: [Double]] {
        var out: [String: [Double]] = [:]
        for r in rows.values { if let b = r.budgetAt, b > now - 3600 { out[r.app, default: []].append(b) } }
        return out.mapValues { $0.sorted() }
    }

    func state(_ seq: Int64) -> String? { rows[seq]?.state }
    func seq(ofKey key: String) -> Int64? { rows.first { $0.value.key == key }?.key }

    @discardableResult
    mutating func receive(_ a: NotificationAdmission.Arrival, digest: String = "digest") -> [Action] {
        let actions = m.received(a, now: now, idDigest: { "sha(\($0.utf8.count))" }) { digest }
        return apply(actions)
    }

    @discardableResult
    mutating func windowOpened() -> [Action] { apply(m.windowOpened(now: now, uses: uses(), nextWindow: window)) }

    /// Moves the clock to `t`, firing the timer at its time each time it is due by then.
    @discardableResult
    mutating func advance(to t: Double) -> [Action] {
        var out: [Action] = []
        while let at = timer, at <= t {
            now = at
            timer = nil
            out += apply(m.timerFired(now: now, uses: uses(), nextWindow: window))
        }
        now = t
        return out
    }

    @discardableResult
    mutating func finish(_ seq: Int64) -> [Action] {
        rows[seq]?.state = "new-data"
        return apply(m.handlerFinished(seq: seq, now: now))
    }

    @discardableResult
    mutating func apply(_ actions: [Action]) -> [Action] {
        var all: [Action] = []
        for a in actions {
            all.append(a)
            switch a {
            case .record(let app, let key):
                var seq: Int64?
                if !rows.values.contains(where: { $0.app == app && $0.key == key }) {
                    seq = nextSeq
                    rows[nextSeq] = Row(app: app, key: key, at: now, state: "pending")
                    nextSeq += 1
                }
                all += apply(m.recorded(seq: seq, now: now, uses: uses(), nextWindow: window))
            case .refuse, .duplicate, .ignoreDownload: break
            case .expire(let seq, _): rows[seq]?.state = "expired"
            case .dropCollapsed(let seq, _, _): rows[seq]?.state = "collapsed"
            case .drop(let seq): rows[seq]?.state = "dropped"
            case .evict(let seq, _, _): rows[seq]?.state = "evicted"
            case .startDownload(let seq, _): rows[seq]?.state = "download:t-1"
            case .chargeBudget(let seq, let at):
                rows[seq]?.budgetAt = at
                rows[seq]?.state = "pending"
            case .runHandler(let seq, _): ran.append(seq)
            case .defer(let seq, _, _, _): rows[seq]?.state = "deferred"
            case .spread: break  // the record stays pending
            case .setTimer(let at): timer = at
            case .prune(let before):
                prunes += 1
                let handled = { (r: Row) in r.state != "pending" && r.state != "deferred" }
                rows = rows.filter { !(handled($0.value) && $0.value.at < before) }
                m.pruned(oldestLeft: rows.values.filter(handled).map(\.at).min())
            }
        }
        return all
    }
}

private func note(_ app: String = "news", id: String? = nil, collapse: String? = nil, expires: Double? = nil, priority: Int = 5,
                  download: Bool = false, signed: Bool = false, allowDownload: Bool = false, spread: Double? = nil) -> NotificationAdmission.Arrival {
    .init(app: app, id: id, collapseID: collapse, expiration: expires, priority: priority, download: download, signed: signed,
          allowDownload: allowDownload, spread: spread)
}

private let hour = 3600.0
private let day = 86400.0
private let slack = NotificationAdmission.timerSlack

@Suite("NotificationAdmission")
struct NotificationAdmissionTests {
    // MARK: budget and priority

    @Test("priority 5 runs at once within max_per_hour and uses the budget; beyond it, it is deferred")
    func budget() {
        var w = World(maxPerHour: 2)
        let t0 = w.now
        w.receive(note(id: "a"))
        w.now += 10
        w.receive(note(id: "b"))
        w.now += 10
        let third = w.receive(note(id: "c"))
        #expect(w.ran == [1, 2])
        #expect(w.uses()["news"] == [t0, t0 + 10])
        #expect(w.state(3) == "deferred")
        #expect(third.contains(.defer(seq: 3, app: "news", until: t0 + hour, inLastHour: 2)))
        // The timer: when the oldest use leaves the hour, a little after.
        #expect(w.timer == t0 + hour + slack)
        #expect(w.m.deferredCount == 1)
    }

    @Test("priority 10 runs at once with the budget spent, and still uses it")
    func priority10() {
        var w = World(maxPerHour: 1)
        let t0 = w.now
        w.receive(note(id: "first"))
        w.now += 5
        w.receive(note(id: "normal"))
        w.now += 5
        w.receive(note(id: "urgent", priority: 10))
        #expect(w.ran == [1, 3])
        #expect(w.state(2) == "deferred")
        #expect(w.uses()["news"] == [t0, t0 + 10])
        // Two uses against a budget of one: room again only when the urgent one leaves the hour.
        #expect(w.timer == t0 + 10 + hour + slack)
    }

    @Test("after an hour the budget has room again: the timer releases the deferred one, and no more than the budget")
    func budgetResetsAfterAnHour() {
        var w = World(maxPerHour: 1)
        let t0 = w.now
        w.receive(note(id: "a"))
        w.now += 10
        w.receive(note(id: "b"))
        w.now += 10
        w.receive(note(id: "c"))
        #expect(w.ran == [1])
        #expect(w.advance(to: t0 + hour - 1).isEmpty)
        #expect(w.ran == [1])
        let fired = w.advance(to: t0 + hour + 1)
        #expect(w.ran == [1, 2], "only one: the budget is one per hour")
        #expect(fired.contains(.chargeBudget(seq: 2, at: t0 + hour + slack)))
        #expect(w.state(3) == "deferred")
        // The next room: when b's use leaves the hour.
        #expect(w.timer == t0 + hour + slack + hour + slack)
        w.advance(to: t0 + 3 * hour)
        #expect(w.ran == [1, 2, 3])
        #expect(w.timer == nil && w.m.deferredCount == 0)
    }

    @Test("uses made outside this machine count: the budget is read from the store at each decision")
    func budgetFromTheStore() {
        var w = World(maxPerHour: 1)
        w.rows[99] = .init(app: "news", key: "id:before-restart", at: w.now - 60, state: "new-data", budgetAt: w.now - 60)
        w.nextSeq = 100
        w.receive(note(id: "a"))
        #expect(w.ran.isEmpty)
        #expect(w.state(100) == "deferred")
        #expect(w.timer == w.now - 60 + hour + slack)
    }

    // MARK: backlog (max_deferred)

    @Test("past max_deferred the oldest waiting one is evicted: the store keeps the newest, a window runs those")
    func backlogKeepsTheNewest() {
        var w = World(maxPerHour: 2, maxDeferred: 3)
        let t0 = w.now
        for i in 0..<10 { w.receive(note(id: "n\(i)")); w.now += 1 }
        #expect(w.ran == [1, 2])
        #expect(w.rows.values.filter { $0.state == "deferred" }.count == 3)
        #expect((3...7).allSatisfy { w.state(Int64($0)) == "evicted" })
        #expect(w.m.waitingCount(app: "news") == 3 && w.m.followedCount == 5)
        w.now = t0 + hour + 20
        w.windowOpened()
        w.now = t0 + 2 * hour + 40
        w.windowOpened()
        #expect(w.ran == [1, 2, 8, 9, 10])
    }

    @Test("the backlog is per app: a flood to one app evicts nothing of another")
    func backlogIsPerApp() {
        var w = World(maxPerHour: 1, maxDeferred: 2)
        w.receive(note("a", id: "a0"))
        w.receive(note("b", id: "b0"))
        w.receive(note("b", id: "b1"))
        for i in 1..<50 { w.receive(note("a", id: "a\(i)")) }
        #expect(w.m.waitingCount(app: "a") == 2 && w.m.waitingCount(app: "b") == 1)
        #expect(w.state(w.seq(ofKey: "id:b1")!) == "deferred")
        #expect(w.rows.values.filter { $0.app == "a" && $0.state == "evicted" }.count == 47)
    }

    @Test("eviction takes the lowest priority first: a priority-10 one waiting for its rollout delay stays")
    func backlogEvictsLowestPriorityFirst() {
        var w = World(maxPerHour: 1, deviceID: "dev", maxDeferred: 2)
        w.receive(note(id: "first"))
        w.receive(note(id: "urgent", priority: 10, spread: 3600))  // waits for its delay
        let urgent = w.seq(ofKey: "id:urgent")!
        #expect(w.m.phase(of: urgent) == .spreading)
        for i in 0..<5 { w.receive(note(id: "p5-\(i)")) }
        #expect(w.m.phase(of: urgent) == .spreading)
        #expect(w.state(w.seq(ofKey: "id:p5-4")!) == "deferred")
        #expect((0..<4).allSatisfy { w.state(w.seq(ofKey: "id:p5-\($0)")!) == "evicted" })
    }

    @Test("a restart with a smaller max_deferred evicts the oldest of the restored backlog")
    func backlogTrimmedOnRestore() {
        var m = NotificationAdmission(budget: NotificationBudget(maxPerHour: 1), maxDeferred: 2)
        let restored = (1...5).map {
            NotificationAdmission.Restored(seq: Int64($0), receivedAt: 100, state: .deferred, arrival: note(id: "r\($0)"))
        }
        let out = m.restored(restored, now: 200, uses: ["news": [150]], nextWindow: nil)
        let evicted = out.compactMap { if case .evict(let seq, _, 2) = $0 { seq } else { nil } }
        #expect(evicted == [1, 2, 3])
        #expect(m.waitingCount(app: "news") == 2 && m.phase(of: 4) == .deferred && m.phase(of: 5) == .deferred)
    }

    @Test("a flood's cost per message does not grow with its size: the followed set stays at max_deferred")
    func backlogBoundsTheMachine() {
        var w = World(maxPerHour: 1, maxDeferred: 4)
        var m = w.m
        _ = m.received(note(id: "x"), now: w.now, idDigest: { $0 }) { "d" }
        _ = m.recorded(seq: 1, now: w.now, uses: [:], nextWindow: nil)
        for i in 2...20_000 {
            _ = m.received(note(id: "n\(i)"), now: w.now, idDigest: { $0 }) { "d" }
            _ = m.recorded(seq: Int64(i), now: w.now, uses: ["news": [w.now]], nextWindow: nil)
        }
        #expect(m.followedCount == 5 && m.waitingCount(app: "news") == 4 && m.deferredCount == 4)
        w.m = m
    }

    // MARK: windows

    @Test("a fetch window releases deferred ones, oldest first, only as far as the budget allows")
    func windowReleasesWithinTheBudget() {
        var w = World(maxPerHour: 2)
        let t0 = w.now
        for i in 0..<7 { w.receive(note(id: "n\(i)")); w.now += 1 }
        #expect(w.ran == [1, 2])
        // A window opens just after the hour, before the timer (set to the room) fires.
        w.now = t0 + hour + 1.5
        let out = w.windowOpened()
        #expect(w.ran == [1, 2, 3, 4])
        #expect(out.filter { if case .runHandler = $0 { true } else { false } }.count == 2)
        #expect((5...7).allSatisfy { w.state(Int64($0)) == "deferred" })
        // The timer moves to the next room: when the window's own uses leave the hour.
        #expect(w.timer == t0 + 2 * hour + 1.5 + slack)
    }

    @Test("a window with no room releases nothing")
    func windowWithoutRoom() {
        var w = World(maxPerHour: 1)
        w.receive(note(id: "a"))
        w.receive(note(id: "b"))
        let timer = w.timer
        w.now += 60
        #expect(w.windowOpened().isEmpty, "no release and the timer stays as it was")
        #expect(w.ran == [1] && w.timer == timer)
    }

    @Test("the timer is set for the next fetch window when that comes before room in the budget")
    func timerAtTheNextWindow() {
        var w = World(maxPerHour: 1)
        w.window = w.now + 300
        w.receive(note(id: "a"))
        let out = w.receive(note(id: "b"))
        #expect(out.contains(.defer(seq: 2, app: "news", until: w.now + 300, inLastHour: 1)))
        #expect(w.timer == w.now + 300 + slack)
        // A window at or before now is the one opening: the timer does not chase it.
        w.now += 300
        w.window = w.now
        w.windowOpened()
        #expect(w.timer == w.now - 300 + hour + slack)
    }

    @Test("the timer is set only when it changes, and cancelled when nothing is deferred")
    func timerOnlyOnChange() {
        var w = World(maxPerHour: 1)
        w.receive(note(id: "a"))
        #expect(!w.receive(note(id: "b")).filter { if case .setTimer = $0 { true } else { false } }.isEmpty)
        #expect(w.receive(note(id: "c")).filter { if case .setTimer = $0 { true } else { false } }.isEmpty)
        w.advance(to: w.now + 3 * hour)
        #expect(w.timer == nil)
    }

    // MARK: expiry

    @Test("expired on arrival: refused, never recorded")
    func expiredOnArrival() {
        var w = World(maxPerHour: 5)
        let out = w.receive(note(id: "stale", expires: w.now - 60))
        #expect(out == [.refuse(app: "news", .expired)])
        #expect(w.rows.isEmpty && w.ran.isEmpty)
        // Not yet expired (now is not past it): runs.
        w.receive(note(id: "edge", expires: w.now))
        #expect(w.ran == [1])
    }

    @Test("expiry while deferred: dropped when released, never run; the others still run")
    func expiryWhileDeferred() {
        var w = World(maxPerHour: 1)
        let t0 = w.now
        w.receive(note(id: "first"))
        w.receive(note(id: "short-lived", expires: t0 + 60))
        w.receive(note(id: "keeper"))
        let out = w.advance(to: t0 + hour + 1)
        #expect(out.contains(.expire(seq: 2, app: "news")))
        #expect(w.state(2) == "expired")
        #expect(w.ran == [1, 3])
        #expect(w.m.deferredCount == 0)
    }

    // MARK: dedupe

    @Test("the same id is recorded once: a second copy is a duplicate and runs nothing")
    func duplicateByID() {
        var w = World(maxPerHour: 5)
        w.receive(note(id: "same"))
        let again = w.receive(note(id: "same"))
        #expect(again == [.record(app: "news", dedupeKey: "id:same"), .duplicate(app: "news", dedupeKey: "id:same")])
        #expect(w.ran == [1] && w.rows.count == 1)
        // The same id for another app is another notification.
        w.receive(note("weather", id: "same"))
        #expect(w.ran == [1, 2])
    }

    @Test("without an id the key is the digest of topic and payload, asked for only then")
    func duplicateByDigest() {
        var m = NotificationAdmission(budget: NotificationBudget(maxPerHour: 5))
        var asked = 0
        let withID = m.received(note(id: "x"), now: 1, idDigest: { $0 }) { asked += 1; return "d" }
        #expect(withID == [.record(app: "news", dedupeKey: "id:x")])
        #expect(asked == 0)
        let withoutID = m.received(note(), now: 1, idDigest: { $0 }) { asked += 1; return "abc" }
        #expect(withoutID == [.record(app: "news", dedupeKey: "hash:abc")])
        #expect(asked == 1)
        var w = World(maxPerHour: 5)
        w.receive(note(), digest: "p1")
        w.receive(note(), digest: "p1")
        w.receive(note(), digest: "p2")
        #expect(w.ran == [1, 2])
    }

    @Test("an id over maxKeyedID bytes is keyed by its digest (a 4 KB id was kept whole for a week); a short one as is")
    func longIDKeyedByDigest() {
        var m = NotificationAdmission(budget: NotificationBudget(maxPerHour: 5))
        let long = String(repeating: "i", count: 4000)
        var asked: [Int] = []
        let a = m.received(note(id: long), now: 1, idDigest: { asked.append($0.utf8.count); return "feed" }) { "payload" }
        #expect(a == [.record(app: "news", dedupeKey: "id-sha256:feed")])
        #expect(asked == [4000])
        let edge = String(repeating: "j", count: NotificationAdmission.maxKeyedID)
        let b = m.received(note(id: edge), now: 1, idDigest: { _ in Issue.record("digest of a short id"); return "" }) { "payload" }
        #expect(b == [.record(app: "news", dedupeKey: "id:" + edge)])
    }

    @Test("a recorded report without a notification on its way changes nothing")
    func strayRecorded() {
        var m = NotificationAdmission(budget: NotificationBudget(maxPerHour: 5))
        #expect(m.recorded(seq: 1, now: 1, uses: [:], nextWindow: nil).isEmpty)
        #expect(m.followedCount == 0)
    }

    // MARK: collapse

    @Test("a newer notification with the same collapse id replaces the deferred older one")
    func collapseDeferred() {
        var w = World(maxPerHour: 1)
        w.receive(note(id: "first"))
        w.receive(note(id: "c1", collapse: "score"))
        w.receive(note(id: "c2", collapse: "score"))
        let out = w.receive(note(id: "c3", collapse: "score"))
        #expect(out.contains(.dropCollapsed(seq: 3, app: "news", collapseID: "score")))
        #expect([w.state(2), w.state(3), w.state(4)] == ["collapsed", "collapsed", "deferred"])
        #expect(w.m.deferredCount == 1)
        w.advance(to: w.now + 2 * hour)
        #expect(w.ran == [1, 4])
    }

    @Test("a record whose commit fails is taken back: collapse, eviction, spread and timer undone, the machine acts as if it never came")
    func tentativeRecordTakenBack() {
        var w = World(maxPerHour: 1, maxDeferred: 4)
        w.receive(note(id: "first"))
        w.receive(note(id: "c1", collapse: "score"))
        w.receive(note(id: "s1", spread: 600))
        w.receive(note(id: "d1", priority: 1))
        w.receive(note(id: "d2"))
        #expect(w.m.deferredCount == 3 && w.m.spreadingCount == 1)
        let before = w
        var m = w.m
        // c2 collapses c1; e1 makes five waiting, past max_deferred: the lowest priority (d1) goes.
        for (arrival, expected) in [(note(id: "c2", collapse: "score"), NotificationAdmission.Action.dropCollapsed(seq: 2, app: "news", collapseID: "score")),
                                    (note(id: "e1"), .evict(seq: 4, app: "news", maxDeferred: 4))] {
            _ = m.received(arrival, now: w.now, idDigest: { $0 }) { "x" }
            let (actions, checkpoint) = m.recordedTentatively(seq: w.nextSeq, now: w.now, uses: w.uses(), nextWindow: nil)
            #expect(actions.contains(expected))
            m.takeBack(checkpoint)
            #expect(m.deferredCount == before.m.deferredCount && m.spreadingCount == before.m.spreadingCount)
            #expect(m.followedCount == before.m.followedCount && m.timerAt == before.m.timerAt)
            #expect((1...5).map { m.phase(of: $0) } == (1...5).map { before.m.phase(of: $0) })
            #expect(m.waitingCount(app: "news") == before.m.waitingCount(app: "news"))
        }
        // From here both machines see the same events and must do the same.
        w.m = m
        var twin = before
        for step in [{ (x: inout World) in x.receive(note(id: "c3", collapse: "score")) },
                     { (x: inout World) in x.advance(to: x.now + 2 * hour) },
                     { (x: inout World) in x.windowOpened() }] {
            #expect(step(&w) == step(&twin))
        }
        #expect(w.ran == twin.ran && w.rows == twin.rows)
    }

    @Test("collapse ids are per app, and one without a collapse id collapses nothing")
    func collapsePerApp() {
        var w = World(maxPerHour: 1)
        w.receive(note("a", id: "x"))
        w.receive(note("b", id: "x"))
        w.receive(note("a", id: "a1", collapse: "k"))
        w.receive(note("b", id: "b1", collapse: "k"))
        w.receive(note("a", id: "a2"))
        #expect(w.rows.values.filter { $0.state == "collapsed" }.isEmpty)
        #expect(w.m.deferredCount == 3)
    }

    @Test("one admitted and still waiting for a handler slot is collapsed too; once its run ended, nothing is")
    func collapseAdmitted() {
        var w = World(maxPerHour: 10)
        w.receive(note(id: "c1", collapse: "k"))
        #expect(w.ran == [1])
        let out = w.receive(note(id: "c2", collapse: "k"))
        // c1 never started (the agent's queue skips a record that is no longer pending).
        #expect(out.contains(.dropCollapsed(seq: 1, app: "news", collapseID: "k")))
        #expect(w.state(1) == "collapsed")
        // Its slot reports it anyway: nothing changes.
        #expect(w.finish(1).isEmpty)
        w.finish(2)
        let third = w.receive(note(id: "c3", collapse: "k"))
        #expect(!third.contains { if case .dropCollapsed = $0 { true } else { false } })
        #expect(w.ran == [1, 2, 3])
    }

    @Test("a duplicate of a collapsed notification is refused: it stays collapsed and does not come back")
    func duplicateOfCollapsed() {
        var w = World(maxPerHour: 1)
        w.receive(note(id: "first"))
        w.receive(note(id: "c1", collapse: "k"))
        w.receive(note(id: "c2", collapse: "k"))
        #expect(w.state(2) == "collapsed")
        let again = w.receive(note(id: "c1", collapse: "k"))
        #expect(again.last == .duplicate(app: "news", dedupeKey: "id:c1"))
        #expect(w.state(2) == "collapsed" && w.state(3) == "deferred")
        #expect(w.m.deferredCount == 1)
        w.advance(to: w.now + 2 * hour)
        #expect(w.ran == [1, 3])
    }

    // MARK: downloads

    @Test("a signed download to an app that allows it starts the download instead, using no budget")
    func download() {
        var w = World(maxPerHour: 1)
        w.receive(note(id: "first"))
        let out = w.receive(note(id: "dl", download: true, signed: true, allowDownload: true))
        #expect(out.contains(.startDownload(seq: 2, app: "news")))
        #expect(w.ran == [1] && w.uses()["news"]?.count == 1)
        #expect(w.m.deferredCount == 0)
    }

    @Test("a download that may not be made is ignored, and the notification runs like any other", arguments: [
        (false, true, NotificationAdmission.DownloadRefusal.notAllowed), (true, false, .unsigned),
    ])
    func downloadIgnored(allow: Bool, signed: Bool, why: NotificationAdmission.DownloadRefusal) {
        var w = World(maxPerHour: 1)
        let out = w.receive(note(id: "dl", download: true, signed: signed, allowDownload: allow))
        #expect(out.contains(.ignoreDownload(seq: 1, app: "news", why)))
        #expect(w.ran == [1])
    }

    // MARK: restart

    @Test("after a restart: admitted ones run without a second charge, pending ones are decided, deferred ones wait, unusable ones drop")
    func restored() {
        var m = NotificationAdmission(budget: NotificationBudget(maxPerHour: 1))
        let t = 10_000.0
        let out = m.restored([
            .init(seq: 1, receivedAt: t - 100, state: .pending(budgetAt: t - 90), arrival: note(id: "admitted")),
            .init(seq: 2, receivedAt: t - 80, state: .deferred, arrival: note(id: "deferred")),
            .init(seq: 3, receivedAt: t - 70, state: .pending(budgetAt: nil), arrival: note(id: "undecided")),
            .init(seq: 4, receivedAt: t - 60, state: .pending(budgetAt: nil), arrival: nil),
            .init(seq: 5, receivedAt: t - 50, state: .pending(budgetAt: nil), arrival: note(id: "stale", expires: t - 1)),
            .init(seq: 6, receivedAt: t - 40, state: .pending(budgetAt: nil), arrival: note("other", id: "urgent", priority: 10)),
        ], now: t, uses: ["news": [t - 90]], nextWindow: nil)
        #expect(out == [
            .runHandler(seq: 1, app: "news"),
            .defer(seq: 3, app: "news", until: t - 90 + hour, inLastHour: 1),
            .drop(seq: 4),
            .expire(seq: 5, app: "news"),
            .chargeBudget(seq: 6, at: t), .runHandler(seq: 6, app: "other"),
            .prune(before: t - 7 * day),
            .setTimer(at: t - 90 + hour + slack),
        ])
        #expect(m.phase(of: 1) == .admitted && m.phase(of: 2) == .deferred && m.phase(of: 3) == .deferred)
        #expect(m.deferredCount == 2)
    }

    @Test("after a restart the newest of a collapse id wins over older ones recorded before it")
    func restoredCollapse() {
        var m = NotificationAdmission(budget: NotificationBudget(maxPerHour: 5))
        let out = m.restored([
            .init(seq: 1, receivedAt: 1, state: .deferred, arrival: note(id: "a", collapse: "k")),
            .init(seq: 2, receivedAt: 2, state: .pending(budgetAt: nil), arrival: note(id: "b", collapse: "k")),
        ], now: 100, uses: [:], nextWindow: nil)
        #expect(out.prefix(3) == [.dropCollapsed(seq: 1, app: "news", collapseID: "k"), .chargeBudget(seq: 2, at: 100),
                                  .runHandler(seq: 2, app: "news")])
        #expect(m.deferredCount == 0)
    }

    // MARK: pruning

    @Test("dedupe records are pruned as they age, not only at start-up; inside the window duplicates are still refused")
    func pruneAsTheyAge() {
        var w = World(maxPerHour: 100)
        let t0 = w.now
        w.apply(w.m.restored([], now: t0, uses: [:], nextWindow: nil))
        #expect(w.prunes == 1)
        w.receive(note(id: "old"))
        w.finish(1)
        // Six days on: still a duplicate, nothing pruned.
        w.now = t0 + 6 * day
        #expect(w.receive(note(id: "old")).last == .duplicate(app: "news", dedupeKey: "id:old"))
        #expect(w.prunes == 1)
        // Just inside seven days: still refused.
        w.now = t0 + 7 * day - 1
        #expect(w.receive(note(id: "old")).last == .duplicate(app: "news", dedupeKey: "id:old"))
        // Past seven days: the next arrival prunes first, so the old key may be used again.
        w.now = t0 + 7 * day + 1
        let out = w.receive(note(id: "old"))
        #expect(out.first == .prune(before: w.now - 7 * day))
        #expect(w.prunes == 2)
        #expect(w.ran == [1, 2])
        #expect(w.rows.keys.sorted() == [2])
    }

    @Test("a record not yet handled is never pruned, and pruning waits for the oldest handled one to age")
    func pruneOnlyHandled() {
        var w = World(maxPerHour: 1)
        let t0 = w.now
        w.apply(w.m.restored([], now: t0, uses: [:], nextWindow: nil))
        w.receive(note(id: "running"))  // admitted; its handler runs for ever
        w.receive(note(id: "waits"))  // deferred
        w.now = t0 + 8 * day
        w.receive(note(id: "x"))
        #expect(w.prunes == 1, "nothing handled: nothing to prune")
        #expect(w.state(1) == "pending")
        // Its run ends now: it ages from its receipt, so the next arrival (an hour on) prunes it.
        w.finish(1)
        w.now += hour
        w.receive(note(id: "y"))
        #expect(w.prunes == 2)
        #expect(w.rows[1] == nil)
    }

    @Test("however busy, at most one prune an hour")
    func pruneAtMostHourly() {
        var w = World(maxPerHour: 10_000)
        let t0 = w.now
        w.apply(w.m.restored([], now: t0, uses: [:], nextWindow: nil))
        // One a minute for a day, each handled at once.
        for i in 0..<1440 {
            w.now = t0 + Double(i) * 60
            w.receive(note(id: "n\(i)"))
            w.finish(w.seq(ofKey: "id:n\(i)")!)
        }
        let before = w.prunes
        // A week later they age one a minute; arrivals every minute for two hours prune twice or three times.
        for i in 0..<120 {
            w.now = t0 + 7 * day + Double(i) * 60 + 30
            w.receive(note(id: "late\(i)"))
        }
        #expect((2...3).contains(w.prunes - before))
        #expect(w.rows.values.allSatisfy { $0.at >= w.now - 7 * day - hour })
    }
}

// MARK: staged rollouts (spread)

@Suite("NotificationAdmission spread")
struct NotificationAdmissionSpreadTests {
    @Test("a spread notification waits its device's delay on one timer, then runs (and only then uses the budget)")
    func waitsThenRuns() {
        var w = World(maxPerHour: 5, deviceID: "pi-1")
        let t0 = w.now
        let delay = RolloutDelay.delay(deviceID: "pi-1", notificationID: "r1", spread: 600)
        #expect(delay > 0 && delay < 600)
        let out = w.receive(note(id: "r1", spread: 600))
        #expect(out.contains(.spread(seq: 1, app: "news", until: t0 + delay, delay: delay, spread: 600)))
        #expect(w.timer == t0 + delay + slack)
        #expect(w.ran.isEmpty && w.state(1) == "pending" && w.uses().isEmpty)
        #expect(w.m.phase(of: 1) == .spreading && w.m.spreadingCount == 1)
        w.advance(to: t0 + delay - 0.001)
        #expect(w.ran.isEmpty)
        w.advance(to: t0 + delay + 1)
        #expect(w.ran == [1])
        #expect(w.uses()["news"] == [t0 + delay + slack])
        #expect(w.timer == nil && w.m.spreadingCount == 0)
    }

    @Test("spread 0 and no spread act at once")
    func zero() {
        var w = World(maxPerHour: 5, deviceID: "pi-1")
        w.receive(note(id: "a", spread: 0))
        w.receive(note(id: "b"))
        #expect(w.ran == [1, 2])
    }

    @Test("a fetch window that opens during the delay releases it there")
    func ridesWindow() {
        var w = World(maxPerHour: 5, deviceID: "pi-1")
        w.receive(note(id: "r1", spread: 3600))
        let due = w.m.timerAt!
        w.now += 1
        #expect(due > w.now)
        w.windowOpened()
        #expect(w.ran == [1])
        #expect(w.timer == nil)
    }

    @Test("one that expires during its delay never runs, and is dropped at its expiry")
    func expires() {
        var w = World(maxPerHour: 5, deviceID: "pi-1")
        let t0 = w.now
        // Find an id whose delay is past the expiry.
        let id = (0..<100).map { "x\($0)" }.first { RolloutDelay.delay(deviceID: "pi-1", notificationID: $0, spread: 100) > 50 }!
        w.receive(note(id: id, expires: t0 + 20, spread: 100))
        #expect(w.timer == t0 + 20 + slack)
        w.advance(to: t0 + 200)
        #expect(w.ran.isEmpty)
        #expect(w.state(1) == "expired")
    }

    @Test("a signed push to transfer with a spread starts its download after the delay")
    func download() {
        var w = World(maxPerHour: 5, deviceID: "pi-1")
        let t0 = w.now
        let delay = RolloutDelay.delay(deviceID: "pi-1", notificationID: "d1", spread: 60)
        let out = w.receive(note(id: "d1", download: true, signed: true, allowDownload: true, spread: 60))
        #expect(!out.contains(.startDownload(seq: 1, app: "news")))
        let later = w.advance(to: t0 + 61)
        #expect(later.contains(.startDownload(seq: 1, app: "news")))
        #expect(w.state(1) == "download:t-1")
        #expect(w.timer == nil)
        _ = delay
    }

    @Test("after a restart the same delay is drawn from the time it was received: due ones run, others wait for the rest")
    func restart() {
        let t0 = 50_000.0
        let delay = RolloutDelay.delay(deviceID: "pi-1", notificationID: "r1", spread: 1000)
        var m = NotificationAdmission(budget: NotificationBudget(maxPerHour: 5), deviceID: "pi-1")
        let before = m.restored([.init(seq: 1, receivedAt: t0, state: .pending(budgetAt: nil), arrival: note(id: "r1", spread: 1000))],
                                now: t0 + delay / 2, uses: [:], nextWindow: nil)
        #expect(before.contains(.spread(seq: 1, app: "news", until: t0 + delay, delay: delay, spread: 1000)))
        #expect(before.contains(.setTimer(at: t0 + delay + slack)))
        var m2 = NotificationAdmission(budget: NotificationBudget(maxPerHour: 5), deviceID: "pi-1")
        let after = m2.restored([.init(seq: 1, receivedAt: t0, state: .pending(budgetAt: nil), arrival: note(id: "r1", spread: 1000))],
                                now: t0 + delay + 1, uses: [:], nextWindow: nil)
        #expect(after.contains(.runHandler(seq: 1, app: "news")))
        // Without an id, the dedupe key it was recorded under draws the delay.
        var m3 = NotificationAdmission(budget: NotificationBudget(maxPerHour: 5), deviceID: "pi-1")
        let keyed = RolloutDelay.delay(deviceID: "pi-1", notificationID: "hash:abc", spread: 1000)
        let out = m3.restored([.init(seq: 7, receivedAt: t0, state: .pending(budgetAt: nil), arrival: note(spread: 1000), dedupeKey: "hash:abc")],
                              now: t0, uses: [:], nextWindow: nil)
        #expect(out.contains(.spread(seq: 7, app: "news", until: t0 + keyed, delay: keyed, spread: 1000)))
        // The clock went back since it was received (a board without an RTC): the delay counts
        // from now, not from a time months ahead.
        var m4 = NotificationAdmission(budget: NotificationBudget(maxPerHour: 5), deviceID: "pi-1")
        let back = m4.restored([.init(seq: 1, receivedAt: t0 + 1e7, state: .pending(budgetAt: nil), arrival: note(id: "r1", spread: 1000))],
                               now: t0, uses: [:], nextWindow: nil)
        #expect(back.contains(.setTimer(at: t0 + delay + slack)))
    }

    @Test("a newer notification with the same collapse id replaces one waiting for its delay")
    func collapse() {
        var w = World(maxPerHour: 5, deviceID: "pi-1")
        w.receive(note(id: "a", collapse: "k", spread: 3600))
        w.receive(note(id: "b", collapse: "k"))
        #expect(w.state(1) == "collapsed")
        #expect(w.ran == [2])
        #expect(w.m.spreadingCount == 0 && w.timer == nil)
    }
}

@Suite("NotificationAdmission: a step of the wall clock")
struct NotificationClockStepTests {
    /// An id whose rollout delay on device pi-1 is over 50 s of a 100 s spread.
    static let slowID = (0..<100).map { "x\($0)" }.first { RolloutDelay.delay(deviceID: "pi-1", notificationID: $0, spread: 100) > 50 }!

    @Test("set forward past a publisher's expiration: the waiting notification expires at once, not at the old time")
    func forwardPastExpiry() {
        var w = World(maxPerHour: 5, deviceID: "pi-1")
        let t0 = w.now
        // Expires 30 s after receipt by the publisher's clock; its delay is longer.
        w.receive(note(id: Self.slowID, expires: t0 + 30, spread: 100))
        #expect(w.timer == t0 + 30 + slack)
        w.advance(to: t0 + 5)
        // A time sync sets the wall clock 1 h forward: the expiration (a wall time) is now 25 s
        // behind on the timeline. Before this event existed it would have waited for t0 + 30.
        w.apply(w.m.wallClockStepped(by: 3600, now: w.now, uses: w.uses(), nextWindow: nil))
        #expect(w.timer == t0 + 5 + slack)
        w.advance(to: t0 + 6)
        #expect(w.state(1) == "expired")
        #expect(w.ran.isEmpty)
    }

    @Test("set back: the expiration moves later on the timeline and the rollout delay is unchanged")
    func back() {
        var w = World(maxPerHour: 5, deviceID: "pi-1")
        let t0 = w.now
        let delay = RolloutDelay.delay(deviceID: "pi-1", notificationID: Self.slowID, spread: 100)
        w.receive(note(id: Self.slowID, expires: t0 + 30, spread: 100))
        w.apply(w.m.wallClockStepped(by: -3600, now: w.now, uses: w.uses(), nextWindow: nil))
        // Its delay, received at t0, is now the sooner of the two: it runs then, not an hour later.
        #expect(w.timer == t0 + delay + slack)
        w.advance(to: t0 + delay + 1)
        #expect(w.ran == [1])
    }

    @Test("a step moves nothing the timeline owns: a deferred notification's budget room stays where it was")
    func budgetUnmoved() {
        var w = World(maxPerHour: 1)
        let t0 = w.now
        w.receive(note(id: "a"))
        w.receive(note(id: "b"))  // over budget: deferred until the hour has room
        #expect(w.state(2) == "deferred")
        let timer = w.timer
        #expect(timer != nil)
        let out = w.apply(w.m.wallClockStepped(by: 86400 * 365 * 3, now: w.now, uses: w.uses(), nextWindow: nil))
        #expect(!out.contains { if case .runHandler = $0 { true } else { false } })
        #expect(w.timer == timer)
        w.advance(to: t0 + 3601)
        #expect(w.ran == [1, 2])
    }
}
