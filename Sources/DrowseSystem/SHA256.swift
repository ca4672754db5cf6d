#if canImport(Glibc)
import Glibc
#endif
import CCrypto

/// Incremental SHA-256 from the OpenSSL libcrypto that libcurl already loads.
package struct SHA256Hasher: ~Copyable {
    private let ctx: OpaquePointer

    package init() {
        ctx = EVP_MD_CTX_new()
        EVP_DigestInit_ex(ctx, EVP_sha256(), nil)
    }

    deinit { EVP_MD_CTX_free(ctx) }

    package mutating func update(_ buffer: UnsafeRawBufferPointer) {
        if buffer.count > 0 { EVP_DigestUpdate(ctx, buffer.baseAddress, buffer.count) }
    }

    package mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    package consuming func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        EVP_DigestFinal_ex(ctx, &out, &len)
        return out
    }

    package static func hex(_ digest: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var s: [UInt8] = []
        for b in digest { s.append(digits[Int(b >> 4)]); s.append(digits[Int(b & 15)]) }
        return String(decoding: s, as: UTF8.self)
    }

    /// The hex SHA-256 of some bytes.
    package static func hexDigest(of bytes: [UInt8]) -> String {
        var h = SHA256Hasher()
        h.update(bytes)
        return hex(h.finalize())
    }

    /// The hex SHA-256 of a file, read in 1 MiB blocks.
    /// With `who`, the file is opened as that user (FileIdentity); never through a symlink at
    /// the last component, and only a regular file.
    package static func hexDigest(ofFile path: String, as who: FileIdentity? = nil) throws(SystemError) -> String {
        let (fd, _) = try FileIdentity.openRegularForReading(path, as: who)
        defer { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        var h = SHA256Hasher()
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = try Sys.read(fd, into: &buf, "read \(path)") ?? 0
            if n == 0 { break }
            buf.withUnsafeBytes { h.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        return hex(h.finalize())
    }
}
