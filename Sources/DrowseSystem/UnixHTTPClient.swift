#if canImport(Glibc)
import Glibc
#endif
import DrowseCore

/// The CLI's side of `UnixHTTP` (DrowsePOSIX): JSON in and out, errors worded for a terminal.
package enum UnixHTTPClient {
    package struct Response: Sendable {
        package var status: Int
        package var body: [UInt8]
        package var json: JSON? { try? JSON.parse(bytes: body) }
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    package static func request(socket path: String, method: String, path target: String, body: JSON? = nil,
                               timeout: Double = 0) throws(Failure) -> Response {
        do {
            let r = try UnixHTTP.request(socket: path, method: method, target: target, body: body.map { Array($0.serialized.utf8) },
                                         timeout: timeout)
            return Response(status: r.status, body: r.body)
        } catch {
            switch error.kind {
            case .connect(let e) where e == ENOENT || e == ECONNREFUSED:
                throw Failure(description: error.message + " (is drowsed running?)")
            case .malformed:
                throw Failure(description: "malformed response from drowsed: \(error.message)")
            default:
                throw Failure(description: error.message)
            }
        }
    }
}
