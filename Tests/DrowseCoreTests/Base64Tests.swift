import DrowseCore
import Testing

@Suite("Base64")
struct Base64Tests {
    static let rfc4648: [(String, String)] = [
        ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ]

    @Test("encodes the RFC 4648 test vectors", arguments: rfc4648)
    func encodesVectors(plain: String, encoded: String) {
        #expect(Base64.encode(Array(plain.utf8)) == encoded)
    }

    @Test("decodes the RFC 4648 test vectors, padded or not", arguments: rfc4648)
    func decodesVectors(plain: String, encoded: String) {
        #expect(Base64.decode(encoded) == Array(plain.utf8))
        let unpadded = encoded.replacingOccurrences("=", with: "")
        #expect(Base64.decode(unpadded) == Array(plain.utf8))
    }

    @Test("the URL-safe alphabet uses '-' and '_', and padding can be left off")
    func urlSafe() {
        let bytes: [UInt8] = [0xFB, 0xFF, 0xBF]
        #expect(Base64.encode(bytes) == "+/+/")
        #expect(Base64.encode(bytes, urlSafe: true) == "-_-_")
        #expect(Base64.encode([0xFB, 0xFF]) == "+/8=")
        #expect(Base64.encode([0xFB, 0xFF], urlSafe: true, padding: false) == "-_8")
        #expect(Base64.encode([0xFB], padding: false) == "+w")
        #expect(Base64.decode("-_-_") == bytes)
        #expect(Base64.decode("+/+/") == bytes)
        #expect(Base64.decode("-_8") == [0xFB, 0xFF])
    }

    @Test("ignores line breaks and spaces")
    func whitespace() {
        #expect(Base64.decode("Zm9v\nYmFy\r\n") == Array("foobar".utf8))
        #expect(Base64.decode(" Zm9v YmFy ") == Array("foobar".utf8))
    }

    @Test("refuses characters outside both alphabets", arguments: ["Zm9v!", "Zm9v\t", "Zm.v", "Zm9v\u{0}", "Zm9vé", "Zm9v*"])
    func refusesBadCharacters(text: String) {
        #expect(Base64.decode(text) == nil)
    }

    @Test("refuses a length that cannot come from any byte string")
    func refusesImpossibleLength() {
        #expect(Base64.decode("Z") == nil)
        #expect(Base64.decode("Zm9vY") == nil)
        #expect(Base64.decode("Z===") == nil)
    }

    @Test("round-trips every length and every byte value", arguments: [false, true])
    func roundTrip(urlSafe: Bool) {
        let all = (0...255).map { UInt8($0) }
        for n in 0...70 {
            let bytes = Array(all.shuffled().prefix(n)) + Array(repeating: UInt8(n), count: n % 3)
            for padding in [true, false] {
                let text = Base64.encode(bytes, urlSafe: urlSafe, padding: padding)
                #expect(Base64.decode(text) == bytes)
                #expect(padding || !text.contains("="))
                #expect(!padding || text.utf8.count % 4 == 0)
            }
        }
        #expect(Base64.decode(Base64.encode(all, urlSafe: urlSafe)) == all)
    }

    @Test("a 32-byte Ed25519 public key is 44 characters with one pad")
    func publicKeyLength() {
        let key = [UInt8](repeating: 0xAB, count: 32)
        let text = Base64.encode(key)
        #expect(text.count == 44)
        #expect(text.hasSuffix("="))
        #expect(Base64.decode(text)?.count == 32)
    }
}
