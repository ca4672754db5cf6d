import ArgumentParser
import DrowseCore
import DrowseSystem

/// `drowse payload PATH…`: a field of the JSON on standard input, for shell handlers that have no
/// jq: `drowse payload data.url < "$payload_file"`, or in a notification handler, whose payload
/// arrives on standard input, `url=$(drowse payload data.url)`.
struct Payload: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print fields of the JSON on standard input (a handler's payload), one per line.",
        discussion: """
            A PATH is member names and array indexes joined by dots: aps.content-available, data.items.0.url. \
            A string prints as its text, a number, true, false or null as JSON, an object or an array as \
            one line of JSON. A missing field is an error (exit status 1) unless --default gives its text.
            """)
    /// The most read from standard input: far more than a notification (4 KiB) or a transfers event.
    static let maxInput = 1 << 20

    @Option(help: "Print this when a field is missing, instead of failing.") var `default`: String?
    @Argument(help: "Fields to print.") var paths: [String]

    func run() throws {
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile("/dev/stdin", limit: Self.maxInput + 1) } catch { throw CLIError("standard input: \(error)") }
        guard bytes.count <= Self.maxInput else { throw CLIError("standard input is over \(Self.maxInput) bytes") }
        let document: JSON
        do { document = try JSON.parse(bytes: bytes) } catch { throw CLIError("standard input is not JSON: \(error)") }
        for path in paths {
            if let value = Self.field(path, in: document) {
                Swift.print(Self.text(value))
            } else if let fallback = `default` {
                Swift.print(fallback)
            } else {
                throw CLIError("no field '\(path)' in the payload")
            }
        }
    }

    /// The value at `path` (dot-separated member names and array indexes), if there is one.
    static func field(_ path: String, in document: JSON) -> JSON? {
        var value = document
        for name in path.split(separator: ".", omittingEmptySubsequences: false) {
            switch value {
            case .object:
                guard let next = value[String(name)] else { return nil }
                value = next
            case .array(let items):
                guard let i = Int(name), items.indices.contains(i) else { return nil }
                value = items[i]
            default:
                return nil
            }
        }
        return value
    }

    /// How a value prints: a string as its text (control characters escaped, as every printed
    /// line is), anything else as one line of JSON.
    static func text(_ value: JSON) -> String {
        if case .string(let s) = value { return LogText.escape(s) }
        return value.serialized
    }
}
