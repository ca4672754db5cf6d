#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one HTTP/1.1 client over drowsed's Unix socket, used by the CLI (`UnixHTTPClient`) and
/// DrowseKit: blocking calls, one request per connection (`Connection: close`). Only ever called
/// on a thread that may block (the CLI's main thread, DrowseKit's own threads), never on a task.
package enum UnixHTTP {
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package enum Kind: Sendable, Equatable {
            /// The socket could not be reached (errno: ENOENT, ECONNREFUSED, …).
            case connect(errno: Int32)
            /// Any other failure of the socket: creating it, sending, receiving.
            case transport
            /// No answer within the timeout.
            case timedOut
            /// The bytes that came back are not an HTTP/1.1 response (or one too big).
            case malformed
        }
        package var kind: Kind
        package var message: String
        package var description: String { message }

        package init(_ kind: Kind, _ message: String) {
            self.kind = kind
            self.message = message
        }

        static func transport(_ message: String) -> Failure { Failure(.transport, message) }
        package static func malformed(_ message: String) -> Failure { Failure(.malformed, message) }
    }

    package struct Response: Sendable {
        package var status: Int
        /// Header names in lower case.
        package var headers: [(String, String)]
        package var body: [UInt8]
    }

    static func errorText(_ e: Int32) -> String { String(cString: strerror(e)) }

    /// A connected stream socket (close-on-exec), or why not.
    package static func connect(_ path: String) throws(Failure) -> Int32 {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { throw .transport("socket path too long: \(path)") }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
            raw[bytes.count] = 0
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { let saved = errno; throw .transport("socket: \(errorText(saved))") }
        do {
            try Sys.posix("connect") {
                Int(withUnsafePointer(to: &addr) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                })
            }
        } catch {
            Sys.close(fd, ignoringErrors: .afterError)
            throw Failure(.connect(errno: error.errno), "cannot connect to \(path): \(errorText(error.errno))")
        }
        return fd
    }

    package static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws(Failure) {
        var off = 0
        while off < bytes.count {
            let n: Int
            do {
                n = try Sys.posix("send") { bytes.withUnsafeBytes { send(fd, $0.baseAddress! + off, $0.count - off, Int32(MSG_NOSIGNAL)) } }
            } catch { throw .transport("send: \(errorText(error.errno))") }
            off += n
        }
    }

    /// Some bytes into `buf`; 0 at the end of the stream.
    package static func receive(_ fd: Int32, into buf: inout [UInt8]) throws(Failure) -> Int {
        do {
            return try Sys.posix("recv") { buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) } }
        } catch {
            if error.errno == EAGAIN || error.errno == EWOULDBLOCK { throw Failure(.timedOut, "timed out waiting for drowsed") }
            throw .transport("recv: \(errorText(error.errno))")
        }
    }

    /// A request's bytes: head (Host: drowse, Connection: close) and body.
    package static func requestBytes(method: String, target: String, body: [UInt8]?, contentType: String = "application/json",
                                     accept: String = "application/json") -> [UInt8] {
        let payload = body ?? []
        var head = "\(method) \(target) HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\nAccept: \(accept)\r\n"
        if body != nil { head += "Content-Type: \(contentType)\r\n" }
        head += "Content-Length: \(payload.count)\r\n\r\n"
        return Array(head.utf8) + payload
    }

    /// One request on its own connection. `timeout` > 0: seconds to wait for each piece of the
    /// answer. `maxBody`: a longer answer is refused (malformed).
    package static func request(socket path: String, method: String, target: String, body: [UInt8]? = nil,
                                contentType: String = "application/json", accept: String = "application/json",
                                timeout: Double = 0, maxBody: Int = .max) throws(Failure) -> Response {
        let fd = try connect(path)
        defer { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        if timeout > 0 {
            do { try Sys.setReceiveTimeout(fd, seconds: timeout) } catch { throw .transport(error.description) }
        }
        try sendAll(fd, requestBytes(method: method, target: target, body: body, contentType: contentType, accept: accept))
        var decoder = HTTPResponseDecoder()
        var answer: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while !decoder.isComplete {
            let n = try receive(fd, into: &buf)
            if n == 0 { try decoder.closed(); break }
            answer += try decoder.feed(buf[0..<n])
            guard answer.count <= maxBody else { throw .malformed("answer over \(maxBody / (1024 * 1024)) MiB") }
        }
        return Response(status: decoder.status ?? 0, headers: decoder.headers, body: answer)
    }
}
