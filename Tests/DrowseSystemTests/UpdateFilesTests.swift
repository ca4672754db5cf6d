import DrowseCore
import DrowseSystem
import DrowseTestSupport
import Testing

@Suite("Update files")
struct UpdateFilesTests {
    @Test("create writes the package, the request and a first state; a directory path gives the update back")
    func create() throws { try withTempDirSync { tmp in try createIn(tmp) } }

    func createIn(_ tmp: String) throws {
        let deb = tmp + "/hello_2.0_all.deb"
        try FileSystem.writeAtomically(deb, Array("not really a deb".utf8))
        let files = UpdateFiles(root: tmp + "/updates", id: "u1")
        #expect(try files.progress() == nil)
        try files.create(request: UpdateRequest(id: "u1", service: "hello.service"), package: deb, now: 1000)
        #expect(try FileSystem.readText(files.packagePath) == "not really a deb")
        #expect(try files.request() == UpdateRequest(id: "u1", service: "hello.service"))
        let p = try #require(try files.progress())
        #expect(p.step == .prepare && p.report.state == .installing && p.report.times == [.installing: 1000])
        #expect(!FileSystem.exists(files.packagePath + ".part"))

        let back = try #require(UpdateFiles(dir: files.dir + "/"))
        #expect(back.root == files.root && back.id == "u1")
        #expect(UpdateFiles(dir: files.root + "/kept") == nil)
        #expect(UpdateFiles(dir: files.root + "/../x y") == nil)
        #expect(files.kept("hello", "1:2.0") == files.root + "/kept/hello_1%3a2.0.deb")
    }

    @Test("the fleet status gets each package's newest update; unreadable states are skipped")
    func newest() throws { try withTempDirSync { tmp in try newestIn(tmp) } }

    func newestIn(_ tmp: String) throws {
        let root = tmp + "/updates"
        func put(_ id: String, _ package: String?, _ state: UpdateState, at t: Double) throws {
            let f = UpdateFiles(root: root, id: id)
            try FileSystem.makeDirectories(f.dir)
            var p = UpdateProgress(report: UpdateReport(id: id, state: state), package: package, step: state.isFinal ? .done : .check)
            p.enter(state, at: t)
            try f.save(p)
        }
        try put("a1", "hello", .committed, at: 10)
        try put("a2", "hello", .rolledBack, at: 20)
        try put("b1", "drowse", .checking, at: 15)
        try FileSystem.makeDirectories(root + "/junk")
        try FileSystem.writeAtomically(root + "/junk/state.json", Array("{".utf8))
        try FileSystem.makeDirectories(root + "/kept")
        #expect(UpdateFiles.all(in: root).map(\.report.id) == ["a1", "b1", "a2"])
        let newest = UpdateFiles.newestByPackage(in: root)
        #expect(newest.mapValues(\.id) == ["hello": "a2", "drowse": "b1"])
        #expect(UpdateFiles.newestByPackage(in: tmp + "/none").isEmpty)

        // Finished updates beyond the newest three of a package go; unfinished ones stay.
        for i in 3...6 { try put("h\(i)", "hello", .committed, at: Double(100 + i)) }
        try put("h7", "hello", .waiting, at: 1)
        UpdateFiles.prune(in: root)
        #expect(Set(UpdateFiles.all(in: root).map(\.report.id)) == ["h4", "h5", "h6", "h7", "b1"])
    }
}
