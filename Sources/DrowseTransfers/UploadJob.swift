import DrowseCore
import DrowseSystem

/// What the engine needs to run (or resume) one upload.
public struct UploadJob: Sendable {
    public var id: String
    public var url: String
    public var sourcePath: String
    public var total: Int64
    public var protocolName: UploadProtocol
    /// The server-side upload resource from an earlier attempt: resuming asks it for the offset.
    public var resource: String?
    /// The API caller who asked: the source is opened as that user on every attempt, so a
    /// file swapped for a symlink to something only root can read is refused by the kernel.
    public var identity: FileIdentity?
    /// The file's media type; nil: application/octet-stream.
    public var contentType: String?

    public init(id: String, url: String, sourcePath: String, total: Int64, protocolName: UploadProtocol, resource: String?,
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
