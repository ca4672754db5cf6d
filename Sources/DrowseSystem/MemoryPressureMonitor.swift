#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// Watches memory pressure with a PSI trigger (Documentation/accounting/psi.rst): the trigger
/// (e.g. `some 150000 1000000`, stall µs within a window µs) is written to `/proc/pressure/memory`
/// and the kernel signals POLLPRI on that descriptor each time the stall crosses it (at most once
/// per window). One thread sleeps in poll(2) on it and on an eventfd for `stop()`: no timer.
package final class MemoryPressureMonitor: Sendable {
    private let fd: Int32
    /// Signalled by `stop()`.
    private let stopFD: Int32
    /// Signalled by the thread as it ends; `stop()` blocks in read(2) on it (the join).
    private let doneFD: Int32

    private init(fd: Int32, stopFD: Int32, doneFD: Int32) {
        self.fd = fd
        self.stopFD = stopFD
        self.doneFD = doneFD
    }

    deinit {
        Sys.close(fd, ignoringErrors: .nothingToFlush)
        Sys.close(stopFD, ignoringErrors: .nothingToFlush)
        Sys.close(doneFD, ignoringErrors: .nothingToFlush)
    }

    /// Registers `trigger` on `path` and starts the watching thread; `onPressure` runs on that
    /// thread at each event. Fails with the reason when PSI is missing (no such file: a kernel
    /// without CONFIG_PSI, or booted with psi=0) or the kernel refuses the trigger (EINVAL).
    package static func start(trigger: String, path: String = "/proc/pressure/memory",
                              onPressure: @escaping @Sendable () -> Void) -> Result<MemoryPressureMonitor, SystemError> {
        let fd: Int32
        do { fd = try Sys.open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC) } catch { return .failure(error) }
        // The kernel parses the trigger as a string, terminator included.
        var bytes = Array(trigger.utf8)
        bytes.append(0)
        do {
            try FileSystem.writeAll(fd, bytes, what: "PSI trigger \"\(trigger)\" on \(path)")
        } catch {
            Sys.close(fd, ignoringErrors: .afterError)
            guard error.errno == EINVAL else { return .failure(error) }
            // The kernel only says EINVAL; name the rules (psi.rst) so that the config can be fixed.
            return .failure(SystemError("PSI trigger \"\(trigger)\" on \(path) refused: it must be \"some|full <stall µs> <window µs>\" "
                                        + "with the stall below the window and the window 500000 to 10000000 µs; without "
                                        + "CAP_SYS_RESOURCE the window must be a multiple of 2000000 µs", errno: EINVAL))
        }
        let stopFD = drowse_eventfd(), doneFD = drowse_eventfd_blocking()
        guard stopFD >= 0, doneFD >= 0 else {
            let e = errno
            for f in [fd, stopFD, doneFD] where f >= 0 { Sys.close(f, ignoringErrors: .afterError) }
            return .failure(SystemError("eventfd", errno: e))
        }
        let monitor = MemoryPressureMonitor(fd: fd, stopFD: stopFD, doneFD: doneFD)
        OSThread.detach(name: "psi-memory") {
            monitor.watch(onPressure)
            EventFD.signal(monitor.doneFD)
        }
        return .success(monitor)
    }

    private func watch(_ onPressure: @Sendable () -> Void) {
        var fds = [pollfd(fd: fd, events: Int16(POLLPRI), revents: 0), pollfd(fd: stopFD, events: Int16(POLLIN), revents: 0)]
        while true {
            fds[0].revents = 0
            fds[1].revents = 0
            // A failing poll cannot wait any more: the monitor ends rather than spin.
            guard (try? Sys.poll(&fds, timeoutMs: -1)) != nil else { return }
            if fds[1].revents != 0 { return }
            // POLLERR: the trigger is gone (the file was closed underneath); nothing more will come.
            if fds[0].revents & Int16(POLLERR | POLLNVAL) != 0 { return }
            if fds[0].revents & Int16(POLLPRI) != 0 { onPressure() }
        }
    }

    /// Stops the thread and waits for it to end; `onPressure` is not called after this returns.
    /// Later calls return at once.
    package func stop() {
        EventFD.signal(stopFD)
        // Blocks until the thread has signalled its end; the value is put back so that a
        // second stop() returns at once too.
        EventFD.signal(doneFD, adding: EventFD.read(doneFD))
    }
}
