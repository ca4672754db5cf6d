#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// glibc's malloc, bounded for a daemon that is idle nearly all the time: what a burst of work
/// allocated goes back to the kernel when the work ends, instead of staying private dirty
/// memory until the next burst.
///
/// Left to its defaults, glibc (1) gives every thread that allocates its own arena (up to 8 per
/// core: drowsed had 11 after a fetch, a few notifications and a download, one per handler's
/// supervising thread, the transfer and sync threads and NIO's loops), and each arena keeps
/// its own free memory; (2) raises its mmap threshold to the size of the largest block freed
/// so far (a 1 MiB transfer buffer), and its trim threshold to twice that, so from then on such
/// blocks come from an arena, and up to 2 MiB of free memory per arena is never given back.
/// Measured one minute after a fetch, 5 notifications, a download and a metrics scrape: 2 arenas
/// holding 1.50 MB from the system for 1.34 MB in use, instead of 11 holding 2.47 MB for 1.38 MB;
/// private dirty 3.4 MiB against 3.5 (most of what is left is not malloc's: the
/// relocated read-only data of drowse and libcrypto, .bss, thread stacks). The ~9 MB more that
/// some runs showed was not malloc's either: see the sync in deploy/measure-idle.sh.
package enum MallocBounds {
    /// Arenas beyond the main one: threads share them (drowsed's threads mostly wait; they
    /// rarely contend for malloc's lock).
    package static let arenaMax: Int32 = 2
    /// Blocks this big or bigger are their own mappings, unmapped when freed; free memory at the
    /// top of an arena beyond it is given back. Fixed values: glibc then stops raising them.
    package static let threshold: Int32 = 128 * 1024

    /// Sets the bounds. Call first thing in `main`, before other threads exist. Returns the
    /// settings glibc refused (mallopt returned 0), for the caller to log.
    package static func apply() -> [String] {
#if canImport(Glibc)
        let settings: [(String, Int32, Int32)] = [
            ("M_ARENA_MAX", M_ARENA_MAX, arenaMax),
            ("M_MMAP_THRESHOLD", M_MMAP_THRESHOLD, threshold),
            ("M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, threshold),
        ]
        return settings.filter { mallopt($0.1, $0.2) != 1 }.map(\.0)
#else
        return []
#endif
    }

    /// Gives the free memory of every arena back to the kernel (malloc_trim(0): the top of each
    /// heap, and whole free pages inside it). For when a burst of work ended (the last running
    /// handler, a transfer): it costs a walk over the arenas' free lists, well under a
    /// millisecond for drowsed's, and nothing while drowsed is idle. Returns whether any memory
    /// was released.
    @discardableResult
    package static func trim() -> Bool {
#if canImport(Glibc)
        return malloc_trim(0) == 1
#else
        return false
#endif
    }
}
