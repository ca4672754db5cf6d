/// What an app says of itself for the fleet to see: a few short string facts, such as the
/// version it runs (`POST /v1/apps/ID/report`, `drowse report`). Published in the device's
/// retained status under `reports`, so an operator sees a staged update land device by device.
///
/// Small by construction: it rides every status message and the retained message is kept by
/// the broker for each device.
package enum AppReport {
    package static let maxFields = 8
    package static let maxKeyBytes = 32
    package static let maxValueBytes = 128

    /// The fields of a request body: a JSON object of strings (an empty object clears the
    /// report). Keys are lower-case letters, digits, `_`, `-` and `.`.
    package static func fields(_ json: JSON) throws(ReportError) -> [String: String] {
        guard case .object(let members) = json else { throw ReportError("a report is a JSON object of strings") }
        guard members.count <= maxFields else { throw ReportError("a report holds at most \(maxFields) fields") }
        var out: [String: String] = [:]
        for (key, value) in members {
            guard isKey(key) else {
                throw ReportError("report keys are 1 to \(maxKeyBytes) of a-z, 0-9, '_', '-' and '.'")
            }
            guard case .string(let text) = value else { throw ReportError("report field '\(key)' is not a string") }
            guard text.utf8.count <= maxValueBytes else { throw ReportError("report field '\(key)' is over \(maxValueBytes) bytes") }
            guard !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                throw ReportError("report field '\(key)' holds a control character")
            }
            guard out[key] == nil else { throw ReportError("report field '\(key)' appears twice") }
            out[key] = text
        }
        return out
    }

    static func isKey(_ key: String) -> Bool {
        !key.isEmpty && key.utf8.count <= maxKeyBytes
            && key.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x5F || $0 == 0x2D || $0 == 0x2E }
    }

    /// The fields as JSON, keys sorted (one text for the same report).
    package static func json(_ fields: [String: String]) -> JSON { APIWire.Report(fields).json }

    /// A stored or published report read back; what is not a valid report is dropped.
    package static func parse(_ json: JSON?) -> [String: String]? {
        guard let json, let f = try? fields(json) else { return nil }
        return f
    }
}

package struct ReportError: Error, Sendable, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}
