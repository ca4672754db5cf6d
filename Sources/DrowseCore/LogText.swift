/// Text from outside (handler output, URLs, MQTT topics, payload fields) made safe for one log line.
package enum LogText {
    /// `text` with every control character written as an escape: `\n`, `\r`, `\t`, or `\u{XX}`.
    ///
    /// Why: a handler (or a notification's sender) must not be able to forge log lines with a
    /// newline, rewrite the operator's terminal with ESC sequences, or hide text with Unicode
    /// bidirectional overrides. Escaped: C0 controls, DEL, C1 controls (0x9B is CSI on some
    /// terminals), the Unicode line and paragraph separators, and the bidi embedding, override and
    /// isolate controls. Everything else, backslashes included, is left as it was, so ordinary
    /// output reads unchanged (the escape is for safety, not meant to be reversible).
    package static func escape(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = String.UnicodeScalarView()
        for s in text.unicodeScalars {
            guard needsEscape(s) else { out.append(s); continue }
            let esc: String = switch s {
            case "\n": "\\n"
            case "\r": "\\r"
            case "\t": "\\t"
            default: "\\u{" + hex(s.value) + "}"
            }
            out.append(contentsOf: esc.unicodeScalars)
        }
        return String(out)
    }

    /// How much of a piece of input an error message quotes (in characters, after escaping).
    package static let quoteLimit = 200

    /// `text` escaped (`escape`) and cut to `limit` characters, with an ellipsis and the size of
    /// what was left out. For messages that quote input back (a key, a value, an id, a server's
    /// answer): a 500 KB key must not come back as one 500 KB line in a log, a terminal or an
    /// HTTP answer.
    package static func clip(_ text: String, limit: Int = quoteLimit) -> String {
        let escaped = escape(text)
        guard escaped.count > limit else { return escaped }
        let rest = escaped.utf8.count - escaped.prefix(limit).utf8.count
        return escaped.prefix(limit) + "…(\(rest) more bytes)"
    }

    static func needsEscape(_ s: Unicode.Scalar) -> Bool {
        switch s.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x2028, 0x2029: true  // line and paragraph separators
        case 0x200E, 0x200F, 0x061C: true  // directional marks
        case 0x202A...0x202E, 0x2066...0x2069: true  // bidi embeddings, overrides, isolates
        default: false
        }
    }

    private static func hex(_ v: UInt32) -> String {
        let digits = String(v, radix: 16, uppercase: true)
        return digits.count < 2 ? "0" + digits : digits
    }
}
