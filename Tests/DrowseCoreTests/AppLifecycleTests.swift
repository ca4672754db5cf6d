import DrowseCore
import Testing

/// The lifecycle machine on a manual clock: states, freezing, restarts, event deadlines, tasks and
/// memory pressure.
@Suite struct AppLifecycleTests {
    static let t0 = 1_000_000.0

    func machine(_ specs: [AppLifecycle.Spec] = [AppLifecycle.Spec(id: "r", resident: true)]) -> (AppLifecycle, [AppLifecycle.Action]) {
        var m = AppLifecycle()
        let a = m.configured(specs, now: Self.t0)
        return (m, a)
    }

    func state(_ m: AppLifecycle, _ app: String = "r") -> String {
        guard let s = m.state(of: app) else { return "?" }
        return "\(s.state.rawValue) (\(s.reason))"
    }

    @Test func residentIsStartedThenSuspendedAfterTheGrace() {
        var (m, a) = machine()
        #expect(a.contains(.startProcess(app: "r")))
        _ = m.processStarted("r", now: Self.t0 + 0.1)
        // Launching: not frozen before it has opened its stream.
        #expect(state(m) == "background (launching)")
        #expect(!m.timerFired(now: Self.t0 + 25).contains(.freeze(app: "r")))
        _ = m.streamOpened("r", now: Self.t0 + 0.1)
        #expect(state(m) == "background (idle)")
        var b = m.timerFired(now: Self.t0 + 5)
        #expect(!b.contains(.freeze(app: "r")))
        b = m.timerFired(now: Self.t0 + 10.1)
        #expect(b.contains(.freeze(app: "r")))
        #expect(state(m) == "suspended (idle)")
        #expect(m.isFrozen("r"))
    }

    @Test func anEventThawsBeforeItIsSentAndItsCompletionEndsIt() {
        var (m, _) = machine()
        _ = m.processStarted("r", now: Self.t0)
        _ = m.streamOpened("r", now: Self.t0)
        _ = m.timerFired(now: Self.t0 + 10)
        #expect(m.isFrozen("r"))
        let (id, actions) = m.deliver("r", kind: .fetch, now: Self.t0 + 20)
        guard let thaw = actions.firstIndex(of: .thaw(app: "r")),
              let send = actions.firstIndex(where: { if case .send(_, let e) = $0 { return e.id == id }; return false })
        else { Issue.record("no thaw or send: \(actions)"); return }
        #expect(thaw < send)
        #expect(state(m) == "background (event)")
        let done = m.completed("r", id: id, result: .newData, now: Self.t0 + 21)
        #expect(done?.first == .eventEnded(app: "r", id: id, result: .newData, timedOut: false))
        #expect(state(m) == "background (idle)")
        #expect(m.completed("r", id: id, result: .newData, now: Self.t0 + 22) == nil)
        let again = m.timerFired(now: Self.t0 + 31)
        #expect(again.contains(.freeze(app: "r")))
    }

    @Test func anEventNotCompletedByItsDeadlineFails() {
        var (m, _) = machine()
        _ = m.processStarted("r", now: Self.t0)
        _ = m.streamOpened("r", now: Self.t0)
        let (id, _) = m.deliver("r", kind: .notification, now: Self.t0 + 1)
        let a = m.timerFired(now: Self.t0 + 31)
        #expect(a.contains(.eventEnded(app: "r", id: id, result: .failed, timedOut: true)))
    }

    @Test func eventsWaitForTheStreamAndAreSentWhenItOpens() {
        var (m, _) = machine()
        let (id, a) = m.deliver("r", kind: .fetch, now: Self.t0)
        #expect(!a.contains { if case .send = $0 { return true }; return false })
        _ = m.processStarted("r", now: Self.t0 + 1)
        #expect(state(m) == "background (event)")  // the process is up and has an event waiting: not frozen
        let b = m.streamOpened("r", now: Self.t0 + 2)
        #expect(b.contains { if case .send(_, let e) = $0 { return e.id == id && e.deadline == Self.t0 + 32 }; return false })
    }

    @Test func aCrashedResidentRestartsWithACappedBackoff() {
        var (m, _) = machine()
        var now = Self.t0
        _ = m.processStarted("r", now: now)
        var delays: [Double] = []
        for _ in 0..<12 {
            now += 1
            let a = m.processExited("r", description: "exit status 1", now: now)
            guard case .setTimer(let at?) = a.last else { Issue.record("no timer: \(a)"); return }
            delays.append(at - now)
            #expect(state(m) == "not-running (exited (exit status 1))")
            now = at
            #expect(m.timerFired(now: now).contains(.startProcess(app: "r")))
        }
        #expect(Array(delays.prefix(4)) == [1, 2, 4, 8])
        #expect(delays.max() == 300)
        // A minute of running resets the backoff.
        now += 61
        let a = m.processExited("r", description: "killed by signal 9", now: now)
        #expect(a.contains(.setTimer(at: now + 1)))
    }

    @Test func activeAppsAreNeverFrozenNorChosenUnderMemoryPressure() {
        var (m, _) = machine([AppLifecycle.Spec(id: "r", resident: true), AppLifecycle.Spec(id: "s", resident: true, alwaysActive: true)])
        _ = m.processStarted("r", now: Self.t0)
        _ = m.processStarted("s", now: Self.t0)
        _ = m.activate("r", true, now: Self.t0)
        let a = m.timerFired(now: Self.t0 + 100)
        #expect(!a.contains(.freeze(app: "r")) && !a.contains(.freeze(app: "s")))
        #expect(state(m, "r") == "active (activated)")
        #expect(state(m, "s") == "active (always active)")
        let p = m.memoryPressure(now: Self.t0 + 101)
        #expect(!p.contains { if case .killProcess = $0 { return true }; return false })
        // Deactivated: the grace, then frozen.
        _ = m.activate("r", false, now: Self.t0 + 102)
        #expect(m.timerFired(now: Self.t0 + 112).contains(.freeze(app: "r")))
    }

    @Test func memoryPressureEndsTheLeastRecentlyUsedSuspendedAppFirst() {
        var (m, _) = machine([
            AppLifecycle.Spec(id: "a", resident: true), AppLifecycle.Spec(id: "b", resident: true),
            AppLifecycle.Spec(id: "c", resident: true),
        ])
        for (id, at) in [("a", Self.t0), ("b", Self.t0 + 5), ("c", Self.t0)] {
            _ = m.processStarted(id, now: at)
            _ = m.streamOpened(id, now: at)
        }
        _ = m.timerFired(now: Self.t0 + 10)   // a and c suspended at t0+10
        _ = m.timerFired(now: Self.t0 + 15)   // b at t0+15
        _ = m.deliver("c", kind: .fetch, now: Self.t0 + 16)  // c is background now
        var p = m.memoryPressure(now: Self.t0 + 20)
        #expect(p.contains(.killProcess(app: "a")))
        _ = m.processExited("a", description: "killed by signal 9", now: Self.t0 + 20)
        #expect(state(m, "a") == "not-running (memory pressure)")
        p = m.memoryPressure(now: Self.t0 + 21)
        #expect(p.contains(.killProcess(app: "b")))
        _ = m.processExited("b", description: "killed by signal 9", now: Self.t0 + 21)
        p = m.memoryPressure(now: Self.t0 + 22)
        #expect(p.contains(.killProcess(app: "c")))  // only a background one is left
        // Not restarted on its own; an event starts it again.
        #expect(!m.timerFired(now: Self.t0 + 1000).contains(.startProcess(app: "a")))
        #expect(m.deliver("a", kind: .notification, now: Self.t0 + 1001).actions.contains(.startProcess(app: "a")))
    }

    @Test func tasksShareOneAllowanceWarnThenExpire() throws {
        var (m, _) = machine()
        _ = m.processStarted("r", now: Self.t0)
        _ = m.streamOpened("r", now: Self.t0)
        let (t1, _) = try m.beginTask("r", name: "upload", now: Self.t0 + 1).get()
        #expect(t1.expiresAt == Self.t0 + 31)
        #expect(state(m) == "background (task)")
        let (t2, _) = try m.beginTask("r", name: nil, now: Self.t0 + 11).get()
        #expect(t2.expiresAt == Self.t0 + 31)
        #expect(t2.timeRemaining(now: Self.t0 + 21) == 10)
        // No freezing while tasks are open, past the grace.
        #expect(!m.timerFired(now: Self.t0 + 25).contains(.freeze(app: "r")))
        let warn = m.timerFired(now: Self.t0 + 26)
        let warned = warn.compactMap { a -> String? in if case .send(_, let e) = a, e.kind == .taskExpiring { return e.task }; return nil }
        #expect(Set(warned) == [t1.id, t2.id])
        let end = m.timerFired(now: Self.t0 + 31)
        #expect(end.contains(.overran(app: "r")))
        #expect(end.contains(.freeze(app: "r")))  // suspended at once
        #expect(m.task(t1.id, app: "r")?.status == .expired)
        // No fresh allowance before a rest... the app was suspended: a new one is granted.
        #expect(state(m) == "suspended (idle)")
        #expect((try? m.beginTask("r", name: nil, now: Self.t0 + 32).get()) != nil)
    }

    @Test func endingAndBeginningTasksDoesNotExtendTheAllowance() throws {
        var (m, _) = machine()
        _ = m.processStarted("r", now: Self.t0)
        _ = m.streamOpened("r", now: Self.t0)
        let (t1, _) = try m.beginTask("r", name: nil, now: Self.t0 + 1).get()
        _ = m.deliver("r", kind: .fetch, now: Self.t0 + 20)  // keeps it background past the allowance
        _ = try m.endTask("r", id: t1.id, now: Self.t0 + 29).get()
        let (t2, _) = try m.beginTask("r", name: nil, now: Self.t0 + 30).get()
        #expect(t2.expiresAt == Self.t0 + 31)
        _ = m.timerFired(now: Self.t0 + 31)
        // Still busy with its event (never suspended since): refused.
        let r = m.beginTask("r", name: nil, now: Self.t0 + 31.5)
        #expect(throws: AppLifecycle.Refusal.self) { try r.get() }
    }

    @Test func aHandlerAppThatOverrunsItsTasksIsKilled() throws {
        var (m, _) = machine([AppLifecycle.Spec(id: "h", resident: false)])
        #expect(state(m, "h") == "not-running (idle)")
        _ = m.handlerStarting("h", now: Self.t0)
        #expect(state(m, "h") == "background (event)")
        _ = try m.beginTask("h", name: "script", now: Self.t0 + 1).get()
        _ = m.handlerEnded("h", now: Self.t0 + 2)
        #expect(state(m, "h") == "background (task)")
        let a = m.timerFired(now: Self.t0 + 31)
        #expect(a.contains(.killApp(app: "h")))
        #expect(a.contains(.overran(app: "h")))
        #expect(!a.contains(.freeze(app: "h")))
        #expect(state(m, "h") == "not-running (idle)")
    }

    @Test func anAdoptedProcessIsNotStartedAgainAndIsNotLeftFrozen() {
        var m = AppLifecycle()
        let a = m.configured([AppLifecycle.Spec(id: "r", resident: true)], adopted: ["r"], now: Self.t0)
        #expect(!a.contains(.startProcess(app: "r")))
        #expect(!m.isFrozen("r"))
        #expect(state(m) == "background (launching)")  // until it reconnects its stream
        _ = m.streamOpened("r", now: Self.t0 + 1)
        #expect(m.timerFired(now: Self.t0 + 11).contains(.freeze(app: "r")))
    }

    @Test func aHandlersStartSettlesAnotherAppOnlyOnceItsRuleIsDue() {
        // "h"'s handler starts and ends while resident "r" is idle: before r's suspension is due
        // nothing happens to r; once it is due (the timer not yet fired), h's start freezes it.
        var (m, _) = machine([AppLifecycle.Spec(id: "r", resident: true), AppLifecycle.Spec(id: "h", resident: false)])
        _ = m.processStarted("r", now: Self.t0)
        _ = m.streamOpened("r", now: Self.t0)
        let early = m.handlerStarting("h", now: Self.t0 + 5) + m.handlerEnded("h", now: Self.t0 + 6)
        #expect(!early.contains(.freeze(app: "r")))
        #expect(state(m) == "background (idle)")
        #expect(state(m, "h") == "not-running (idle)")
        let late = m.handlerStarting("h", now: Self.t0 + 12)
        #expect(late.contains(.freeze(app: "r")))
        #expect(state(m) == "suspended (idle)")
        #expect(state(m, "h") == "background (event)")
    }

    @Test func theTimerIsAlwaysTheEarliestDueRule() {
        // Random events; after each, no rule may be due before the timer it asked for.
        var rng = SplitMix64(seed: 7)
        var (m, _) = machine([AppLifecycle.Spec(id: "a", resident: true), AppLifecycle.Spec(id: "b", resident: false)])
        var now = Self.t0
        var timer: Double? = nil
        for _ in 0..<2000 {
            now += Double(rng.next() % 4000) / 1000
            var actions: [AppLifecycle.Action]
            if let t = timer, now >= t { timer = nil; actions = m.timerFired(now: now) } else {
                switch rng.next() % 7 {
                case 0: actions = m.processStarted("a", now: now)
                case 1: actions = m.streamOpened("a", now: now)
                case 2: actions = m.deliver("a", kind: .fetch, now: now).actions
                case 3: actions = (try? m.beginTask(rng.next() % 2 == 0 ? "a" : "b", name: nil, now: now).get().1) ?? []
                case 4: actions = m.handlerStarting("b", now: now)
                case 5: actions = m.handlerEnded("b", now: now)
                default: actions = m.processExited("a", description: "exit status 1", now: now)
                }
            }
            for case .setTimer(let at) in actions { timer = at }
            if let t = timer { #expect(t >= now - 0.0001) }
            // Frozen exactly when suspended.
            for id in ["a", "b"] { #expect(m.isFrozen(id) == (m.state(of: id)?.state == .suspended)) }
        }
    }
}

extension AppLifecycleTests {
    @Test func withoutAGraceALaunchingProcessStillGetsToConnect() {
        var settings = AppLifecycle.Settings()
        settings.suspendAfter = 0
        var m = AppLifecycle(settings: settings)
        let a = m.configured([AppLifecycle.Spec(id: "r", resident: true)], now: Self.t0)
        #expect(a.contains(.startProcess(app: "r")))
        #expect(!a.contains(.freeze(app: "r")))
        #expect(!m.processStarted("r", now: Self.t0).contains(.freeze(app: "r")))
        #expect(state(m) == "background (launching)")
        #expect(m.streamOpened("r", now: Self.t0 + 1).contains(.freeze(app: "r")))
    }
}
