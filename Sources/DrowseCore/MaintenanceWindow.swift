/// `[updates] window`: the local wall-clock times of day at which updates may be installed
/// (docs/updates.md, "Maintenance windows"). Downloads do not wait for it; an update's
/// `install_by` overrides it. Each range is "HH:MM-HH:MM"; one whose end is before its start
/// runs over midnight ("23:00-01:30"). No ranges: any time.
///
/// Judged against the local wall clock as it stands, like a publisher's `expiration`
/// (docs/design.md, "Time on a board without a real-time clock"): a board whose clock is wrong
/// installs at the wrong hour, and the systemd timer that waits for the window follows every
/// step of the clock.
package struct MaintenanceWindow: Sendable, Equatable {
    /// One range: minutes after local midnight, `start` included, `end` excluded.
    package struct Range: Sendable, Equatable {
        package var start: Int
        package var end: Int

        /// Whether `minute` (0..<1440) is inside.
        package func contains(_ minute: Int) -> Bool {
            start < end ? (start..<end).contains(minute) : (minute >= start || minute < end)
        }

        package var description: String { "\(Self.clock(start))-\(Self.clock(end))" }

        static func clock(_ m: Int) -> String {
            let h = m / 60, mm = m % 60
            return (h < 10 ? "0" : "") + "\(h):" + (mm < 10 ? "0" : "") + "\(mm)"
        }
    }

    package var ranges: [Range]

    package init(ranges: [Range] = []) { self.ranges = ranges }

    /// Any time.
    package static let always = MaintenanceWindow()

    /// Parses ["02:00-04:00", ...]; nil with the reason for what is not a range.
    package static func parse(_ texts: [String]) -> Result<MaintenanceWindow, WindowError> {
        var ranges: [Range] = []
        for text in texts {
            let ends = text.split(separator: "-", omittingEmptySubsequences: false)
            guard ends.count == 2, let s = minute(ends[0]), let e = minute(ends[1]) else {
                return .failure(WindowError(text: text, reason: "is not a time range such as \"02:00-04:00\""))
            }
            guard s != e else { return .failure(WindowError(text: text, reason: "is empty (its start is its end)")) }
            ranges.append(Range(start: s, end: e))
        }
        return .success(MaintenanceWindow(ranges: ranges))
    }

    /// "HH:MM" (24 h, "24:00" as the end of the day) to minutes after midnight.
    static func minute(_ text: Substring) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 2, parts[1].count == 2, parts.allSatisfy({ $0.allSatisfy(\.isASCII) }),
              let h = Int(parts[0]), let m = Int(parts[1]), (0...24).contains(h), (0..<60).contains(m), h < 24 || m == 0
        else { return nil }
        return (h * 60 + m) % 1440
    }

    /// Whether an install may start at `minute` after local midnight.
    package func isOpen(atMinute minute: Int) -> Bool {
        ranges.isEmpty || ranges.contains { $0.contains(((minute % 1440) + 1440) % 1440) }
    }

    /// Whether an install may start at local time `minute` with the deadline `installBy` (Unix
    /// time, the publisher's clock) against the wall clock `now`.
    package func allowsInstall(atMinute minute: Int, now: Double, installBy: Double?) -> Bool {
        if let installBy, now >= installBy { return true }
        return isOpen(atMinute: minute)
    }

    /// systemd calendar events (systemd.time(7)) for each range's opening, local time: what
    /// the timer that waits for the window is given.
    package var calendarEvents: [String] {
        ranges.map { "*-*-* \(Range.clock($0.start)):00" }
    }

    package var description: String { ranges.isEmpty ? "any time" : ranges.map(\.description).joined(separator: ", ") }
}

package struct WindowError: Error, Sendable, Equatable, CustomStringConvertible {
    package var text: String
    package var reason: String
    package var description: String { "'\(text)' \(reason)" }
}
