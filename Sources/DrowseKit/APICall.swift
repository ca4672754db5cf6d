import DrowseCore
import DrowsePOSIX

/// One request/response call to drowsed's API, on the shared client (`UnixHTTP`, DrowsePOSIX).
/// Blocking: run on a `KitThread`.
enum APICall {
    /// The answer's JSON when the status is 2xx; otherwise the API's error.
    static func json(socket path: String, method: String, target: String, body: JSON?, timeout: Double) throws(DrowseError) -> JSON {
        let r: UnixHTTP.Response
        do {
            r = try UnixHTTP.request(socket: path, method: method, target: target, body: body.map { Array($0.serialized.utf8) },
                                     timeout: timeout, maxBody: 16 * 1024 * 1024)
        } catch { throw DrowseError(error) }
        guard (200..<300).contains(r.status) else { throw DrowseError.answer(status: r.status, body: r.body) }
        do { return try JSON.parse(bytes: r.body) } catch { throw .malformed("answer is not JSON: \(error.description)") }
    }
}

extension DrowseError {
    /// The client's failure as the library reports it: `protocol` for bytes that are not a
    /// response, `connect` for the rest.
    init(_ failure: UnixHTTP.Failure) {
        self = failure.kind == .malformed ? .malformed(failure.message) : .transport(failure.message)
    }
}
