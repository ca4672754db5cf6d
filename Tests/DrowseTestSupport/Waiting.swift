import Foundation

package struct TimedOut: Error, CustomStringConvertible {
    package var description: String
    package init(description: String) { self.description = description }
}

/// Polls `condition` every 20 ms until it holds or `seconds` pass.
package func waitUntil(_ seconds: Double, _ what: String, _ condition: () -> Bool) async throws {
    let end = Date().addingTimeInterval(seconds)
    while !condition() {
        guard Date() < end else { throw TimedOut(description: "timed out after \(seconds) s waiting for \(what)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}
