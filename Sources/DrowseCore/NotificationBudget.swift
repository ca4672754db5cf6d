/// `[notifications] max_per_hour`: how many notifications may wake an app in any hour.
///
/// Pure: the caller passes the times the app's budget was used (from the store, so a restart
/// does not hand out a fresh hour) and the current time. Priority 10 always runs and still uses
/// the budget, so priority 5 waits after a burst of urgent ones.
package struct NotificationBudget: Sendable, Equatable {
    package static let period = 3600.0
    package var maxPerHour: Int

    package init(maxPerHour: Int) {
        self.maxPerHour = maxPerHour
    }

    /// The times in `used` that still count at `now`, oldest first.
    package func counting(_ used: [Double], now: Double) -> [Double] {
        used.filter { $0 > now - Self.period && $0 <= now }.sorted()
    }

    /// How many more may run at `now`.
    package func room(used: [Double], now: Double) -> Int {
        max(0, maxPerHour - counting(used, now: now).count)
    }

    /// Whether a notification of `priority` runs at `now` (or waits).
    package func admits(priority: Int, used: [Double], now: Double) -> Bool {
        priority == 10 || room(used: used, now: now) > 0
    }

    /// When the next one may run: `now` if there is room, else when the oldest use that keeps
    /// the budget full leaves the hour.
    package func nextRoom(used: [Double], now: Double) -> Double {
        let recent = counting(used, now: now)
        guard recent.count >= maxPerHour else { return now }
        return recent[recent.count - maxPerHour] + Self.period
    }
}
