/// A JWS compact serialization (RFC 7515) as Drowse uses it: EdDSA (Ed25519) over a JSON
/// notification payload. Parsing is pure; signing and verifying live in DrowseSystem.
package struct JWS: Sendable, Equatable {
    /// `BASE64URL(header) "." BASE64URL(payload)`: the bytes the signature covers.
    package var signingInput: [UInt8]
    package var header: JSON
    package var payload: [UInt8]
    package var signature: [UInt8]

    package enum Refusal: Error, Equatable, CustomStringConvertible {
        case notCompact
        case badEncoding(String)
        case badHeader(String)

        package var description: String {
            switch self {
            case .notCompact: "not a JWS compact serialization"
            case .badEncoding(let part): "JWS \(part) is not base64url"
            case .badHeader(let why): "JWS header \(why)"
            }
        }
    }

    /// Whether raw bytes look like a compact JWS rather than JSON (three base64url parts).
    package static func looksCompact(_ bytes: [UInt8]) -> Bool {
        guard let first = bytes.first, first != UInt8(ascii: "{"), first != UInt8(ascii: "[") else { return false }
        return bytes.filter { $0 == UInt8(ascii: ".") }.count == 2
    }

    package static func parse(_ bytes: [UInt8]) throws(Refusal) -> JWS {
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .notCompact }
        func decode(_ part: ArraySlice<UInt8>, _ name: String) throws(Refusal) -> [UInt8] {
            guard part.allSatisfy({ c in
                (0x41...0x5A).contains(c) || (0x61...0x7A).contains(c) || (0x30...0x39).contains(c) || c == 0x2D || c == 0x5F
            }), let out = Base64.decode(String(decoding: part, as: UTF8.self)) else { throw .badEncoding(name) }
            return out
        }
        let headerBytes = try decode(parts[0], "header")
        let payload = try decode(parts[1], "payload")
        let signature = try decode(parts[2], "signature")
        let header: JSON
        do { header = try JSON.parse(bytes: headerBytes, maxDepth: 4) } catch { throw .badHeader("is not JSON") }
        guard header["alg"]?.stringValue == "EdDSA" else { throw .badHeader("must have \"alg\": \"EdDSA\"") }
        if header["crit"] != nil { throw .badHeader("has critical extensions Drowse does not know") }
        return JWS(signingInput: Array(parts[0]) + [UInt8(ascii: ".")] + Array(parts[1]), header: header, payload: payload, signature: signature)
    }

    /// The signing input for `payload` with Drowse's header; append "." and the base64url signature.
    package static func signingInput(payload: [UInt8]) -> String {
        let header = Base64.encode(Array(#"{"alg":"EdDSA","typ":"JWT"}"#.utf8), urlSafe: true, padding: false)
        return header + "." + Base64.encode(payload, urlSafe: true, padding: false)
    }
}
