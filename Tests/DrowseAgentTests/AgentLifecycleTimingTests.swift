@testable import DrowseAgent
import DrowseCore
import Testing

/// The lifecycle's time rules that the end-to-end suite used to show by sleeping beside a real
/// drowsed (Tests/EndToEnd/test_lifecycle.py, test_python_kit.py, test_drowsekit.py): that
/// something does NOT happen within a time policy. Checked on the lifecycle service with a manual
/// clock (`LifecycleServiceTests.Rig`): the clock is moved far past each rule's time and only the
/// service's own wake acts. The e2e tests keep what needs real processes (frozen cgroups, a thawed
/// activated app, a task the app ends itself).
@Suite("Lifecycle timing on a manual clock")
@DaemonActor struct AgentLifecycleTimingTests {
    typealias Rig = LifecycleServiceTests.Rig
    typealias Sink = LifecycleServiceTests.Sink

    func state(_ rig: Rig) -> String {
        guard let s = rig.service.state(of: "res") else { return "?" }
        return "\(s.state.rawValue) (\(s.reason))"
    }

    @Test("an activated app stays active on the service's wakes long past the grace; deactivated, it is suspended after the grace")
    func activatedIsNeverSuspended() async throws {
        let rig = try Rig(suspendAfter: 1)
        let sink = Sink()
        rig.drive { $0.openStream("res", sink: sink) }
        await rig.advance(by: 1.5)
        #expect(state(rig) == "suspended (idle)")
        #expect(rig.drive { $0.activate("res", true) })
        #expect(state(rig) == "active (activated)")
        for _ in 0..<20 { await rig.advance(by: 30) }  // ten minutes, 600 graces
        #expect(state(rig) == "active (activated)")
        _ = rig.drive { $0.activate("res", false) }
        await rig.advance(by: 0.5)
        #expect(state(rig) != "suspended (idle)", "suspended before the grace")
        await rig.advance(by: 0.6)
        #expect(state(rig) == "suspended (idle)")
    }

    @Test("an always-active app is never suspended, with or without a stream, however long")
    func alwaysActiveIsNeverSuspended() async throws {
        let rig = try Rig(suspendAfter: 1, alwaysActive: true)
        #expect(state(rig) == "active (always active)")
        await rig.advance(by: 5)
        rig.drive { $0.openStream("res", sink: Sink()) }
        for _ in 0..<20 { await rig.advance(by: 30) }
        #expect(state(rig) == "active (always active)")
    }

    @Test("a task the app ends after its warning: when the allowance would have run out it is not expired, no overrun; the app rests")
    func aTaskEndedInTimeIsNotAnOverrun() async throws {
        let rig = try Rig(allowance: 4, suspendAfter: 1, warning: 2)
        let sink = Sink()
        rig.drive { $0.openStream("res", sink: sink) }
        let task = try rig.drive { try $0.beginTask("res", name: "work") }
        #expect(state(rig) == "background (task)")
        await rig.advance(by: 2.1)
        let warned = sink.events.filter { $0["event"]?.stringValue == "task-expiring" }
        #expect(warned.count == 1 && warned.first?["task"]?.stringValue == task.id, "warned at 4 - 2 s")
        #expect(try rig.drive { try $0.endTask("res", id: task.id) }.status == .ended)
        await rig.advance(by: 1.1)
        #expect(state(rig) == "suspended (idle)", "rests after the grace")
        // Far past the allowance's end (4 s after it began): nothing more happens.
        for _ in 0..<10 { await rig.advance(by: 1) }
        #expect(try rig.service.task("res", id: task.id).status == .ended, "an ended task expired (an overrun)")
        #expect(state(rig) == "suspended (idle)")
        #expect(sink.events.filter { $0["event"]?.stringValue == "task-expiring" }.count == 1, "warned again")
        // It rested: a fresh allowance.
        #expect(try rig.drive { try $0.beginTask("res", name: nil) }.status == .open)
    }

    @Test("the machine under the service: a task ended in time gives no overrun action, however late its timer fires")
    func aTaskEndedInTimeGivesNoOverrunAction() throws {
        var settings = AppLifecycle.Settings()
        settings.taskAllowance = 4
        settings.taskExpiryWarning = 2
        settings.suspendAfter = 1
        var m = AppLifecycle(settings: settings)
        _ = m.configured([AppLifecycle.Spec(id: "r", resident: true)], now: 0)
        _ = m.processStarted("r", now: 0)
        _ = m.streamOpened("r", now: 0)
        let (task, _) = try m.beginTask("r", name: nil, now: 0).get()
        var actions = m.timerFired(now: 2)
        _ = try m.endTask("r", id: task.id, now: 2.5).get()
        for now in stride(from: 3.0, through: 20, by: 0.5) { actions += m.timerFired(now: now) }
        #expect(!actions.contains(.overran(app: "r")), "an overrun for a task the app ended")
        #expect(actions.contains(.freeze(app: "r")), "it rests")
    }
}
