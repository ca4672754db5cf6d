import Testing
import DrowseCore
@testable import DrowseSystem

@Suite("Ed25519")
struct Ed25519Tests {
    @Test("RFC 8032 test vector 1 signs and verifies")
    func rfc8032() throws {
        func hex(_ s: String) -> [UInt8] {
            var out: [UInt8] = []
            var it = s.makeIterator()
            while let a = it.next(), let b = it.next() { out.append(UInt8(String([a, b]), radix: 16)!) }
            return out
        }
        let priv = hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
        let pub = hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        let sig = hex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
        #expect(Ed25519.sign([], privateKey: priv) == sig)
        #expect(Ed25519.verify(sig, of: [], publicKey: pub))
    }

    @Test("a generated pair verifies its own signatures and nothing else")
    func roundTrip() throws {
        let (priv, pub) = try #require(Ed25519.generate())
        let (_, otherPub) = try #require(Ed25519.generate())
        let msg = Array("header.payload".utf8)
        let sig = try #require(Ed25519.sign(msg, privateKey: priv))
        #expect(Ed25519.verify(sig, of: msg, publicKey: pub))
        #expect(!Ed25519.verify(sig, of: Array("header.payloaD".utf8), publicKey: pub))
        #expect(!Ed25519.verify(sig, of: msg, publicKey: otherPub))
        var bad = sig
        bad[0] ^= 1
        #expect(!Ed25519.verify(bad, of: msg, publicKey: pub))
        #expect(!Ed25519.verify(Array(sig.prefix(63)), of: msg, publicKey: pub))
    }
}
