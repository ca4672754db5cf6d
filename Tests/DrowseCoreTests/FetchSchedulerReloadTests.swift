@testable import DrowseCore
import Testing

/// `systemctl reload drowsed`: the scheduler takes the apps as they are now without forgetting
/// what it knows of the apps that stay.
@Suite("FetchScheduler reload")
struct FetchSchedulerReloadTests {
    typealias S = FetchScheduler
    typealias T = FetchSchedulerTests

    @Test("an added app is planned, a removed one is dropped (its late end ignored), a kept one keeps its running fetch and takes its new interval")
    func appsChanged() throws {
        var (s, _) = T.started([T.app("a", every: 600, registered: 0), T.app("gone", every: 600, registered: 0)], now: 0)
        // a's and gone's fetches run.
        #expect(T.fetches(s.handle(.timerFired(now: 300))) == [.startFetch(apps: ["a", "gone"], trigger: .scheduled)])
        #expect(s.running == ["a", "gone"])

        let actions = s.handle(.appsChanged(apps: [T.app("a", every: 3600, registered: 0), T.app("b", every: 600, registered: 310)], now: 310))
        #expect(s.order == ["a", "b"])
        #expect(s.running == ["a"], "a's fetch still runs; gone's is forgotten")
        #expect(s.apps["a"]?.interval == 3600)
        // b is new: eligible at once, due by the end of its tolerance (50 % of 10 min).
        #expect(T.timers(actions) == [610])
        #expect(s.promise("b", now: 310)?.dueBy == 610)

        // gone's handler ends late: nothing is saved for it, and nothing breaks.
        let late = s.handle(T.ended("gone", .newData, 300, 320))
        #expect(!late.contains { if case .save("gone", _) = $0 { true } else { false } })
        #expect(s.apps["gone"] == nil)
        // a's ends: its record moves as before.
        let end = s.handle(T.ended("a", .newData, 300, 330))
        #expect(end.contains { if case .save("a", _) = $0 { true } else { false } })
        #expect(s.handle(.fetchRequested(app: "gone", now: 340)) == [.refuseFetch(app: "gone", reason: "no app 'gone'")])
    }

    @Test("the reload event survives the scheduler trace round trip")
    func traced() throws {
        let e = S.Event.appsChanged(apps: [T.app("a", every: 600, registered: 5)], now: 7)
        #expect(try S.Event(json: try JSON.parse(e.json.serialized)) == e)
    }
}

/// A step of the wall clock: the timeline does not move, only the time of day it is read in.
@Suite("FetchScheduler: the wall clock set")
struct FetchSchedulerClockTests {
    typealias S = FetchScheduler
    typealias T = FetchSchedulerTests

    @Test("habits keep their place on the timeline when the time of day it falls at changes; the plan does not move")
    func timeOfDay() throws {
        let day = 86400.0
        // Used at 07:00 on three days (timeline times, UTC offset 0).
        let uses = (0..<3).map { Double($0) * day + 7 * 3600 }
        var (s, _) = T.started([T.app("a", every: 3600, registered: 0, last: 3 * day, uses: uses)], now: 3 * day + 60)
        let now = 3 * day + 600
        let before = s.nextUse("a", now)
        #expect(before == 3 * day + 7 * 3600)
        let planned = s.planned
        let out = s.handle(.timeOfDayChanged(utcOffset: 3 * 365 * day + 5 * 3600, now: now))
        #expect(s.utcOffset == 3 * 365 * day + 5 * 3600)
        #expect(s.nextUse("a", now) == before)
        #expect(s.planned == planned)
        #expect(!out.contains { if case .startFetch = $0 { true } else { false } })
    }

    @Test("the event survives the scheduler trace round trip")
    func traced() throws {
        let e = S.Event.timeOfDayChanged(utcOffset: 3600, now: 7)
        #expect(try S.Event(json: try JSON.parse(e.json.serialized)) == e)
    }
}
