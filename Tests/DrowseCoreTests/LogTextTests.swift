import DrowseCore
import Testing

@Suite("LogText")
struct LogTextTests {
    @Test("plain text, backslashes and non-ASCII letters are left as they are")
    func plain() {
        for s in ["", "hello world", #"C:\path\n"#, "Grüße, 東京 ✓"] { #expect(LogText.escape(s) == s) }
    }

    @Test("line breaks, terminal escapes and other controls are escaped", arguments: [
        ("a\nb", #"a\nb"#), ("a\r\nb", #"a\r\nb"#), ("t\tt", #"t\tt"#),
        ("\u{1B}[2J", #"\u{1B}[2J"#), ("nul\u{0}", #"nul\u{00}"#), ("del\u{7F}", #"del\u{7F}"#),
        ("csi\u{9B}31m", #"csi\u{9B}31m"#), ("ls\u{2028}ps\u{2029}", #"ls\u{2028}ps\u{2029}"#),
        ("rlo\u{202E}txt.exe", #"rlo\u{202E}txt.exe"#), ("iso\u{2066}x\u{2069}", #"iso\u{2066}x\u{2069}"#),
    ])
    func escaped(input: String, expected: String) {
        #expect(LogText.escape(input) == expected)
    }

    @Test("nothing that ends a line or moves the cursor survives")
    func noControlsLeft() {
        let all = String(String.UnicodeScalarView((0...0x2070).compactMap(Unicode.Scalar.init)))
        let out = LogText.escape(all)
        #expect(!out.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0 == "\u{2028}" })
    }
}
