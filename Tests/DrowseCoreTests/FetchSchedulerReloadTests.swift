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
