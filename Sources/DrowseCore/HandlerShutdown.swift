/// Decides how one running handler is ended (docs/contract.md, "Handler protocol"): past its deadline
/// SIGTERM to its whole tree, SIGKILL `grace` seconds later if it is still there, and once it
/// has exited, whatever it left behind is killed too; the run's ending follows from that.
///
/// A run may also be ended on request (`terminateRequested`: a resident process being stopped,
/// an app terminated under memory pressure) the same way, SIGTERM then SIGKILL; its ending is
/// then how it really died. A deadline of `.infinity` (a resident process) sets no timer at all.
///
/// Pure: the supervisor (`ProcessLauncher`) feeds it the times on its monotonic clock (boards
/// without an RTC jump at their first NTP sync) and what the process did, and carries out the
/// actions: sends the signals, sleeps in poll(2) until the timer, reports the ending.
package struct HandlerShutdown: Sendable {
    package enum Signal: Sendable, Equatable {
        case term, kill
    }

    package enum Action: Sendable, Equatable {
        /// Send the signal to the handler's process group and, with `wholeTree`, to every
        /// descendant too (those that left the group with `setsid`).
        case signal(Signal, wholeTree: Bool)
        /// Wake `timerFired` at this time (nil: no timer; the process's exit will wake the supervisor).
        case setTimer(at: Double?)
        /// The run is over: kill and reap every process it left behind, wherever it is now.
        case killLeftovers
        /// The run ended so.
        case finished(HandlerOutcome.Ending)
    }

    enum Phase: Sendable, Equatable {
        case notStarted
        case running(deadline: Double)
        /// SIGTERM sent; SIGKILL at `killAt`.
        case terminating(killAt: Double)
        /// SIGKILL sent: only the reaping is left (a process in D state may take a while).
        case killed
        /// Supervision failed (poll(2) broke): killed, waiting for the exit to report it.
        case lost
        case done
    }

    /// Between SIGTERM and SIGKILL.
    package let grace: Double
    /// After the run is over, how long its last output is still collected from the pipes (the
    /// leftovers are killed by then, so the pipes reach EOF promptly; a grandchild that kept them
    /// open past this is not waited for).
    package let outputDrain: Double = 0.5

    /// Until when the last output is collected, for a run that ended at `now`.
    package func outputCollectedUntil(endedAt now: Double) -> Double { now + outputDrain }
    /// How often a killed process that has not been reaped yet is looked at again.
    package static let reapRecheck = 0.1
    var phase: Phase = .notStarted
    /// SIGTERM was sent at the deadline (or earlier, for a stopping daemon): the run timed out.
    package private(set) var stopped = false
    /// SIGTERM was sent because the run was asked to end (`terminateRequested`), not at a deadline.
    package private(set) var terminatedOnRequest = false

    package init(grace: Double = 2) {
        self.grace = grace
    }

    /// The process exists since `now`; it must be done by `deadline`. One launched past its
    /// deadline is stopped at once.
    package mutating func started(now: Double, deadline: Double) -> [Action] {
        guard phase == .notStarted else { return [] }
        phase = .running(deadline: deadline)
        if deadline == .infinity { return [.setTimer(at: nil)] }
        return now >= deadline ? terminate(now: now) : [.setTimer(at: deadline)]
    }

    /// The run is to end now, before (or without) a deadline: SIGTERM to the whole tree, SIGKILL
    /// after the grace. Its ending is then what the process really did (`.signaled(SIGTERM)`,
    /// `.signaled(SIGKILL)`, or its exit status if it caught SIGTERM and exited), not `.timedOut`.
    /// Nothing happens once it is being stopped already (at its deadline, or asked before).
    package mutating func terminateRequested(now: Double) -> [Action] {
        guard case .running = phase else { return [] }
        terminatedOnRequest = true
        phase = .terminating(killAt: now + grace)
        return [.signal(.term, wholeTree: true), .setTimer(at: now + grace)]
    }

    /// The timer set by `setTimer` fired (or the supervisor woke for another reason at `now`).
    package mutating func timerFired(now: Double) -> [Action] {
        switch phase {
        case .running(let deadline) where now >= deadline:
            return terminate(now: now)
        case .terminating(let killAt) where now >= killAt:
            phase = .killed
            return [.signal(.kill, wholeTree: true), .setTimer(at: now + Self.reapRecheck)]
        case .killed:
            return [.setTimer(at: now + Self.reapRecheck)]
        default:
            return []
        }
    }

    /// The handler exited; `status` is its wait(2) status. Its process group goes, and whatever
    /// else it left behind.
    package mutating func exited(status: Int32, now: Double) -> [Action] {
        let wasLost = phase == .lost
        guard phase != .done, phase != .notStarted else { return [] }
        phase = .done
        let ending: HandlerOutcome.Ending
        if stopped {
            ending = .timedOut
        } else if wasLost {
            ending = .launchFailed("lost supervision of the handler (poll failed); it was killed")
        } else if status & 0x7f == 0 {
            ending = .exited((status >> 8) & 0xff)
        } else {
            ending = .signaled(status & 0x7f)
        }
        return [.signal(.kill, wholeTree: false), .killLeftovers, .finished(ending)]
    }

    /// The supervisor cannot watch the handler any more (poll(2) failed): it ends the handler
    /// rather than report a result the handler did not give. It then waits for the exit.
    package mutating func supervisionLost(now: Double) -> [Action] {
        switch phase {
        case .notStarted, .done, .lost: return []
        default:
            phase = .lost
            return [.signal(.kill, wholeTree: true), .setTimer(at: nil)]
        }
    }

    /// The daemon is stopping and must be gone by `stopBy`: a handler whose deadline is later is
    /// stopped sooner, so that its SIGKILL lands by then. One that would finish in time keeps
    /// its deadline (running handlers finish, so their events count as handled).
    /// Not driven by drowsed yet: today it has no stop budget to pass (systemd's TimeoutStopSec
    /// is 45 s, above the default 30 s deadline plus the grace), and a stop lets every running
    /// handler reach its own deadline, which is this rule with `stopBy` at infinity.
    package mutating func daemonStopping(now: Double, stopBy: Double) -> [Action] {
        switch phase {
        case .running(let deadline):
            let latest = stopBy - grace
            guard latest < deadline else { return [] }
            // A run without a deadline (a resident process) is stopped with the daemon.
            phase = .running(deadline: latest)
            return now >= latest ? terminate(now: now) : [.setTimer(at: latest)]
        case .terminating(let killAt) where stopBy < killAt:
            phase = .terminating(killAt: max(now, stopBy))
            return now >= stopBy ? timerFired(now: now) : [.setTimer(at: stopBy)]
        default:
            return []
        }
    }

    private mutating func terminate(now: Double) -> [Action] {
        stopped = true
        phase = .terminating(killAt: now + grace)
        return [.signal(.term, wholeTree: true), .setTimer(at: now + grace)]
    }
}
