import DrowseCore
import DrowseSystem

/// What the engine needs to run (or resume) one upload.
package struct UploadJob: Sendable {
    package var id: String
    package var url: String
    package var sourcePath: String
    package var total: Int64
    package var protocolName: UploadProtocol
    /// The server-side upload resource from an earlier attempt: resuming asks it for the offset.
    package var resource: String?
    /// The API caller who asked: the source is opened as that user on every attempt, so a
    /// file swapped for a symlink to something only root can read is refused by the kernel.
    package var identity: FileIdentity?
    /// The file's media type; nil: application/octet-stream.
    package var contentType: String?

    package init(id: String, url: String, sourcePath: String, total: Int64, protocolName: UploadProtocol, resource: String?,
                identity: FileIdentity? = nil, contentType: String? = nil) {
        self.id = id
        self.url = url
        self.sourcePath = sourcePath
        self.total = total
        self.protocolName = protocolName
        self.resource = resource
        self.identity = identity
        self.contentType = contentType
    }
}
