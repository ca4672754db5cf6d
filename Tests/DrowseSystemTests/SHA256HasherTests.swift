import DrowseSystem
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
import DrowseTestSupport
#endif

@Suite("SHA256Hasher")
struct SHA256HasherTests {
    static let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    static let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

    @Test("known vectors (FIPS 180-2)", arguments: [
        ("", empty),
        ("abc", abc),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ])
    func vectors(input: String, digest: String) {
        #expect(SHA256Hasher.hexDigest(of: Array(input.utf8)) == digest)
    }

    @Test("one million 'a' fed in uneven pieces")
    func millionA() {
        var h = SHA256Hasher()
        var left = 1_000_000
        var size = 1
        while left > 0 {
            let n = min(size, left)
            h.update([UInt8](repeating: 0x61, count: n))
            left -= n
            size = size * 3 + 1
        }
        h.update([])  // an empty update changes nothing
        #expect(SHA256Hasher.hex(h.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test("a digest is 32 bytes and hex is lower-case, two digits a byte")
    func hexFormat() {
        var h = SHA256Hasher()
        h.update(Array("abc".utf8))
        let digest = h.finalize()
        #expect(digest.count == 32)
        #expect(SHA256Hasher.hex(digest) == Self.abc)
        #expect(SHA256Hasher.hex([0x00, 0x0f, 0xf0, 0xff]) == "000ff0ff")
        #expect(SHA256Hasher.hex([]) == "")
    }

    @Test("file digests: empty, small, and across the 1 MiB read blocks")
    func fileDigest() async throws {
        try await withTempDir { dir in
            try put("", at: dir + "/empty")
            #expect(try SHA256Hasher.hexDigest(ofFile: dir + "/empty") == Self.empty)
            try put("abc", at: dir + "/abc")
            #expect(try SHA256Hasher.hexDigest(ofFile: dir + "/abc") == Self.abc)

            let big = (0..<(3 << 20) + 12345).map { UInt8(truncatingIfNeeded: $0 ^ ($0 >> 11)) }
            try Data(big).write(to: URL(fileURLWithPath: dir + "/big"))
            #expect(try SHA256Hasher.hexDigest(ofFile: dir + "/big") == SHA256Hasher.hexDigest(of: big))
        }
    }

    @Test("a missing file throws with its errno")
    func missingFile() {
        let error = #expect(throws: SystemError.self) {
            _ = try SHA256Hasher.hexDigest(ofFile: "/nonexistent-drowse/\(UUID().uuidString)")
        }
        #expect(error?.errno == ENOENT)
    }
}
