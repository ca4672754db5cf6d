import DrowseCore

/// What the engine needs to run (or resume) one upload.
public struct UploadJob: Sendable {
    public var id: String
    public var url: String
    public var sourcePath: String
    public var total: Int64
    public var protocolName: UploadProtocol
    /// The server-side upload resource from an earlier attempt: resuming asks it for the offset.
    public var resource: String?

    public init(id: String, url: String, sourcePath: String, total: Int64, protocolName: UploadProtocol, resource: String?) {
        self.id = id
        self.url = url
        self.sourcePath = sourcePath
        self.total = total
        self.protocolName = protocolName
        self.resource = resource
    }
}
