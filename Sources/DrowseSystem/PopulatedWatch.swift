#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// Waits, on a thread of its own blocked in poll(2) on `cgroup.events`, for a cgroup to empty
/// (`populated 0`), then calls `onEmpty` once. For a process drowsed did not start itself (a
/// resident process adopted from an earlier drowsed): no pidfd to wait on, but its cgroup.
package final class PopulatedWatch: Sendable {
    /// Signalled by `stop()`; the thread's poll set holds it.
    private let cancelFD: Int32
    /// Signalled by the thread as it ends; `stop()` blocks in read(2) on it.
    private let doneFD: Int32

    private init(cancelFD: Int32, doneFD: Int32) {
        self.cancelFD = cancelFD
        self.doneFD = doneFD
    }

    deinit {
        Sys.close(cancelFD, ignoringErrors: .nothingToFlush)
        Sys.close(doneFD, ignoringErrors: .nothingToFlush)
    }

    /// Starts watching `path`. `onEmpty` runs on the watching thread when the cgroup is empty
    /// (at once if it already is), or when it cannot be watched any more (the cgroup is gone);
    /// never after `stop()` has returned.
    package static func start(path: String, onEmpty: @escaping @Sendable () -> Void) -> Result<PopulatedWatch, SystemError> {
        guard FileSystem.exists(path + "/cgroup.events") else {
            return .failure(SystemError("watch \(path)/cgroup.events", errno: ENOENT))
        }
        let cancelFD = drowse_eventfd(), doneFD = drowse_eventfd_blocking()
        guard cancelFD >= 0, doneFD >= 0 else {
            let e = errno
            if cancelFD >= 0 { Sys.close(cancelFD, ignoringErrors: .afterError) }
            if doneFD >= 0 { Sys.close(doneFD, ignoringErrors: .afterError) }
            return .failure(SystemError("eventfd", errno: e))
        }
        let watch = PopulatedWatch(cancelFD: cancelFD, doneFD: doneFD)
        OSThread.detach(name: "cgroup-watch") {
            let r = AppCgroups.waitForEvents(path, timeout: nil, cancelFD: watch.cancelFD) { $0["populated"] == false }
            if r != .cancelled { onEmpty() }
            EventFD.signal(watch.doneFD)
        }
        return .success(watch)
    }

    /// Stops watching and waits for the thread to end (`onEmpty` may have run already).
    package func stop() {
        EventFD.signal(cancelFD)
        // Blocks until the thread has signalled its end; the value is put back so that a
        // second stop() returns at once too.
        EventFD.signal(doneFD, adding: EventFD.read(doneFD))
    }
}
