import DrowseCore
import DrowseSystem
import Logging

/// Where the board's conditions come from: `ConditionsProbe` (sysfs, /proc, nmcli), or a double.
package protocol ConditionsReader {
    func read(now: Double) -> Conditions
}

extension ConditionsProbe: ConditionsReader {}

/// The board's power and network as a service: it owns the last reading and the policy that
/// judges it, and tells the rest of the daemon what it needs to know. It never polls: it reads
/// when the kernel reports a change (netlink, uevents), at each fetch window and on
/// `drowse conditions --refresh`. Used only from the agent's executor (it is not Sendable).
package final class ConditionsService {
    package private(set) var current: Conditions
    let reader: ConditionsReader
    package let policy: ConditionsPolicy
    /// `[radio] model`: a named model, or "auto" for the current network's kind.
    let radioModel: String
    let logger: Logger
    /// Called after every reading with the new conditions (the MQTT session's network flag).
    var onReading: (Conditions) -> Void = { _ in }

    package init(reader: ConditionsReader, policy: ConditionsPolicy, radioModel: String, now: Double, logger: Logger) {
        self.reader = reader
        self.policy = policy
        self.radioModel = radioModel
        self.logger = logger
        current = reader.read(now: now)
    }

    /// Reads the conditions afresh; true when they differ from the last reading (its time aside),
    /// which is then logged once.
    @discardableResult
    package func read(now: Double) -> Bool {
        let old = current
        current = reader.read(now: now)
        onReading(current)
        guard current != old.withReadAt(current.readAt) else { return false }
        let c = current
        logger.info("conditions: \(c.powerSource.rawValue) power, network \(c.network.rawValue)\(c.interface.map { " (\($0))" } ?? "")\(c.metered ? ", metered" : "")")
        return true
    }

    /// The radio the scheduler reckons with: `[radio] model`, or the current network's kind.
    package var radio: RadioModel { RadioModel.forConfig(radioModel, network: current.network) }

    /// What the fetch scheduler needs to know of the board now.
    package var forScheduler: FetchScheduler.Conditions {
        FetchScheduler.Conditions(online: current.network != .none, lowBattery: policy.batteryLow(current), radioTail: radio.tailSeconds)
    }
}
