import Testing
@testable import DrowseCore

@Suite("JWS")
struct JWSTests {
    static func compact(header: String, payload: String, signature: [UInt8] = Array(repeating: 7, count: 64)) -> [UInt8] {
        let h = Base64.encode(Array(header.utf8), urlSafe: true, padding: false)
        let p = Base64.encode(Array(payload.utf8), urlSafe: true, padding: false)
        return Array((h + "." + p + "." + Base64.encode(signature, urlSafe: true, padding: false)).utf8)
    }

    @Test("a compact EdDSA JWS parses into header, payload, signature and signing input")
    func parses() throws {
        let bytes = Self.compact(header: #"{"alg":"EdDSA"}"#, payload: #"{"aps":{"content-available":1}}"#)
        #expect(JWS.looksCompact(bytes))
        let jws = try JWS.parse(bytes)
        #expect(String(decoding: jws.payload, as: UTF8.self) == #"{"aps":{"content-available":1}}"#)
        #expect(jws.signature == Array(repeating: 7, count: 64))
        let firstTwo = String(decoding: bytes, as: UTF8.self).split(separator: ".").prefix(2).joined(separator: ".")
        #expect(jws.signingInput == Array(firstTwo.utf8))
    }

    @Test("JSON payloads are not taken for a JWS")
    func jsonIsNotCompact() {
        #expect(!JWS.looksCompact(Array(#"{"a":"x.y.z"}"#.utf8)))
        #expect(!JWS.looksCompact(Array("[1.5, 2.5]".utf8)))
    }

    @Test("other algorithms, critical extensions, bad encodings and wrong part counts are refused")
    func refusals() {
        #expect(throws: JWS.Refusal.badHeader("must have \"alg\": \"EdDSA\"")) {
            try JWS.parse(Self.compact(header: #"{"alg":"none"}"#, payload: "{}"))
        }
        #expect(throws: JWS.Refusal.badHeader("must have \"alg\": \"EdDSA\"")) {
            try JWS.parse(Self.compact(header: #"{"alg":"HS256"}"#, payload: "{}"))
        }
        #expect(throws: JWS.Refusal.badHeader("has critical extensions Drowse does not know")) {
            try JWS.parse(Self.compact(header: #"{"alg":"EdDSA","crit":["x"]}"#, payload: "{}"))
        }
        #expect(throws: JWS.Refusal.notCompact) { try JWS.parse(Array("a.b".utf8)) }
        #expect(throws: JWS.Refusal.badEncoding("payload")) { try JWS.parse(Array("eyJhbGciOiJFZERTQSJ9.a+b.c".utf8)) }
        #expect(throws: JWS.Refusal.badHeader("is not JSON")) { try JWS.parse(Self.compact(header: "nope", payload: "{}")) }
    }

    @Test("the signing input Drowse produces carries an EdDSA header")
    func signingInput() throws {
        let input = JWS.signingInput(payload: Array("{}".utf8))
        let jws = try JWS.parse(Array((input + ".AAAA").utf8))
        #expect(jws.header["alg"]?.stringValue == "EdDSA")
        #expect(jws.payload == Array("{}".utf8))
    }
}
