/// What a transfer asks of the board before it may use the network (docs/contract.md: `--discretionary`,
/// `--no-cellular`, `--requires-power`; iOS's `discretionary` and `allowsCellularAccess`).
package struct TransferRequirements: Sendable, Equatable {
    /// Only on an unmetered network, and on external power or a battery above the low mark.
    package var discretionary = false
    package var noCellular = false
    package var requiresPower = false

    package init(discretionary: Bool = false, noCellular: Bool = false, requiresPower: Bool = false) {
        self.discretionary = discretionary
        self.noCellular = noCellular
        self.requiresPower = requiresPower
    }
}

/// Decides whether work may run under the current conditions, and says why not. Pure.
package struct ConditionsPolicy: Sendable {
    package var batteryLowPercent: Int

    package init(batteryLowPercent: Int) { self.batteryLowPercent = batteryLowPercent }

    /// On battery power, below the low mark.
    package func batteryLow(_ c: Conditions) -> Bool {
        c.powerSource == .battery && (c.batteryPercent ?? 100) < batteryLowPercent
    }

    /// nil when the work may run now; otherwise what it waits for ("no network", "metered network", ...).
    package func blocker(_ r: TransferRequirements, _ c: Conditions) -> String? {
        if c.network == .none { return "no network" }
        if r.noCellular && c.network == .cellular { return "cellular network" }
        if r.requiresPower && c.powerSource == .battery { return "on battery power" }
        if r.discretionary {
            if c.metered { return "metered network" }
            if batteryLow(c) { return "battery low (\(c.batteryPercent.map { "\($0)%" } ?? "?"))" }
        }
        return nil
    }
}
