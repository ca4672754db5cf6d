#if canImport(Glibc)
import Glibc
#endif
import DrowseSystem
import Testing

/// The lint of the checked system layer (DrowsePOSIX `Sys`): no libc call in Sources/ has its
/// result thrown away. A call from `UncheckedCalls.functions` (or any value-returning function
/// of CDrowseSys) is a finding when it stands as a statement of its own (in a block, after `;`,
/// in `defer { … }`, as a closure statement that is not the closure's value), when `_ =` takes
/// its result, or when a C call's optional result is force-unwrapped; `_ = Sys.noted(…)`,
/// which drops the error the call returned, is one too. Fix a finding with a checked call from
/// `Sys`, or, where ignoring is right, with a helper of `Sys` whose name says why.
///
/// `UNCHECKED_CALLS_ROOT=/path/to/checkout` scans another checkout (to count its findings).
@Suite("unchecked C results")
struct UncheckedCallsTests {
    @Test("no libc result is discarded in Sources/")
    func noneInSources() throws {
        let root = getenv("UNCHECKED_CALLS_ROOT").map { String(cString: $0) } ?? RepoPath.root()
        let header = (try? RepoPath.read(root + "/Sources/CDrowseSys/include/CDrowseSys.h")) ?? ""
        let lint = UncheckedCalls(extraFunctions: UncheckedCalls.valueReturning(inHeader: header))
        var findings: [String] = []
        for file in RepoPath.swiftFiles(under: root + "/Sources") {
            let relative = String(file.dropFirst(root.count + 1))
            let source = try RepoPath.read(file)
            // The example resident app is an app of its own: libc and DrowseKit, not Sys.
            let rawIO = relative == "Sources/DrowsePOSIX/Sys.swift" || relative.hasPrefix("Sources/drowse-resident-example/")
                ? [] : UncheckedCalls.rawIO(in: source)
            for f in lint.findings(in: source) + UncheckedCalls.errnoReadLate(in: source) + rawIO where !UncheckedCalls.allowed(relative, f.text) {
                findings.append("\(relative):\(f.line): \(f.text)")
            }
        }
        print("unchecked C results: \(findings.count)")
        #expect(findings.isEmpty, "C results discarded (check them with Sys, DrowsePOSIX):\n\(findings.joined(separator: "\n"))")
    }

    @Test("the lint catches a discarded close, chmod, nanosleep, sqlite3 status, Sys.noted, MosquittoError and a force-unwrapped C result", arguments: [
        "func f(fd: Int32) {\n    _ = close(fd)\n}",
        "func f() {\n    chmod(path, 0o600)\n}",
        "func f() -> Int {\n    if a { chmod(path, 0o600) }\n    return 1\n}",
        "func f() {\n    if ok { Glibc.close(fd) }\n}",
        "func f() {\n    defer { close(fd) }\n}",
        "func f() {\n    for p in ps { kill(p, SIGTERM) }\n}",
        "func f() {\n    _ = Sys.noted(\"write\") { write(fd, &v, 8) }\n}",
        "func f() {\n    let m = ccurl_multi_init()!\n}",
        "func f() {\n    x.withLock {\n        close(fd)\n        y = 1\n    }\n}",
        "close(fd)\n",
        "func f() {\n    nanosleep(&ts, nil)\n}",
        "func f() {\n    defer { sqlite3_reset(stmt) }\n}",
        "func f() {\n    sqlite3_busy_timeout(handle, 5000)\n}",
        "func f() {\n    _ = MosquittoError(rc: mosquitto_loop(m, 50, 1), call: \"mosquitto_loop\")\n}",
    ])
    func catches(_ source: String) {
        #expect(UncheckedCalls().findings(in: source).count == 1)
    }

    @Test("errno read after a string was built, or a call made, in the same statement is a finding", arguments: [
        "guard fd >= 0 else { throw SystemError(\"open \\(path)\", errno: errno) }",
        "if n < 0 { log(\"poll: \\(errno)\"); return }",
        "logger.warning(\"no socket (\\(String(cString: strerror(errno))))\")",
        "throw SystemError(what(), errno: errno)",
    ])
    func errnoLate(_ source: String) {
        #expect(UncheckedCalls.errnoReadLate(in: source).count == 1)
    }

    @Test("errno read first, or with nothing built before it, is not", arguments: [
        "guard fd >= 0 else { let e = errno; throw SystemError(\"open \\(path)\", errno: e) }",
        "if rc < 0 && errno == EINTR { continue }",
        "throw SystemError(\"open\", errno: errno)",
        "assert(e.errno != EBADF, \"shutdown: \\(e)\")",
        "// \"\\(x)\" errno",
        "let e = SystemError.last(\"open \\(path)\")",
        "let saved = errno; assert(rc == 0, \"closedir \\(path): errno \\(saved)\")",
    ])
    func errnoInTime(_ source: String) {
        #expect(UncheckedCalls.errnoReadLate(in: source).isEmpty)
    }

    @Test("read(2) and write(2) go through Sys (EINTR, EAGAIN and the error's name in one place)", arguments: [
        ("let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }", 1),
        ("if Glibc.write(fd, p, n) < 0 { fail() }", 1),
        ("let n = try Sys.read(fd, into: &buf) ?? 0", 0),
        ("write(line, to: \"x\")\nread(now: t)\nfunc write() {}\ntry write(r)", 0),
    ])
    func rawIO(_ source: String, _ expected: Int) {
        #expect(UncheckedCalls.rawIO(in: source).count == expected)
    }

    @Test("checked calls, used results, closures' values and Swift methods of the same name are not findings", arguments: [
        "func f() {\n    guard close(fd) == 0 else { return }\n}",
        "func f() {\n    let rc = withCStrings(a) { a in\n        drowse_spawn(p, a)\n    }\n}",
        "func f() {\n    try Sys.posix(\"chmod\") { Int(chmod(path, 0o600)) }\n}",
        "func f() {\n    if let e = Sys.noted(\"x\", { write(fd, &v, 8) }) { log(e) }\n}",
        "func f() {\n    session.close()\n    close(sendDisconnect: true)\n    send(.subscribe(t))\n    write(line, to: \"x\")\n}",
        "func f() {\n    // close(fd)\n    let s = \"close(fd)\"\n}",
        "func f() {\n    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}\n    return close(fd)\n}",
        "func f() {\n    let n = x ?? read(fd, &b, 1)\n    let ok =\n        close(fd) == 0\n}",
        "func close(_ fd: Int32) {}\n",
        "func f() -> [pid_t] { send(SIGSTOP, groups) }\n",
        "func f() {\n    if drowse_ready() != 0 { go() }\n}",
    ])
    func passes(_ source: String) {
        #expect(UncheckedCalls().findings(in: source).isEmpty)
    }
}

/// The scanner: Swift source in, discarded C results out.
struct UncheckedCalls {
    /// libc calls whose result says whether they worked. Add to it when Sources/ starts using
    /// another one.
    static let functions: Set<String> = [
        "accept", "accept4", "bind", "chdir", "chmod", "chown", "clock_gettime", "close", "closedir", "connect", "dup", "dup2", "dup3",
        "epoll_ctl", "eventfd_read", "eventfd_write", "fallocate", "fchdir", "fchmod", "fchown", "fclose", "fcntl",
        "fdatasync", "fflush", "flock", "fputs", "fsync", "ftruncate", "futimens", "fwrite", "ioctl", "kill", "killpg",
        "lchown", "link", "linkat", "listen", "localtime_r", "gmtime_r", "lseek", "mallopt", "malloc_trim", "mkdir", "mkdirat", "mount", "nanosleep", "pipe",
        "pipe2", "poll", "posix_fadvise", "posix_fallocate", "ppoll", "prctl", "pread", "pthread_create", "pthread_detach",
        "pthread_join", "pthread_sigmask", "putenv", "pwrite", "read", "recv", "recvmsg", "rename", "renameat",
        "rmdir", "send", "sendmsg", "setenv", "setpgid", "setrlimit", "setsid", "setsockopt", "shutdown", "sigaction",
        "sigaddset", "sigemptyset", "sigfillset", "signal", "sigprocmask", "symlink", "symlinkat", "timerfd_settime",
        "truncate", "umount", "unlink", "unlinkat", "unsetenv", "utimensat", "waitid", "waitpid", "write",
    ]

    /// C libraries' prefixes: a force-unwrapped result of theirs is a finding.
    static let cPrefixes = ["ccurl_", "curl_", "mosquitto_", "sqlite3_", "drowse_"]

    /// SQLite's calls return a result code, but for these, which return nothing or a value that
    /// is not a status. Any other `sqlite3_` call whose result is thrown away is a finding.
    static let sqliteWithoutStatus: Set<String> = [
        "sqlite3_free", "sqlite3_errmsg", "sqlite3_errstr", "sqlite3_column_type", "sqlite3_column_int64", "sqlite3_column_double",
        "sqlite3_column_text", "sqlite3_column_blob", "sqlite3_column_bytes", "sqlite3_column_count", "sqlite3_changes",
        "sqlite3_last_insert_rowid", "sqlite3_interrupt", "sqlite3_libversion", "sqlite3_total_changes",
    ]

    /// Values that are a failure or nil (`MosquittoError(rc:call:)`): building one and dropping
    /// it drops the error, as `_ = Sys.noted(…)` does.
    static let errorValues: Set<String> = ["MosquittoError"]

    /// Discarded results accepted for now, as file and the line's text: none. A call whose
    /// failure truly does not matter goes through a `Sys` helper that says why instead.
    static let allowList: Set<String> = []

    static func allowed(_ file: String, _ text: String) -> Bool { allowList.contains(file + "|" + text) }

    /// CDrowseSys functions declared with a result (not `void`).
    static func valueReturning(inHeader header: String) -> Set<String> {
        var out: Set<String> = []
        for line in header.split(separator: "\n") where !line.hasPrefix("void") {
            guard let r = line.range(of: "drowse_"), let paren = line[r.lowerBound...].firstIndex(of: "(") else { continue }
            out.insert(String(line[r.lowerBound..<paren]))
        }
        return out
    }

    var names: Set<String>

    init(extraFunctions: Set<String> = []) { names = Self.functions.union(extraFunctions) }

    struct Finding { var line: Int; var text: String }

    func findings(in source: String) -> [Finding] {
        let code = Self.blankCommentsAndStrings(Array(source.utf8))
        let lines = source.split(separator: "\n", omittingEmptySubsequences: false)
        var out: [Finding] = []
        var i = 0
        while i < code.count {
            guard Self.isIdentStart(code[i]), i == 0 || !Self.isIdent(code[i - 1]) else { i += 1; continue }
            var j = i
            while j < code.count && Self.isIdent(code[j]) { j += 1 }
            let word = String(decoding: code[i..<j], as: UTF8.self)
            defer { i = j }
            guard j < code.count, code[j] == UInt8(ascii: "(") else { continue }
            var start = i
            // `Glibc.close(…)` is the C call; `x.close(…)` is a method.
            if i > 0 && code[i - 1] == UInt8(ascii: ".") {
                let qualifier = Self.wordBefore(code, i - 1)
                guard qualifier.word == "Glibc" || qualifier.word == "Musl" || (word == "noted" && (qualifier.word == "Sys" || qualifier.word == "CCheck")) else { continue }
                start = qualifier.start
            } else if word == "noted" {
                continue
            }
            // `x.MosquittoError(` is not the type's initializer.
            if Self.errorValues.contains(word) && i > 0 && code[i - 1] == UInt8(ascii: ".") { continue }
            guard let close = Self.matchingParen(code, j) else { continue }
            let isNoted = word == "noted" || Self.errorValues.contains(word)
            if Self.wordBefore(code, start).word == "func" { continue }
            let lineNo = code[..<i].filter { $0 == 10 }.count + 1
            let text = lines[lineNo - 1].trimmingSpaces
            // A postfix `!` touches the `)`; `!=` after it is a comparison.
            if Self.cPrefixes.contains(where: { word.hasPrefix($0) }), close + 1 < code.count, code[close + 1] == UInt8(ascii: "!"),
               close + 2 >= code.count || code[close + 2] != UInt8(ascii: "=") {
                out.append(Finding(line: lineNo, text: text))  // a C pointer result force-unwrapped
                continue
            }
            let isSQLite = word.hasPrefix("sqlite3_") && !Self.sqliteWithoutStatus.contains(word)
            guard isNoted || isSQLite || names.contains(word) else { continue }
            if !isNoted && !Self.looksLikeCArguments(Array(code[(j + 1)..<close])) { continue }
            if Self.isDiscarded(code, start: start, end: close + 1, allowSoleClosureValue: !isNoted) {
                out.append(Finding(line: lineNo, text: text))
            }
        }
        return out
    }

    /// Calls of read(2) or write(2) themselves (C arguments, `Glibc.` or bare): outside `Sys`
    /// every one is a finding, used or not.
    static func rawIO(in source: String) -> [Finding] {
        let code = blankCommentsAndStrings(Array(source.utf8))
        let lines = source.split(separator: "\n", omittingEmptySubsequences: false)
        var out: [Finding] = []
        var i = 0
        while i < code.count {
            guard isIdentStart(code[i]), i == 0 || !isIdent(code[i - 1]) else { i += 1; continue }
            var j = i
            while j < code.count && isIdent(code[j]) { j += 1 }
            let word = String(decoding: code[i..<j], as: UTF8.self)
            defer { i = j }
            guard word == "read" || word == "write", j < code.count, code[j] == UInt8(ascii: "("),
                  let close = matchingParen(code, j), looksLikeCArguments(Array(code[(j + 1)..<close])),
                  topLevelCommas(Array(code[(j + 1)..<close])) == 2 else { continue }
            if i > 0 && code[i - 1] == UInt8(ascii: "."), !["Glibc", "Musl"].contains(wordBefore(code, i - 1).word) { continue }
            if wordBefore(code, i).word == "func" { continue }
            let lineNo = code[..<i].filter { $0 == 10 }.count + 1
            out.append(Finding(line: lineNo, text: lines[lineNo - 1].trimmingSpaces))
        }
        return out
    }

    static func topLevelCommas(_ args: [UInt8]) -> Int {
        var depth = 0, commas = 0
        for c in args {
            if c == UInt8(ascii: "(") || c == UInt8(ascii: "[") || c == UInt8(ascii: "{") { depth += 1 }
            if c == UInt8(ascii: ")") || c == UInt8(ascii: "]") || c == UInt8(ascii: "}") { depth -= 1 }
            if c == UInt8(ascii: ","), depth == 0 { commas += 1 }
        }
        return commas
    }

    /// `errno` read after a string interpolation in the same statement (`SystemError("open
    /// \(path)", errno: errno)` builds the string first, and building it may set errno): per
    /// line, a read of `errno` (not `x.errno`, not the label `errno:`) with `\(` between it and
    /// the statement's start (the last `{` or `;` before it). Read it first (`let e = errno`), or
    /// use `SystemError.last(…)`, which does.
    static func errnoReadLate(in source: String) -> [Finding] {
        var out: [Finding] = []
        let word = Array("errno".utf8)
        for (n, line) in source.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let t = Array(line.utf8)
            if line.trimmingSpaces.hasPrefix("//") { continue }
            var i = 0
            while i + word.count <= t.count {
                defer { i += 1 }
                guard Array(t[i..<(i + word.count)]) == word else { continue }
                if i > 0 && (isIdent(t[i - 1]) || t[i - 1] == UInt8(ascii: ".")) { continue }
                var k = i + word.count
                if k < t.count && isIdent(t[k]) { continue }
                while k < t.count && t[k] == 32 { k += 1 }
                if k < t.count && t[k] == UInt8(ascii: ":") { continue }
                // The word in a string's text ("errno \(e)"), not in an interpolation: an odd
                // number of quotes before it, and no `(` right before it.
                let quotes = t[..<i].enumerated().filter { $1 == UInt8(ascii: "\"") && ($0 == 0 || t[$0 - 1] != UInt8(ascii: "\\")) }.count
                if quotes % 2 == 1 && (i == 0 || t[i - 1] != UInt8(ascii: "(")) { continue }
                let start = (t[..<i].lastIndex { $0 == UInt8(ascii: "{") || $0 == UInt8(ascii: ";") } ?? -1) + 1
                let head = Array(t[start..<i])
                let interpolates = zip(head, head.dropFirst()).contains { $0 == UInt8(ascii: "\\") && $1 == UInt8(ascii: "(") }
                // A call without arguments (an autoclosure's `what()`) runs before errno is read.
                let calls = head.indices.dropLast(2).contains { isIdent(head[$0]) && head[$0 + 1] == UInt8(ascii: "(") && head[$0 + 2] == UInt8(ascii: ")") }
                if interpolates || calls {
                    out.append(Finding(line: n + 1, text: line.trimmingSpaces))
                    break
                }
            }
        }
        return out
    }

    /// Whether the value of the expression `code[start..<end]` is thrown away.
    static func isDiscarded(_ code: [UInt8], start: Int, end: Int, allowSoleClosureValue: Bool) -> Bool {
        // `_ = call(…)`
        var k = start - 1
        while k >= 0 && (code[k] == 32 || code[k] == 9) { k -= 1 }
        if k >= 0 && code[k] == UInt8(ascii: "=") && (k == 0 || code[k - 1] != UInt8(ascii: "=") && code[k - 1] != UInt8(ascii: "!")
            && code[k - 1] != UInt8(ascii: "<") && code[k - 1] != UInt8(ascii: ">")) {
            var m = k - 1
            while m >= 0 && (code[m] == 32 || code[m] == 9) { m -= 1 }
            return m >= 0 && code[m] == UInt8(ascii: "_") && (m == 0 || !isIdent(code[m - 1]))
        }
        // Used when something follows on the same statement (`== 0`, `.x`, `?? y`, `)`…).
        if let next = nextToken(code, end), next != UInt8(ascii: "}") && next != UInt8(ascii: ";") && next != 10 { return false }
        // A statement of its own only after `{`, `;`, `}`, a closure's `in`, or a new line that
        // does not continue an expression.
        let prev = previousToken(code, start)
        let word = wordBefore(code, start).word
        var statement = false
        if let p = prev.char, p == UInt8(ascii: "{") || p == UInt8(ascii: ";") || p == UInt8(ascii: "}") { statement = true }
        else if word == "in" || word == "else" { statement = true }
        else if prev.char == nil { statement = true }
        else if prev.newline, let p = prev.char, !["=", "(", "[", ",", ":", "?", "+", "-", "*", "/", "&", "|", "<", ">", "!", "."].contains(Character(Unicode.Scalar(p))),
                !["return", "throw", "try", "await", "in"].contains(word) { statement = true }
        guard statement else { return false }
        guard allowSoleClosureValue else { return true }
        // A closure whose one statement is the call returns its value.
        guard let open = enclosingBrace(code, start), isClosure(code, open) else { return true }
        let soleStart = prev.char == UInt8(ascii: "{") || word == "in"
        return !(soleStart && nextToken(code, end, acrossLines: true) == UInt8(ascii: "}"))
    }

    /// Whether the block opened at `open` gives back the value of a lone expression in it: a
    /// closure, a function with a result, a computed property. The body of a control statement,
    /// of a function without a result, of `init` or `deinit` does not.
    static func isClosure(_ code: [UInt8], _ open: Int) -> Bool {
        if let before = previousToken(code, open).char, "(,=[:".utf8.contains(before) { return true }
        var s = open - 1
        while s >= 0 && code[s] != 10 && code[s] != UInt8(ascii: "{") && code[s] != UInt8(ascii: ";") { s -= 1 }
        var head = String(decoding: code[(s + 1)..<open], as: UTF8.self).trimmingSpaces
        while head.hasPrefix("}") { head = String(head.dropFirst()).trimmingSpaces }
        let words = head.split(whereSeparator: { $0 == " " || $0 == "(" || $0 == "<" }).map(String.init)
        let control: Set<String> = ["if", "guard", "for", "while", "repeat", "else", "do", "defer", "catch", "switch", "init",
                                    "deinit", "set", "willSet", "didSet", "struct", "class", "enum", "extension", "actor", "protocol"]
        if let first = words.first, control.contains(first) || head.hasSuffix("else") { return false }
        if words.contains("func") { return head.contains("->") }
        if words.contains(where: { control.contains($0) && $0 != "set" }) && !words.contains("var") { return false }
        return true
    }

    static func enclosingBrace(_ code: [UInt8], _ at: Int) -> Int? {
        var depth = 0
        var k = at - 1
        while k >= 0 {
            if code[k] == UInt8(ascii: "}") { depth += 1 }
            else if code[k] == UInt8(ascii: "{") {
                if depth == 0 { return k }
                depth -= 1
            }
            k -= 1
        }
        return nil
    }

    /// A C call's arguments have no labels and never start with `.` (an enum case of a method).
    static func looksLikeCArguments(_ args: [UInt8]) -> Bool {
        let text = String(decoding: args, as: UTF8.self)
        if text.trimmingSpaces.isEmpty { return false }
        if text.trimmingSpaces.hasPrefix(".") { return false }
        var depth = 0
        var token = ""
        for c in text {
            if c == "(" || c == "[" { depth += 1; token = ""; continue }
            if c == ")" || c == "]" { depth -= 1; token = ""; continue }
            if depth == 0 && c == ":" && !token.isEmpty && token.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) { return false }
            if c.isLetter || c.isNumber || c == "_" { token.append(c) } else if c != " " { token = "" } else if !token.isEmpty { token = "#" }
        }
        return true
    }

    static func matchingParen(_ code: [UInt8], _ open: Int) -> Int? {
        var depth = 0
        for k in open..<code.count {
            if code[k] == UInt8(ascii: "(") { depth += 1 }
            if code[k] == UInt8(ascii: ")") { depth -= 1; if depth == 0 { return k } }
        }
        return nil
    }

    static func nextToken(_ code: [UInt8], _ from: Int, acrossLines: Bool = false) -> UInt8? {
        var k = from
        while k < code.count && (code[k] == 32 || code[k] == 9 || (acrossLines && (code[k] == 10 || code[k] == 13))) { k += 1 }
        return k < code.count ? code[k] : nil
    }

    static func previousToken(_ code: [UInt8], _ before: Int) -> (char: UInt8?, newline: Bool) {
        var k = before - 1
        var newline = false
        while k >= 0 && (code[k] == 32 || code[k] == 9 || code[k] == 10 || code[k] == 13) {
            if code[k] == 10 { newline = true }
            k -= 1
        }
        return (k >= 0 ? code[k] : nil, newline)
    }

    static func wordBefore(_ code: [UInt8], _ before: Int) -> (word: String, start: Int) {
        var k = before - 1
        while k >= 0 && (code[k] == 32 || code[k] == 9 || code[k] == 10) { k -= 1 }
        let end = k + 1
        while k >= 0 && isIdent(code[k]) { k -= 1 }
        return (String(decoding: code[(k + 1)..<end], as: UTF8.self), k + 1)
    }

    static func isIdentStart(_ c: UInt8) -> Bool { (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 }
    static func isIdent(_ c: UInt8) -> Bool { isIdentStart(c) || (c >= 48 && c <= 57) }

    /// The source with comments and the insides of string literals turned into spaces (new
    /// lines kept, so positions and line numbers stay).
    static func blankCommentsAndStrings(_ s: [UInt8]) -> [UInt8] {
        var out = s
        var i = 0
        func blank(_ a: Int, _ b: Int) { for k in a..<min(b, out.count) where out[k] != 10 { out[k] = 32 } }
        while i < s.count {
            if s[i] == UInt8(ascii: "/") && i + 1 < s.count && s[i + 1] == UInt8(ascii: "/") {
                var e = i
                while e < s.count && s[e] != 10 { e += 1 }
                blank(i, e)
                i = e
            } else if s[i] == UInt8(ascii: "/") && i + 1 < s.count && s[i + 1] == UInt8(ascii: "*") {
                var e = i + 2
                while e + 1 < s.count && !(s[e] == UInt8(ascii: "*") && s[e + 1] == UInt8(ascii: "/")) { e += 1 }
                blank(i, e + 2)
                i = e + 2
            } else if s[i] == UInt8(ascii: "\"") {
                let triple = i + 2 < s.count && s[i + 1] == UInt8(ascii: "\"") && s[i + 2] == UInt8(ascii: "\"")
                var e = i + (triple ? 3 : 1)
                while e < s.count {
                    if s[e] == UInt8(ascii: "\\") { e += 2; continue }
                    if triple {
                        if e + 2 < s.count && s[e] == UInt8(ascii: "\"") && s[e + 1] == UInt8(ascii: "\"") && s[e + 2] == UInt8(ascii: "\"") { e += 3; break }
                    } else if s[e] == UInt8(ascii: "\"") || s[e] == 10 { e += 1; break }
                    e += 1
                }
                blank(i + 1, e - 1)
                i = e
            } else {
                i += 1
            }
        }
        return out
    }
}

private extension StringProtocol {
    var trimmingSpaces: String {
        String(drop(while: { $0 == " " || $0 == "\t" }).reversed().drop(while: { $0 == " " || $0 == "\t" || $0 == "\r" }).reversed())
    }
}

/// This checkout's files, found from this source file's path.
enum RepoPath {
    static func root(from file: String = #filePath) -> String {
        var parts = file.split(separator: "/", omittingEmptySubsequences: false)
        parts.removeLast(3)  // Tests/DrowseSystemTests/X.swift
        return parts.joined(separator: "/")
    }

    static func read(_ path: String) throws -> String {
        String(decoding: try FileSystem.readFile(path, limit: 1 << 24), as: UTF8.self)
    }

    /// Every *.swift below `folder`, sorted.
    static func swiftFiles(under folder: String) -> [String] {
        var out: [String] = []
        for name in FileSystem.listDirectory(folder) {
            let path = folder + "/" + name
            if FileSystem.isDirectory(path) { out += swiftFiles(under: path) } else if name.hasSuffix(".swift") { out.append(path) }
        }
        return out.sorted()
    }
}
