import DrowseSystem
import Logging

/// drowsed's resident code, given back after a quiet spell (docs/configuration.md, `[lifecycle]
/// release_code_after`). A burst of work touches far more of drowse's binary than an idle daemon
/// runs: one API request brings back about 6 MiB of its code pages, start-up more. Those pages
/// are the file's bytes: `release_code_after` (30 s) after the last work, the resident pages of
/// the program's and the libraries' code and constants are dropped from this process with
/// MADV_DONTNEED (`LibraryCode.releaseWithProgram`). They stay in the page cache while memory
/// allows, and the next work faults back the pages it runs: its first start costs minor faults.
///
/// One wake per quiet spell, none while idle: work seen while the wake is set moves it on when it
/// fires (not at each piece of work), and after the release nothing is set until work comes.
/// What counts as work: a daemon event other than a ping's (`DaemonEvent.radioUsed` alone), an
/// API request, an MQTT message.
@DaemonActor package final class CodeRelease {
    private let after: Double
    private let wake: ServiceWake
    private let logger: Logger
    private let release: () -> Int?
    private var lastWork: Double?
    /// How many times the code was given back.
    package private(set) var releases = 0

    package init(after: Double, clock: AgentClock, logger: Logger, release: @escaping () -> Int? = LibraryCode.releaseWithProgram) {
        self.after = after
        wake = ServiceWake(clock: clock)
        self.logger = logger
        self.release = release
    }

    /// Work happened now: the code is given back `after` seconds after the last of it.
    package func worked() {
        let now = wake.clock.timeline.now()
        lastWork = now
        if wake.at == nil { wake.set(now + after) { [unowned self] in fired() } }
    }

    private func fired() {
        let now = wake.clock.timeline.now()
        if let last = lastWork, last + after > now {
            wake.set(last + after) { [unowned self] in fired() }
            return
        }
        lastWork = nil
        releases += 1
        if let bytes = release() {
            logger.debug("quiet for \(after) s: released the resident code of drowse and its libraries (\(bytes / 1024) KiB mapped)")
        }
    }
}
