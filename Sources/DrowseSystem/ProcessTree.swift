#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// What a handler leaves behind, found and ended.
///
/// Until each app gets its own cgroup, a handler's processes are tracked as a tree: drowsed is a
/// child subreaper (`PR_SET_CHILD_SUBREAPER`), and so is every handler (set before its execve).
/// While a handler runs, everything it starts stays in its subtree, even a child that called
/// `setsid` and whose parent exited (the handler adopts it). When the handler ends, what is left
/// is adopted by drowsed; any child of drowsed that `drowse_spawn` did not start is such a
/// leftover, from a run that is over, and is killed and reaped here.
package enum ProcessTree {
    /// Makes drowsed the subreaper of its descendants (once, before the first handler).
    static let subreaperSet: Int32 = drowse_set_child_subreaper()

    /// Every descendant of `root` now (not `root` itself), parents before children.
    package static func descendants(of root: pid_t) -> [pid_t] {
        let max = 32768
        var pids = [pid_t](repeating: 0, count: max), ppids = [pid_t](repeating: 0, count: max)
        let n = Int(drowse_process_table(&pids, &ppids, Int32(max)))
        var children: [pid_t: [pid_t]] = [:]
        for i in 0..<n { children[ppids[i], default: []].append(pids[i]) }
        var out: [pid_t] = []
        var queue = children[root] ?? []
        while let p = queue.popLast() {
            out.append(p)
            queue += children[p] ?? []
        }
        return out
    }

    /// Sends `signal` to `root`'s process group and to every descendant, including those that
    /// left the group with `setsid` or `setpgid`.
    static func signalTree(_ root: pid_t, _ signal: Int32) {
        Sys.killpgOwn(root, signal)
        // Not atomic: a descendant may fork meanwhile. What escapes here is adopted by drowsed
        // once the handler is gone, and killed by `killLeftovers`.
        for p in descendants(of: root) { Sys.killOwn(p, signal) }
    }

    /// Reaps what drowsed adopted that has ended, when none of it can be alive (a run whose
    /// cgroup leaf emptied by itself): no walk over /proc, which was a fifth of a handler's
    /// supervision in a burst. False when an ended child that is not an adopted one is in the
    /// way (`drowse_reap_ended_adopted`): `killLeftovers` then does it.
    package static func reapEndedAdopted() -> Bool { drowse_reap_ended_adopted() == 0 }

    /// Kills (SIGKILL) and reaps every process drowsed has adopted, in rounds: killing one makes
    /// its own children drowsed's. Waits on pidfds (no polling) for at most `within` seconds in
    /// all; a process that will not die in time (stuck in the kernel) is taken at the next call.
    /// Returns how many were killed.
    @discardableResult
    package static func killLeftovers(within: Double = 2) -> Int {
        let until = WallClock.monotonic() + within
        var total = 0
        for _ in 0..<16 {
            var fds = [Int32](repeating: -1, count: 256)
            let n = Int(drowse_kill_adopted(SIGKILL, &fds, Int32(fds.count)))
            guard n > 0 else { break }
            total += n
            var waits = fds.prefix(min(n, fds.count)).filter { $0 >= 0 }.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            // A pidfd turns readable when its process has ended (it is a zombie, ours to reap).
            while !waits.isEmpty {
                let left = until - WallClock.monotonic()
                guard left > 0 else { break }
                // A poll that fails cannot wait: what is not reaped now is taken at the next call.
                guard (try? Sys.poll(&waits, timeoutMs: Int32(left * 1000) + 1)) != nil else { break }
                for w in waits where w.revents != 0 { Sys.close(w.fd, ignoringErrors: .nothingToFlush) }
                waits.removeAll { $0.revents != 0 }
            }
            for w in waits { Sys.close(w.fd, ignoringErrors: .nothingToFlush) }
            // Those not reaped yet (still dying) are taken at the next call; a scan of /proc that
            // fails would fail the next round the same way.
            if drowse_reap_adopted() < 0 { break }
            if WallClock.monotonic() >= until { break }
        }
        return total
    }
}
