import DrowseCore
import Testing

/// Plays the supervisor around a `HandlerShutdown` on a manual clock: keeps the timer, records
/// the signals and the ending, and wakes at the timer's time.
private struct Supervisor {
    var m = HandlerShutdown(grace: 2)
    var now = 100.0
    var timer: Double?
    var signals: [(HandlerShutdown.Signal, Bool, Double)] = []
    var leftoversKilled = 0
    var ending: HandlerOutcome.Ending?

    mutating func apply(_ actions: [HandlerShutdown.Action]) {
        for a in actions {
            switch a {
            case .signal(let s, let tree): signals.append((s, tree, now))
            case .setTimer(let at): timer = at
            case .killLeftovers: leftoversKilled += 1
            case .finished(let e):
                #expect(ending == nil, "finished twice")
                ending = e
            }
        }
    }

    mutating func start(deadline: Double) { apply(m.started(now: now, deadline: deadline)) }

    /// Sleeps until `t`, waking at each timer due by then.
    mutating func sleep(until t: Double) {
        while let at = timer, at <= t, ending == nil {
            now = at
            apply(m.timerFired(now: now))
        }
        now = t
    }

    mutating func exit(status: Int32) { apply(m.exited(status: status, now: now)) }

    var sent: [HandlerShutdown.Signal] { signals.map(\.0) }
}

/// wait(2) statuses.
private func exitStatus(_ code: Int32) -> Int32 { code << 8 }
private func killedBy(_ signal: Int32) -> Int32 { signal }

@Suite("HandlerShutdown")
struct HandlerShutdownTests {
    @Test("a handler that exits before its deadline gets no signal; its group and leftovers go, its status is its ending")
    func exitBeforeDeadline() {
        var s = Supervisor()
        s.start(deadline: 130)
        #expect(s.timer == 130)
        s.sleep(until: 110)
        s.exit(status: exitStatus(3))
        #expect(s.sent == [.kill])
        #expect(s.signals.first?.1 == false, "after the exit: the process group only, then the adopted leftovers")
        #expect(s.leftoversKilled == 1)
        #expect(s.ending == .exited(3))
        #expect(!s.m.stopped)
        // Nothing more comes of a late timer.
        #expect(s.m.timerFired(now: 200).isEmpty)
    }

    @Test("a finished run's last output is collected for half a second after its end, not longer")
    func outputDrain() {
        let s = HandlerShutdown(grace: 2)
        #expect(s.outputCollectedUntil(endedAt: 100) == 100.5)
        #expect(s.outputDrain == 0.5)
    }

    @Test("killed by a signal it did not get from us: signaled")
    func signaledByOthers() {
        var s = Supervisor()
        s.start(deadline: 130)
        s.exit(status: killedBy(9))
        #expect(s.ending == .signaled(9))
    }

    @Test("deadline → SIGTERM to the whole tree → exits within the grace: timed out, no SIGKILL to the tree")
    func termThenExit() {
        var s = Supervisor()
        s.start(deadline: 130)
        s.sleep(until: 130.5)
        #expect(s.signals.count == 1)
        #expect(s.signals[0] == (.term, true, 130))
        #expect(s.timer == 132)
        s.exit(status: exitStatus(0))
        #expect(s.ending == .timedOut, "even a clean exit after SIGTERM counts as timed out")
        #expect(s.sent == [.term, .kill] && s.signals[1].1 == false)
    }

    @Test("deadline → SIGTERM → ignored → SIGKILL to the whole tree after the grace, then it is reaped")
    func termIgnoredThenKill() {
        var s = Supervisor()
        s.start(deadline: 130)
        s.sleep(until: 131.9)
        #expect(s.sent == [.term])
        s.sleep(until: 132.05)
        #expect(s.signals.count == 2)
        #expect(s.signals[1] == (.kill, true, 132))
        // The kill is in; the exit may take a moment (D state): looked at again every 0.1 s, no more signals.
        s.sleep(until: 132.35)
        #expect(s.sent == [.term, .kill])
        #expect(abs((s.timer ?? 0) - 132.4) < 1e-9)
        s.exit(status: killedBy(9))
        #expect(s.ending == .timedOut)
        #expect(s.leftoversKilled == 1)
    }

    @Test("a handler started past its deadline is stopped at once")
    func startedLate() {
        var s = Supervisor()
        s.start(deadline: 99)
        #expect(s.signals.count == 1 && s.signals[0] == (.term, true, 100))
        #expect(s.timer == 102)
    }

    @Test("waking early changes nothing: no signal before the deadline")
    func earlyWake() {
        var s = Supervisor()
        s.start(deadline: 130)
        #expect(s.m.timerFired(now: 129.999).isEmpty)
        #expect(s.signals.isEmpty && s.timer == 130)
    }

    @Test("the grace is the launch request's")
    func customGrace() {
        var s = Supervisor()
        s.m = HandlerShutdown(grace: 5)
        s.start(deadline: 110)
        s.sleep(until: 114.9)
        #expect(s.sent == [.term])
        s.sleep(until: 115)
        #expect(s.sent == [.term, .kill])
    }

    @Test("lost supervision: killed at once, and the ending says so unless it had timed out")
    func supervisionLost() {
        var s = Supervisor()
        s.start(deadline: 130)
        s.apply(s.m.supervisionLost(now: 110))
        #expect(s.signals.count == 1 && s.signals[0].0 == .kill && s.signals[0].1)
        #expect(s.timer == nil)
        s.exit(status: killedBy(9))
        #expect(s.ending == .launchFailed("lost supervision of the handler (poll failed); it was killed"))

        var late = Supervisor()
        late.start(deadline: 130)
        late.sleep(until: 131)
        late.apply(late.m.supervisionLost(now: 131))
        late.exit(status: killedBy(9))
        #expect(late.ending == .timedOut)
    }

    @Test("a stopping daemon lets a handler that finishes in time keep its deadline")
    func daemonStoppingInTime() {
        var s = Supervisor()
        s.start(deadline: 130)
        #expect(s.m.daemonStopping(now: 110, stopBy: 145).isEmpty)
        s.sleep(until: 129)
        s.exit(status: exitStatus(0))
        #expect(s.ending == .exited(0))
    }

    @Test("a stopping daemon that must be gone sooner stops a longer handler so that its SIGKILL lands in time")
    func daemonStoppingSooner() {
        var s = Supervisor()
        s.start(deadline: 400)
        s.now = 110
        s.apply(s.m.daemonStopping(now: 110, stopBy: 120))
        #expect(s.timer == 118)
        s.sleep(until: 121)
        #expect(s.signals.map { $0.0 } == [.term, .kill])
        #expect(s.signals.map(\.2) == [118, 120])
        s.exit(status: killedBy(9))
        #expect(s.ending == .timedOut)
    }

    @Test("a stopping daemon with no time left: SIGTERM now; one already terminating gets its SIGKILL by the stop")
    func daemonStoppingNow() {
        var s = Supervisor()
        s.start(deadline: 400)
        s.now = 110
        s.apply(s.m.daemonStopping(now: 110, stopBy: 111))
        #expect(s.signals.count == 1 && s.signals[0] == (.term, true, 110))
        #expect(s.timer == 112)
        s.apply(s.m.daemonStopping(now: 110.5, stopBy: 111))
        #expect(s.timer == 111)
        s.sleep(until: 111)
        #expect(s.sent == [.term, .kill])
    }

    @Test("events after the end, and an exit before a start, change nothing")
    func afterTheEnd() {
        var m = HandlerShutdown()
        #expect(m.exited(status: 0, now: 1).isEmpty)
        _ = m.started(now: 1, deadline: 10)
        _ = m.exited(status: 0, now: 2)
        #expect(m.exited(status: 0, now: 3).isEmpty)
        #expect(m.timerFired(now: 20).isEmpty)
        #expect(m.daemonStopping(now: 3, stopBy: 4).isEmpty)
        #expect(m.supervisionLost(now: 3).isEmpty)
    }
    // MARK: Runs without a deadline, ended on request (resident processes)

    @Test("no deadline (.infinity): no timer at all, and nothing happens however late it wakes")
    func noDeadline() {
        var s = Supervisor()
        s.start(deadline: .infinity)
        #expect(s.timer == nil)
        #expect(s.m.timerFired(now: 1e12).isEmpty)
        s.now = 5000
        s.exit(status: exitStatus(1))
        #expect(s.signals.map(\.0) == [.kill] && s.signals[0].1 == false)
        #expect(s.ending == .exited(1))
    }

    @Test("terminate on request: SIGTERM to the tree now, SIGKILL after the grace; the ending is how it died")
    func terminateRequested() {
        var s = Supervisor()
        s.start(deadline: .infinity)
        s.now = 200
        s.apply(s.m.terminateRequested(now: 200))
        #expect(s.signals.count == 1 && s.signals[0] == (.term, true, 200))
        #expect(s.timer == 202)
        #expect(s.m.terminatedOnRequest && !s.m.stopped)
        s.sleep(until: 201)
        s.exit(status: killedBy(15))
        #expect(s.ending == .signaled(15), "not .timedOut: nothing timed out")
        #expect(s.leftoversKilled == 1)
    }

    @Test("terminate on request, SIGTERM ignored: SIGKILL after the grace, ending signaled(SIGKILL)")
    func terminateIgnored() {
        var s = Supervisor()
        s.start(deadline: 1000)
        s.now = 200
        s.apply(s.m.terminateRequested(now: 200))
        s.sleep(until: 202.05)
        #expect(s.signals.map(\.0) == [.term, .kill])
        #expect(s.signals[1] == (.kill, true, 202))
        s.exit(status: killedBy(9))
        #expect(s.ending == .signaled(9))
    }

    @Test("a run that catches SIGTERM and exits cleanly: its exit status is its ending")
    func terminateCaught() {
        var s = Supervisor()
        s.start(deadline: .infinity)
        s.apply(s.m.terminateRequested(now: 100))
        s.now = 100.2
        s.exit(status: exitStatus(0))
        #expect(s.ending == .exited(0))
        #expect(s.sent == [.term, .kill])
    }

    @Test("terminate requested twice, or after the deadline stopped it, or after the end: nothing more")
    func terminateRepeated() {
        var s = Supervisor()
        s.start(deadline: .infinity)
        s.apply(s.m.terminateRequested(now: 100))
        #expect(s.m.terminateRequested(now: 101).isEmpty)
        #expect(s.timer == 102, "the first request's SIGKILL time stands")

        var late = Supervisor()
        late.start(deadline: 130)
        late.sleep(until: 130.5)
        #expect(late.m.terminateRequested(now: 130.5).isEmpty)
        late.exit(status: killedBy(15))
        #expect(late.ending == .timedOut, "the deadline came first")

        var m = HandlerShutdown()
        #expect(m.terminateRequested(now: 1).isEmpty, "not started")
        _ = m.started(now: 1, deadline: .infinity)
        _ = m.exited(status: 0, now: 2)
        #expect(m.terminateRequested(now: 3).isEmpty, "over")
    }
}
