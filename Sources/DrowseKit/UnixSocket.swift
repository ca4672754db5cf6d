#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import DrowseCore

/// Blocking I/O on the Unix socket of drowsed's API. Only ever called on threads of its own
/// (`KitThread`), never on a Swift task.
enum UnixSocket {
    static func errorText(_ e: Int32 = errno) -> String { String(cString: strerror(e)) }

    /// A connected stream socket, or why not.
    static func connect(_ path: String) throws(DrowseError) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .transport("socket: \(errorText())") }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            close(fd)
            throw .transport("socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
            raw[bytes.count] = 0
        }
        while true {
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            if rc == 0 { return fd }
            let e = errno
            if e == EINTR { continue }
            close(fd)
            throw .transport("cannot connect to \(path): \(errorText(e))")
        }
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws(DrowseError) {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + off, $0.count - off, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .transport("send: \(errorText())")
            }
            off += n
        }
    }

    /// Some bytes; empty at the end of the stream.
    static func receive(_ fd: Int32, into buf: inout [UInt8]) throws(DrowseError) -> Int {
        while true {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n >= 0 { return n }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { throw .transport("timed out waiting for drowsed") }
            throw .transport("recv: \(errorText())")
        }
    }

    static func requestBytes(method: String, target: String, body: JSON?, accept: String = "application/json") -> [UInt8] {
        let payload = body.map { Array($0.serialized.utf8) } ?? []
        var head = "\(method) \(target) HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\nAccept: \(accept)\r\n"
        if body != nil { head += "Content-Type: application/json\r\n" }
        head += "Content-Length: \(payload.count)\r\n\r\n"
        return Array(head.utf8) + payload
    }

    /// One request on its own connection; the answer's JSON when the status is 2xx.
    static func call(socket path: String, method: String, target: String, body: JSON?, timeout: Double) throws(DrowseError) -> JSON {
        let fd = try connect(path)
        defer { close(fd) }
        if timeout > 0 {
            var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - Double(Int(timeout))) * 1e6))
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        }
        try sendAll(fd, requestBytes(method: method, target: target, body: body))
        var decoder = HTTPResponseDecoder()
        var body: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 16384)
        while !decoder.isComplete {
            let n = try receive(fd, into: &buf)
            if n == 0 { try decoder.closed(); break }
            body += try decoder.feed(buf[0..<n])
            guard body.count <= 16 * 1024 * 1024 else { throw .malformed("answer over 16 MiB") }
        }
        let status = decoder.status ?? 0
        guard (200..<300).contains(status) else { throw DrowseError.answer(status: status, body: body) }
        do { return try JSON.parse(bytes: body) } catch { throw .malformed("answer is not JSON: \(error.description)") }
    }
}

/// A plain OS thread per blocking job, so Swift's cooperative pool never waits on a socket.
enum KitThread {
    private final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    static func detach(_ body: @escaping @Sendable () -> Void) {
        let arg = Unmanaged.passRetained(Box(body)).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, arg)
        precondition(rc == 0, "pthread_create failed: \(rc)")
        pthread_detach(tid)
    }

    /// Runs `work` on a thread of its own and resumes with its result.
    static func run<T: Sendable>(_ work: @escaping @Sendable () throws(DrowseError) -> T) async throws(DrowseError) -> T {
        let r: Result<T, DrowseError> = await withCheckedContinuation { (c: CheckedContinuation<Result<T, DrowseError>, Never>) in
            detach {
                do throws(DrowseError) { c.resume(returning: .success(try work())) } catch { c.resume(returning: .failure(error)) }
            }
        }
        return try r.get()
    }
}

/// A pipe whose read end a thread polls, with a socket or alone, to be woken at once.
final class WakePipe: Sendable {
    let readFD: Int32
    let writeFD: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        let rc = pipe(&fds)
        precondition(rc == 0, "pipe failed: \(errno)")
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        readFD = fds[0]
        writeFD = fds[1]
    }

    deinit {
        close(readFD)
        close(writeFD)
    }

    func signal() {
        var b: UInt8 = 1
        _ = write(writeFD, &b, 1)  // EAGAIN: the pipe is full of wake-ups already
    }

    /// Sleeps up to `seconds`; true when woken by `signal()` (the wake-up stays pending).
    func sleep(_ seconds: Double) -> Bool {
        var p = pollfd(fd: readFD, events: Int16(POLLIN), revents: 0)
        let end = monotonicNow() + seconds
        while true {
            let left = end - monotonicNow()
            if left <= 0 { return false }
            let rc = poll(&p, 1, Int32((left * 1000).rounded(.up)))
            if rc > 0 { return true }
            if rc < 0 && errno != EINTR { return false }
        }
    }
}

func monotonicNow() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}
