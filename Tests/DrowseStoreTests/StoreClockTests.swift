import DrowseCore
@testable import DrowseStore
import Foundation
import Testing

/// `Store.alignTimeline`: the stored times moved onto the timeline of the next start.
@Suite("Store: the timeline the stored times are on")
struct StoreClockTests {
    private func withStore<T>(_ body: (Store) throws -> T) throws -> T {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("drowse-clock-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        return try body(try Store(path: dir.appendingPathComponent("state.db").path))
    }

    /// One row of each kind of time, recorded at `t` (a transfer due to retry at t + 600).
    private func fill(_ store: Store, at t: Double) throws {
        _ = try store.app("weather", now: t - 86400)
        try store.record(RunRecord(app: "weather", event: .fetch, trigger: .scheduled, result: .newData, ending: "exit status 0",
                                   startedAt: t - 10, endedAt: t),
                         fetch: FetchScheduler.Record().after(.newData, timedOut: false, start: t - 10))
        try store.recordUse(app: "weather", at: t - 5)
        var tr = Transfer(id: "t1", app: "weather", session: "s", kind: .download, url: "http://h/f", destination: "/tmp/f", sha256: nil, createdAt: t - 100)
        tr.nextRetryAt = t + 600
        tr.timeoutAt = t + 7 * 86400
        try store.save(tr)
    }

    private func times(_ store: Store) throws -> [Double] {
        let a = try store.app("weather", now: 0)
        let t = try #require(try store.transfer(id: "t1"))
        return [a.registeredAt, a.lastFetch ?? .nan, a.lastUsed ?? .nan, try store.runs(app: "weather")[0].endedAt,
                t.createdAt, t.nextRetryAt ?? .nan, t.timeoutAt ?? .nan]
    }

    @Test("a first start moves nothing and records the timeline")
    func first() throws {
        try withStore { store in
            let t = 1_800_000_000.0
            try fill(store, at: t)
            let before = try times(store)
            #expect(try store.alignTimeline(bootID: "b1", origin: 1_700_000_000, now: t + 1) == nil)
            #expect(try times(store) == before)
            #expect(try store.db.query("SELECT boot_id, origin, skew FROM clock") == [[.text("b1"), .double(1_700_000_000), .double(0)]])
        }
    }

    @Test("a restart in the same boot after the clock was set moves every time by the step exactly")
    func sameBoot() throws {
        try withStore { store in
            let t = 1_800_000_000.0
            try store.alignTimeline(bootID: "b1", origin: 1_700_000_000, now: t)
            try fill(store, at: t)
            let before = try times(store)
            // Stopped, the clock set 3 years forward, started in the same boot: origin is 3 years later.
            let step = 3 * 365 * 86400.0
            let shift = try #require(try store.alignTimeline(bootID: "b1", origin: 1_700_000_000 + step, now: t + step + 30))
            #expect(shift.seconds == step)
            #expect(try times(store) == before.map { $0 + step })
            // Nothing planned came due: the retry is still 600 s after the last run.
            let after = try times(store)
            #expect(after[5] - after[3] == 600)
        }
    }

    @Test("after a reboot, times move by the skew the last run had seen")
    func rebootWithSkew() throws {
        try withStore { store in
            let t = 1_600_000_000.0  // a clock far behind at the last boot
            try store.alignTimeline(bootID: "b1", origin: 1_599_000_000, now: t)
            try fill(store, at: t)
            let before = try times(store)
            // The time sync set the clock forward by `skew` during that run; the next boot has a right clock.
            let skew = 200_000_000.0
            try store.saveClockSkew(skew)
            let shift = try #require(try store.alignTimeline(bootID: "b2", origin: 1_799_000_000, now: t + skew + 120))
            #expect(shift.seconds == skew)
            #expect(try times(store) == before.map { $0 + skew })
        }
    }

    @Test("a clock behind the latest record (no RTC, before its sync) moves everything back so the latest record is now")
    func clockBehind() throws {
        try withStore { store in
            let t = 1_800_000_000.0
            try store.alignTimeline(bootID: "b1", origin: 1_700_000_000, now: t)
            try fill(store, at: t)
            let before = try times(store)
            // Power cut; the board boots with its clock at 2021.
            let now = 1_610_000_000.0
            let shift = try #require(try store.alignTimeline(bootID: "b2", origin: now - 20, now: now))
            #expect(shift.seconds == now - t)
            let after = try times(store)
            #expect(after == before.map { $0 + (now - t) })
            #expect(after[3] == now)             // the latest record (the run's end) is now
            #expect(after[5] == now + 600)      // the retry keeps its wait
        }
    }

    @Test("a clock a little behind, or ahead, moves nothing; a bad stored time is not the latest record")
    func tolerance() throws {
        try withStore { store in
            let t = 1_800_000_000.0
            try store.alignTimeline(bootID: "b1", origin: 1_700_000_000, now: t)
            try fill(store, at: t)
            _ = try store.db.query("UPDATE apps SET last_used = 1e300")
            #expect(try store.alignTimeline(bootID: "b2", origin: 1_799_999_000, now: t - Store.futureTolerance + 1) == nil)
            #expect(try store.alignTimeline(bootID: "b3", origin: 1_799_999_000, now: t + 86400) == nil)
        }
    }
}
