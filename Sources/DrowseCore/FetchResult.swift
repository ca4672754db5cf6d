/// The result of one handler run, from its exit status (docs/contract.md, "Handler protocol").
package enum FetchResult: String, Sendable, Equatable, CaseIterable {
    case newData = "new-data"
    case noData = "no-data"
    case failed

    package init(exitStatus: Int32) {
        switch exitStatus {
        case 0: self = .newData
        case 100: self = .noData
        default: self = .failed
        }
    }
}

/// How a handler run ended.
package struct HandlerOutcome: Sendable, Equatable {
    package enum Ending: Sendable, Equatable {
        case exited(Int32)
        case signaled(Int32)
        /// Killed at its deadline.
        case timedOut
        /// Could not be started (no such program, no such user, ...).
        case launchFailed(String)
        /// A resident app completed the event over the API with this result.
        case completed(FetchResult)
    }

    package var ending: Ending
    package var startedAt: Double
    package var endedAt: Double

    package init(ending: Ending, startedAt: Double, endedAt: Double) {
        self.ending = ending
        self.startedAt = startedAt
        self.endedAt = endedAt
    }

    package var result: FetchResult {
        if case .exited(let s) = ending { return FetchResult(exitStatus: s) }
        if case .completed(let r) = ending { return r }
        return .failed
    }

    package var summary: String {
        switch ending {
        case .exited(let s): "exit status \(s)"
        case .signaled(let s): "killed by signal \(s)"
        case .timedOut: "killed at its deadline"
        case .launchFailed(let why): "could not start: \(why)"
        case .completed(let r): "completed: \(r.rawValue)"
        }
    }
}
