import DrowseCore
import DrowseSystem

/// What the engine needs to run (or resume) one download.
package struct DownloadJob: Sendable {
    package var id: String
    package var url: String
    /// Where bytes accumulate until the download is verified.
    package var partPath: String
    /// Where the verified file is renamed to.
    package var finalPath: String
    /// Bytes already committed (data fdatasync'ed, offset recorded). The part file is cut back to this.
    package var resumeFrom: Int64
    package var etag: String?
    package var lastModified: String?
    /// Total size learnt on an earlier attempt.
    package var expectedTotal: Int64?
    package var sha256: String?
    /// The user whose paths these are (a `--to` asked for by an API caller): the part file is
    /// created, reopened and renamed as that user, never by root following the caller's path.
    package var identity: FileIdentity?
    /// Hand the file to this owner (fchown on the open descriptor) before it gets its final
    /// name: an inbox file for the app's user. A chown by path after the rename could be
    /// redirected by a symlink swapped in meanwhile.
    package var owner: (uid: UInt32, gid: UInt32)?

    package init(id: String, url: String, partPath: String, finalPath: String, resumeFrom: Int64, etag: String?,
                lastModified: String?, expectedTotal: Int64?, sha256: String?,
                identity: FileIdentity? = nil, owner: (uid: UInt32, gid: UInt32)? = nil) {
        self.id = id
        self.url = url
        self.partPath = partPath
        self.finalPath = finalPath
        self.resumeFrom = resumeFrom
        self.etag = etag
        self.lastModified = lastModified
        self.expectedTotal = expectedTotal
        self.sha256 = sha256
        self.identity = identity
        self.owner = owner
    }
}

/// What the engine reports to its owner.
package enum TransferEvent: Sendable {
    /// Bytes up to `bytesDone` are on disk (fdatasync'ed): safe to record.
    case committed(id: String, bytesDone: Int64, bytesTotal: Int64?, etag: String?, lastModified: String?)
    /// Live progress for display; not durable.
    case progress(id: String, bytesDone: Int64, bytesTotal: Int64?)
    /// Verified and at its final path.
    case completed(id: String, bytes: Int64, path: String)
    /// An upload's server-side resource now exists (record it before data flows), or
    /// (url nil) `auto` settled on a protocol.
    case uploadResource(id: String, url: String?, protocolName: String)
    /// Upload bytes handed to the network; not yet confirmed by the server. Display only.
    case sent(id: String, bytesSent: Int64)
    case failed(id: String, error: TransferError)
}

/// Why a transfer attempt ended badly, and whether trying again can help.
package struct TransferError: Error, Sendable, Equatable, CustomStringConvertible {
    package var reason: String
    package var transient: Bool
    /// Disk full: wait for space rather than counting a failure.
    package var noSpace: Bool
    /// The server's `Retry-After` (429, 503): the retry waits at least that long.
    package var retryAfter: RetryAfter?

    package init(_ reason: String, transient: Bool, noSpace: Bool = false, retryAfter: RetryAfter? = nil) {
        self.reason = reason
        self.transient = transient
        self.noSpace = noSpace
        self.retryAfter = retryAfter
    }

    package var description: String { reason }
}
