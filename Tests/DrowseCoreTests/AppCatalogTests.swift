import DrowseCore
import Testing

@Suite("AppCatalog")
struct AppCatalogTests {
    static let dir = "/etc/drowse/apps.d"

    static func file(_ name: String, _ text: String) -> (path: String, text: Result<String, ConfigError>) {
        ("\(dir)/\(name).toml", .success(text))
    }

    @Test("valid files become apps; a bad one is listed under its file name with the parser's reason")
    func mixed() {
        let catalog = AppCatalog([
            Self.file("news", "id = \"news\"\n"),
            Self.file("deep", "id = \"deep\"\na = " + String(repeating: "[", count: 100_000)),
            Self.file("weather", "id = \"weather\"\n[fetch]\ncommand = [\"/bin/true\"]\n"),
        ])
        #expect(catalog.apps.keys.sorted() == ["news", "weather"])
        #expect(catalog.invalid.map(\.id) == ["deep"])
        #expect(catalog.invalid.first?.error.description == "\(Self.dir)/deep.toml:2: nested deeper than 64 levels")
    }

    @Test("two files with the same id are both refused, each naming the other; the rest still load")
    func duplicates() throws {
        let catalog = AppCatalog([
            Self.file("a", "id = \"weather\"\n"),
            Self.file("b", "# copy\nid = \"weather\"\n"),
            Self.file("news", "id = \"news\"\n"),
        ])
        #expect(catalog.apps.keys.sorted() == ["news"])
        #expect(catalog.invalid.map(\.id) == ["a", "b"])
        let a = try #require(catalog.invalid.first?.error)
        let b = try #require(catalog.invalid.last?.error)
        #expect(a.file == "\(Self.dir)/a.toml" && a.line == 1 && a.key == "id")
        #expect(a.problem.contains("\(Self.dir)/b.toml"))
        #expect(b.file == "\(Self.dir)/b.toml" && b.line == 2)
        #expect(b.problem.contains("\(Self.dir)/a.toml"))
    }

    @Test("three files with one id name the other two")
    func triplicate() {
        let catalog = AppCatalog(["x", "y", "z"].map { Self.file($0, "id = \"same\"\n") })
        #expect(catalog.apps.isEmpty)
        #expect(catalog.invalid.count == 3)
        #expect(catalog.invalid[1].error.problem.hasPrefix("'same' is also the id in \(Self.dir)/x.toml, \(Self.dir)/z.toml;"))
    }

    @Test("a duplicate id in a file that is invalid for another reason does not refuse the good one")
    func duplicateOfInvalid() {
        let catalog = AppCatalog([
            Self.file("a", "id = \"weather\"\n"),
            Self.file("b", "id = \"weather\"\nbogus = 1\n"),
        ])
        #expect(catalog.apps.keys.sorted() == ["weather"])
        #expect(catalog.invalid.map(\.id) == ["b"])
    }

    @Test("a file that could not be read stays listed with its reason")
    func unreadable() {
        let path = "\(Self.dir)/pipe.toml"
        let error = ConfigError(file: path, problem: "not a regular file (a FIFO); only regular files are read")
        let catalog = AppCatalog([(path, .failure(error)), Self.file("news", "id = \"news\"\n")])
        #expect(catalog.apps.keys.sorted() == ["news"])
        #expect(catalog.invalid.map(\.id) == ["pipe"])
        #expect(catalog.invalid.first?.file == path)
        #expect(catalog.invalid.first?.error == error)
    }
}
