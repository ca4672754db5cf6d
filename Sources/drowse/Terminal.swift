import DrowseCLIFormat
import DrowseCore

/// Every line the command-line tool prints for a person goes through here: in this module, no
/// `print` but `Swift.print` in `printJSON` (a same-named function would not shadow the standard
/// library's `print(Any...)`, whose overload Swift prefers, so the name differs).
///
/// Why: what the tool shows comes from others: URLs and reasons of transfers, task names, app
/// ids taken from file names, errors quoting bad files, what other devices publish to the
/// broker. Raw ESC, CR or LF there could rewrite the operator's terminal or forge a line (a
/// fake `pi-kitchen online` in `drowse fleet`). One line in, one line out: control characters,
/// line separators and bidi overrides are escaped (`LogText.escape`). JSON output does not come
/// through here: `printJSON` writes it as JSON, whose strings escape control characters.
func say(_ line: String = "", terminator: String = "\n") {
    Swift.print(StatusText.printable(line), terminator: terminator)
}

/// Prints each line of a multi-line text of the tool's own making (a table), escaped.
func printLines(_ text: String) {
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) { say(String(line)) }
}
