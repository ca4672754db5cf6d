#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys
import DrowseCore
import Synchronization

/// A started handler; its outcome arrives when the handler ends (or could not start).
package final class HandlerRun: Sendable {
    private let state = Mutex<(outcome: HandlerOutcome?, waiter: CheckedContinuation<HandlerOutcome, Never>?)>((nil, nil))
    private let shortage = Atomic<Int32>(0)
    /// The process, once started; the supervisor's eventfd (-1 when none or once it has ended).
    private let control = Mutex<(pid: pid_t?, wakeFD: Int32)>((nil, -1))

    package init() {}

    /// The process id, once it has started (nil when it could not start).
    package var pid: pid_t? { control.withLock { $0.pid } }

    /// Ends the run as at a deadline, now: SIGTERM to its process group (its cgroup leaf, when it
    /// has one), SIGKILL after the request's `killGrace`. The supervisor is woken through an
    /// eventfd in its poll set. The outcome is how the process really ended (`.signaled(SIGTERM)`,
    /// …), not `.timedOut`. Nothing happens before the start or after the end.
    package func terminate() {
        control.withLock { c in
            guard c.wakeFD >= 0 else { return }
            EventFD.signal(c.wakeFD)
        }
    }

    func attach(pid: pid_t, wakeFD: Int32) {
        control.withLock { $0 = (pid, wakeFD) }
    }

    /// The supervisor is done with its eventfd: `terminate` must not write to it any more (the
    /// number could be reused) before it is closed.
    func detachWake() {
        control.withLock { $0.wakeFD = -1 }
    }

    /// The errno when the handler could not start for lack of resources (EMFILE, ENFILE, EAGAIN,
    /// ENOMEM): nothing ran, and trying again later may work. Set before the outcome arrives.
    package var resourceShortage: Int32? {
        let e = shortage.load(ordering: .acquiring)
        return e == 0 ? nil : e
    }

    func markResourceShortage(_ err: Int32) { shortage.store(err, ordering: .releasing) }

    /// Delivers the outcome to whoever waits (once).
    package func finish(_ outcome: HandlerOutcome) {
        let waiter = state.withLock { s -> CheckedContinuation<HandlerOutcome, Never>? in
            guard s.outcome == nil else { return nil }
            s.outcome = outcome
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: outcome)
    }

    /// Waits for the end of the run. One waiter at a time.
    /// The outcome if the run has ended, without waiting.
    package var peek: HandlerOutcome? { state.withLock { $0.outcome } }

    package func outcome() async -> HandlerOutcome {
        await withCheckedContinuation { (c: CheckedContinuation<HandlerOutcome, Never>) in
            let ready = state.withLock { s -> HandlerOutcome? in
                if let o = s.outcome { return o }
                s.waiter = c
                return nil
            }
            if let ready { c.resume(returning: ready) }
        }
    }
}
