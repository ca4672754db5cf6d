/// A TOML value, as far as Drowse's config files need TOML: tables, strings, integers,
/// floats, booleans, arrays, inline tables and arrays of tables (`[[app]]`). Each value
/// remembers its line for errors.
package indirect enum TOMLValue: Sendable, Equatable {
    case string(String)
    case integer(Int)
    case float(Double)
    case bool(Bool)
    case array([TOMLValue])
    case table(TOMLTable)

    package var typeName: String {
        switch self {
        case .string: "a string"
        case .integer: "an integer"
        case .float: "a number"
        case .bool: "a boolean"
        case .array: "an array"
        case .table: "a table"
        }
    }
}

/// A TOML table with its keys in file order.
package struct TOMLTable: Sendable, Equatable {
    package private(set) var keys: [String] = []
    private var values: [String: TOMLValue] = [:]
    private var lines: [String: Int] = [:]

    package init() {}

    package subscript(key: String) -> TOMLValue? { values[key] }
    package func line(of key: String) -> Int? { lines[key] }
    /// The line of the `[[name]]` header that opened this table, when it is an element of an
    /// array of tables (so an error about a missing key can point at the element).
    package internal(set) var headerLine: Int?

    mutating func set(_ key: String, _ value: TOMLValue, line: Int) {
        if values[key] == nil { keys.append(key) }
        values[key] = value
        lines[key] = line
    }

    /// Changes the value under an existing `key` in place. The value is moved out first and a
    /// placeholder left behind, so `body` holds the only reference to the tables and arrays
    /// inside it: changing them copies nothing. (Changing a copy made 100k keys under one
    /// header cost 100k² copies, minutes for a 1 MiB file.)
    mutating func modify<R>(_ key: String, _ body: (inout TOMLValue) throws(TOMLParseError) -> R) throws(TOMLParseError) -> R {
        guard var value = values.removeValue(forKey: key) else { preconditionFailure("modify(\(key)): no such key") }
        defer { values[key] = value }
        return try body(&value)
    }
}

extension TOMLValue {
    /// Left in a table while its value is being changed elsewhere (see `TOMLTable.modify`).
    static let placeholder = TOMLValue.bool(false)

    /// Moves the table out of `self`, leaving a placeholder, so the caller owns it uniquely.
    mutating func takeTable() -> TOMLTable? {
        guard case .table(let t) = self else { return nil }
        self = .placeholder
        return t
    }

    /// Moves the array out of `self`, leaving a placeholder, so the caller owns it uniquely.
    mutating func takeArray() -> [TOMLValue]? {
        guard case .array(let a) = self else { return nil }
        self = .placeholder
        return a
    }
}
