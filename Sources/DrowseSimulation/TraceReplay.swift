import DrowseCore

/// Replays a scheduler trace recorded by `drowsed --scheduler-trace FILE` through the
/// simulator's driver: the recorded events go in with their recorded times, and each step's
/// actions must equal what `drowsed` got at that step. It also checks that `drowsed` carried out
/// the timer actions: every `timer_fired` came at or after the time last set, and how late.
package struct TraceReplay: Sendable {
    package struct Mismatch: Sendable, Equatable {
        /// 1-based line in the trace.
        package var line: Int
        package var event: String
        package var recorded: String
        package var replayed: String
    }

    package struct Report: Sendable, Equatable {
        package var events = 0
        package var actions = 0
        /// Windows opened (scheduled `start_fetch` actions) and the fetches in them.
        package var windows = 0
        package var windowFetches = 0
        package var timerFirings = 0
        /// The latest a timer fired after the time it was set for.
        package var maxTimerLateness = 0.0
        /// Timer firings before their time, or with no timer set.
        package var badFirings: [Int] = []
        package var mismatches: [Mismatch] = []
        package var identical: Bool { mismatches.isEmpty && badFirings.isEmpty }
    }

    /// `text`: the trace, one JSON object a line (config first).
    package static func run(_ text: String) throws(FetchScheduler.TraceError) -> Report {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).enumerated().filter { !$0.element.isEmpty }.makeIterator()
        guard let first = lines.next() else { throw .init("the trace is empty") }
        let header: JSON
        do { header = try JSON.parse(String(first.element)) } catch { throw .init("line 1: \(error)") }
        var driver = SchedulerDriver(try FetchScheduler.fromTrace(header: header))
        var report = Report()
        while let (n, line) = lines.next() {
            let entry: JSON
            do { entry = try JSON.parse(String(line)) } catch { throw .init("line \(n + 1): \(error)") }
            guard let eventJSON = entry["event"], let recorded = entry["actions"]?.arrayValue else {
                throw .init("line \(n + 1): expected {\"event\", \"actions\"}")
            }
            let event = try FetchScheduler.Event(json: eventJSON)
            if case .timerFired(let t) = event {
                report.timerFirings += 1
                if let at = driver.timerAt, t >= at - 0.001 {
                    report.maxTimerLateness = max(report.maxTimerLateness, t - at)
                } else {
                    report.badFirings.append(n + 1)
                }
            }
            let actions = driver.feed(event)
            report.events += 1
            report.actions += actions.count
            for case .startFetch(let apps, .scheduled) in actions {
                report.windows += 1
                report.windowFetches += apps.count
            }
            let replayed = JSON.array(actions.map(\.json))
            if replayed != .array(recorded) {
                report.mismatches.append(Mismatch(line: n + 1, event: eventJSON.serialized, recorded: JSON.array(recorded).serialized,
                                                  replayed: replayed.serialized))
            }
        }
        return report
    }
}
