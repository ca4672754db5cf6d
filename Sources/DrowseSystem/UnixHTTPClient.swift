#if canImport(Glibc)
import Glibc
#endif
import DrowseCore

/// A minimal blocking HTTP/1.1 client over a Unix socket, for the CLI: one request per
/// connection (`Connection: close`), JSON in and out.
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
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { throw Failure(description: "socket path too long: \(path)") }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
            raw[bytes.count] = 0
        }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else {
            let e = errno
            let hint = e == ENOENT || e == ECONNREFUSED ? " (is drowsed running?)" : ""
            throw Failure(description: "cannot connect to \(path): \(String(cString: strerror(e)))\(hint)")
        }
        if timeout > 0 {
            var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - Double(Int(timeout))) * 1e6))
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        }
        let payload = body.map { Array($0.serialized.utf8) } ?? []
        var head = "\(method) \(target) HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\nAccept: application/json\r\n"
        if body != nil { head += "Content-Type: application/json\r\n" }
        head += "Content-Length: \(payload.count)\r\n\r\n"
        let out = Array(head.utf8) + payload
        var off = 0
        while off < out.count {
            let n = out.withUnsafeBytes { send(fd, $0.baseAddress! + off, $0.count - off, Int32(MSG_NOSIGNAL)) }
            if n < 0 { if errno == EINTR { continue }; throw Failure(description: "send: \(String(cString: strerror(errno)))") }
            off += n
        }
        var data: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { throw Failure(description: "timed out waiting for drowsed") }
                throw Failure(description: "recv: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            data.append(contentsOf: buf[0..<n])
        }
        guard let sep = find(data, [13, 10, 13, 10]) else { throw Failure(description: "malformed response from drowsed") }
        let headText = String(decoding: data[..<sep], as: UTF8.self)
        let statusLine = headText.split(separator: "\r\n").first ?? ""
        let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0
        return Response(status: status, body: Array(data[(sep + 4)...]))
    }

    static func find(_ hay: [UInt8], _ needle: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        for i in 0...(hay.count - needle.count) where hay[i] == needle[0] && Array(hay[i..<i + needle.count]) == needle {
            return i
        }
        return nil
    }
}
