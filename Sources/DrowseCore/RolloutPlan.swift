/// A staged rollout that stops itself (`drowse push --group G --stages 5%,100% --abort-after N`;
/// docs/fleets.md, "Staged rollouts"): which devices each stage reaches, and, from the update
/// reports the devices publish in their fleet status (`updates.<package>`, matched by the
/// notification's id), whether to wait, go on to the next stage, or stop.
///
/// Sans-IO: the caller reads the statuses, publishes, keeps the clock and asks.
package struct RolloutPlan: Sendable, Equatable {
    /// The notification's id: a device's report of this update carries it.
    package var id: String
    /// The devices each stage adds (the stages are cumulative shares of the group).
    package var stages: [[String]]
    /// Failures (`failed`, `rolled-back`) among a stage's devices that stop the rollout.
    package var abortAfter: Int

    /// What to do at a stage, given what its devices reported.
    package enum Decision: Sendable, Equatable {
        /// Some devices of the stage have not reported a final state of this update yet.
        case wait
        /// The stage is over (every device's update is final, or the stage timed out) with fewer
        /// failures than the threshold: the next stage may start. `silent`: devices of the stage
        /// that reported no final state (at a timeout).
        case next(silent: [String])
        /// The last stage is over.
        case done(silent: [String])
        /// `abortAfter` devices of the stage failed or rolled back: the rest get nothing.
        case abort(failed: [String])
    }

    /// `devices` (the group's, in any order, each once) cut into cumulative `shares` (each in
    /// (0, 1], increasing, the last 1): a stage has at least one device more than the one before
    /// while devices remain. The order is the devices' `RolloutDelay.seed` for this id (then the
    /// device id), so a rerun of the same push picks the same first stage, and it does not follow
    /// the names (a fleet named by site would otherwise try one site first).
    package init(id: String, devices: [String], shares: [Double], abortAfter: Int) {
        self.id = id
        self.abortAfter = max(1, abortAfter)
        let order = Set(devices).sorted {
            let a = RolloutDelay.seed(deviceID: $0, notificationID: id), b = RolloutDelay.seed(deviceID: $1, notificationID: id)
            return a != b ? a < b : $0 < $1
        }
        var stages: [[String]] = []
        var reached = 0
        for (i, share) in shares.enumerated() {
            let last = i == shares.count - 1
            var upTo = last ? order.count : Int((Double(order.count) * share).rounded(.up))
            upTo = min(order.count, max(upTo, reached + 1))
            guard upTo > reached else { break }
            stages.append(Array(order[reached..<upTo]))
            reached = upTo
        }
        self.stages = stages
    }

    /// `--stages`' text: percentages, comma-separated, increasing, the last 100% ("5%,100%").
    /// nil when it is not that.
    package static func parseShares(_ text: String) -> [Double]? {
        var shares: [Double] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let t = String(part).trimmingSpaces()
            guard t.hasSuffix("%"), let p = Double(t.dropLast()), p.isFinite, p > 0, p <= 100, p > (shares.last ?? 0) * 100 else { return nil }
            shares.append(p / 100)
        }
        guard shares.last == 1 else { return nil }
        return shares
    }

    /// The report of this rollout's update in a device's status: the one with the push's id, in
    /// any package.
    package func report(in status: FleetStatus?) -> UpdateReport? {
        status?.updates.keys.sorted().lazy.compactMap { status?.updates[$0] }.first { $0.id == id }
    }

    /// What to do at stage `stage` (0-based) given each device's report of this update (absent:
    /// none seen yet); `timedOut`: the stage's time is up.
    package func decide(stage: Int, reports: [String: UpdateReport], timedOut: Bool) -> Decision {
        let devices = stages[stage]
        let failed = devices.filter { reports[$0]?.state.isFailure == true }
        if failed.count >= abortAfter { return .abort(failed: failed) }
        let open = devices.filter { reports[$0]?.state.isFinal != true }
        guard open.isEmpty || timedOut else { return .wait }
        return stage == stages.count - 1 ? .done(silent: open) : .next(silent: open)
    }

    /// The devices of the stages after `stage`: those a stop leaves without the notification.
    package func untouched(after stage: Int) -> [String] { stages.dropFirst(stage + 1).flatMap { $0 } }
}
