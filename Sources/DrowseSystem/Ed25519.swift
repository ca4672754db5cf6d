import CCrypto

/// Ed25519 from the OpenSSL libcrypto that libcurl already loads (no second crypto library).
package enum Ed25519 {
    /// A new key pair: (32-byte private seed, 32-byte public key).
    package static func generate() -> (privateKey: [UInt8], publicKey: [UInt8])? {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil) else { return nil }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_keygen(ctx, &key) == 1, let key else { return nil }
        defer { EVP_PKEY_free(key) }
        var priv = [UInt8](repeating: 0, count: 32), pub = [UInt8](repeating: 0, count: 32)
        var n1 = 32, n2 = 32
        guard EVP_PKEY_get_raw_private_key(key, &priv, &n1) == 1, EVP_PKEY_get_raw_public_key(key, &pub, &n2) == 1 else { return nil }
        return (priv, pub)
    }

    package static func sign(_ message: [UInt8], privateKey: [UInt8]) -> [UInt8]? {
        guard privateKey.count == 32, let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, privateKey, 32) else { return nil }
        defer { EVP_PKEY_free(key) }
        guard let md = EVP_MD_CTX_new() else { return nil }
        defer { EVP_MD_CTX_free(md) }
        var sig = [UInt8](repeating: 0, count: 64)
        var len = 64
        guard EVP_DigestSignInit(md, nil, nil, nil, key) == 1, EVP_DigestSign(md, &sig, &len, message, message.count) == 1 else { return nil }
        return Array(sig.prefix(len))
    }

    package static func verify(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard publicKey.count == 32, signature.count == 64,
            let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, publicKey, 32) else { return false }
        defer { EVP_PKEY_free(key) }
        guard let md = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(md) }
        guard EVP_DigestVerifyInit(md, nil, nil, nil, key) == 1 else { return false }
        return EVP_DigestVerify(md, signature, signature.count, message, message.count) == 1
    }
}
