import DrowseCore

/// A JSON value as DrowseKit hands it out: a notification's payload, a transfer or a whole event
/// line. Object members keep the order they had on the wire.
public enum DrowseJSON: Sendable, Equatable, CustomStringConvertible {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([DrowseJSON])
    case object([(String, DrowseJSON)])

    public static func == (lhs: DrowseJSON, rhs: DrowseJSON) -> Bool { lhs.core == rhs.core }

    /// The value under `key` when this is an object (the last one when a key repeats).
    public subscript(key: String) -> DrowseJSON? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.0 == key })?.1
    }

    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    public var doubleValue: Double? { if case .number(let n) = self { return n }; return nil }
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var arrayValue: [DrowseJSON]? { if case .array(let a) = self { return a }; return nil }
    public var intValue: Int? {
        guard case .number(let n) = self, n.rounded() == n, abs(n) < 9.0e15 else { return nil }
        return Int(n)
    }
    public var isNull: Bool { if case .null = self { return true }; return false }

    /// Compact JSON text.
    public var description: String { core.serialized }

    /// Parses one JSON text; nil when it is not valid JSON.
    public init?(parsing text: String) {
        guard let j = try? JSON.parse(text) else { return nil }
        self.init(j)
    }

    init(_ j: JSON) {
        switch j {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .number(let n): self = .number(n)
        case .string(let s): self = .string(s)
        case .array(let a): self = .array(a.map(DrowseJSON.init))
        case .object(let m): self = .object(m.map { ($0.0, DrowseJSON($0.1)) })
        }
    }

    var core: JSON {
        switch self {
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .number(let n): return .number(n)
        case .string(let s): return .string(s)
        case .array(let a): return .array(a.map(\.core))
        case .object(let m): return .object(m.map { ($0.0, $0.1.core) })
        }
    }
}
