import CDrowseSys

/// The resident code of the shared libraries a burst of work brought in, given back when the
/// work is over. After a transfer, libcurl and what it loaded (OpenSSL's libssl, GnuTLS,
/// Kerberos, LDAP, libssh2, ...) stay mapped, and OpenSSL's start-up touched much of
/// libcrypto: measured one minute after a 4 MiB download, 6.5 MiB more resident than an idle
/// daemon's, nearly all of it the read-only pages of those libraries, which only the next
/// transfer needs. They are the files' bytes: the kernel keeps them in the page cache while
/// memory allows, and the next user faults back the pages it runs.
package enum LibraryCode {
    /// Drops the resident pages of every shared library's code and constants from this process
    /// (`drowse_release_library_code`). Returns the bytes advised, or nil when the page size
    /// is unknown.
    package static func release() -> Int? {
        let bytes = drowse_release_library_code()
        return bytes < 0 ? nil : bytes
    }

    /// The same, and the program's own code and constants: what a burst of work touched of
    /// drowse's binary (an API request alone brings back about 6 MiB of it) is given back too
    /// (`CodeRelease` in DrowseAgent, after a quiet spell).
    package static func releaseWithProgram() -> Int? {
        let bytes = drowse_release_code(1)
        return bytes < 0 ? nil : bytes
    }
}
