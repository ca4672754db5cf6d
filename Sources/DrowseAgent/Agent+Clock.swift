import DrowseSystem

extension Agent {
    /// The wall clock was set (a time sync, `date -s`). drowsed's timeline runs on the boot
    /// clock, so nothing planned moves: windows, deadlines, retries, budgets and allowances keep
    /// their waits. What changes: the skew that names timeline times in wall time (the API, the
    /// fleet status, DROWSE_DEADLINE), the time of day habits are read in, the publishers'
    /// expirations, and the store's note of the skew (for the next start's `alignTimeline`).
    /// docs/design.md, "Time on a board without a real-time clock".
    func clockStepped() {
        let step = timeline.resync()
        guard abs(step) >= 0.001 else { return }
        logger.notice("the wall clock was set \(step > 0 ? "forward" : "back") by \(Self.seconds(abs(step))) s; planned times keep their waits")
        do { try store.saveClockSkew(timeline.skew) } catch { logger.error("store: \(error)") }
        fetch.timeOfDayChanged(utcOffset: Double(localUTCOffset()) + timeline.skew)
        notifications.wallClockStepped(by: step)
        republishStatusIfChanged()
    }

    static func seconds(_ x: Double) -> String { String(format3(x)) }
}
