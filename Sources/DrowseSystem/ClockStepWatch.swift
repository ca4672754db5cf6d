#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CDrowseSys
import Synchronization

/// Tells when the wall clock is set: a timerfd on CLOCK_REALTIME with TFD_TIMER_CANCEL_ON_SET,
/// readable at the moment of a step and never otherwise (no polling, no wakeups while idle).
/// The conditions monitor's thread waits on `fd` with its netlink sockets.
package final class ClockStepWatch {
    package let fd: Int32

    /// nil (with errno's text) where the kernel refuses such a timer.
    package init?(failure: inout String) {
        let fd = drowse_clock_step_fd()
        if fd < 0 {
            failure = String(cString: strerror(errno))
            return nil
        }
        self.fd = fd
    }

    package enum Reading { case stepped, nothing, failed(String) }

    /// After `fd` polled readable: whether the clock was set (the timer is armed again).
    package func consume() -> Reading {
        switch drowse_clock_step_read(fd) {
        case 1: return .stepped
        case 0: return .nothing
        default: return .failed(String(cString: strerror(errno)))
        }
    }

    deinit { Sys.close(fd, ignoringErrors: .nothingToFlush) }
}
