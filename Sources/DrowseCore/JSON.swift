/// A JSON value. Drowse parses and prints JSON itself so that `DrowseCore` needs no
/// Foundation, parsing is strict (RFC 8259, bounded depth) and output is deterministic.
package enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSON])
    case object([(String, JSON)])

    package static func == (lhs: JSON, rhs: JSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.number(a), .number(b)): return a == b
        case let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    /// The value under `key` when this is an object (the last one when a key repeats).
    package subscript(key: String) -> JSON? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.0 == key })?.1
    }

    package var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    package var doubleValue: Double? { if case .number(let n) = self { return n }; return nil }
    package var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    package var arrayValue: [JSON]? { if case .array(let a) = self { return a }; return nil }
    package var isNull: Bool { if case .null = self { return true }; return false }
    package var intValue: Int? {
        guard case .number(let n) = self, n.rounded() == n, abs(n) < 9.0e15 else { return nil }
        return Int(n)
    }
    package var int64Value: Int64? { intValue.map(Int64.init) }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    package init(stringLiteral value: String) { self = .string(value) }
    package init(integerLiteral value: Int) { self = .number(Double(value)) }
    package init(floatLiteral value: Double) { self = .number(value) }
    package init(booleanLiteral value: Bool) { self = .bool(value) }
    package init(arrayLiteral elements: JSON...) { self = .array(elements) }
    package init(dictionaryLiteral elements: (String, JSON)...) { self = .object(elements) }
    package init(nilLiteral: ()) { self = .null }
}

extension JSON {
    package init(_ s: String?) { self = s.map { .string($0) } ?? .null }
    package init(_ n: Int?) { self = n.map { .number(Double($0)) } ?? .null }
    package init(_ n: Int64?) { self = n.map { .number(Double($0)) } ?? .null }
    package init(_ n: Double?) { self = n.map { .number($0) } ?? .null }
    package init(_ b: Bool?) { self = b.map { .bool($0) } ?? .null }
}
