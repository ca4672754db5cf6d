"""The documentation stays true to the code. No drowsed and no build needed: these read the
Markdown pages and the Swift sources, and run deploy/ scripts that stop before building.

- every relative link in README.md, docs/*.md and the other Markdown files resolves to a file
  that exists, and a `#anchor` to a heading of the page it names;
- the config keys: the tables of docs/configuration.md list exactly the keys the parsers read
  (MainConfig.swift, AppDefinition.swift, AppLimits.swift), and every `[table] key` or TOML
  example in the docs and in deploy/ names a key they read;
- the API routes: APIRouter's routes, docs/openapi.json and docs/api.md's table list the same
  routes, and every `METHOD /v1/...` in any page is a route;
- the metrics api.md lists are the ones drowsed serves, and the environment handlers.md lists is
  the one a handler gets;
- a shell handler shown in a page is a file of deploy/apps as it is (so the test that runs that
  file runs what the page shows);
- api.md's status example shows exactly the members openapi.json lists, and every answer's schema
  there is closed (`additionalProperties: false`);
- `deploy/test.sh --no-install` names what is missing and installs nothing;
- every deploy/bench-*.sh takes --markdown, and deploy/bench-markdown.py replaces only its block.

Run alone: python3 -m pytest -q Tests/EndToEnd/test_docs.py
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def markdown_files() -> list[Path]:
    """README.md, docs/*.md and the Markdown of deploy/ and Sources/ (not vendored test data)."""
    files = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    files += sorted(p for p in (REPO / "deploy").rglob("*.md"))
    files += sorted(p for p in (REPO / "Sources").rglob("*.md"))
    return files


def rel(p: Path) -> str:
    return str(p.relative_to(REPO))


# ---------------------------------------------------------------------------- reading Markdown

FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def code_blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, first line number, body) of each fenced code block."""
    blocks, lang, start, body = [], None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and lang is None:
            lang, start, body = line.strip()[3:].strip(), n + 1, []
        elif m:
            blocks.append((lang, start, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, formatting and punctuation dropped, spaces to '-'."""
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    h = re.sub(r"[^\w\- ]", "", h.replace("`", ""))
    return h.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text()):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(2))
        k = seen.get(s, 0)
        out.add(s if k == 0 else f"{s}-{k}")
        seen[s] = k + 1
    return out


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(path: Path):
    """(line, target) of every Markdown link outside code (fenced blocks and inline code)."""
    for n, line in prose_lines(path.read_text()):
        for m in LINK.finditer(re.sub(r"`[^`]*`", "``", line)):
            yield n, m.group(1)


def link_problems() -> list[str]:
    problems = []
    cache: dict[Path, set[str]] = {}
    for md in markdown_files():
        for n, target in links(md):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, file:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (md.parent / path_part).resolve() if path_part else md
            where = f"{rel(md)}:{n}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
                continue
            if REPO not in dest.parents and dest != REPO:
                problems.append(f"{where}: outside the repository")
                continue
            if anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{where}: no heading with anchor #{anchor} in {rel(dest)}")
    return problems


def test_every_relative_link_and_anchor_resolves():
    problems = link_problems()
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_anchor_rule_is_githubs():
    assert slug("`[limits]` — every app's default limits") == "limits--every-apps-default-limits"
    assert slug("App files: `apps.d/<id>.toml`") == "app-files-appsdidtoml"
    assert slug("Machine-readable output (`--json`)") == "machine-readable-output---json"
    assert slug("Fleet status and `drowse fleet`") == "fleet-status-and-drowse-fleet"


# ---------------------------------------------------------------------------- config keys

def swift_keys(path: Path, function: str) -> set[tuple[str, str]]:
    """(table, key) of every key `function` in `path` reads: `r.string("k")` at the top level,
    `x.integer("k")` inside `if var x = try r.table("t")`, `file("k", &m)`, `x.table["k"]`, and
    `x.limits()` (AppLimits: processes, memory)."""
    text = path.read_text()
    start = text.index(f"static func {function}(_ text: String, file: String")
    body = text[start:]
    tables: dict[str, str] = {"r": ""}
    keys: set[tuple[str, str]] = set()
    for line in body.splitlines():
        m = re.search(r"if var (\w+) = try r\.table\(\"(\w+)\"\)", line)
        if m:
            tables[m.group(1)] = m.group(2)
            keys.add(("", m.group(2)))  # the table itself is a top-level key
            continue
        for var, key in re.findall(r"\b(\w+)\.(?:string|integer|bool|stringArray|command|duration|percent)\(\"(\w+)\"", line):
            if var in tables:
                keys.add((tables[var], key))
        for key, var in re.findall(r"\bfile\(\"(\w+)\", &(\w+)\)", line):
            keys.add((tables[var], key))
        for var, key in re.findall(r"\b(\w+)\.table\[\"(\w+)\"\]", line):
            if var in tables:
                keys.add((tables[var], key))
        for var in re.findall(r"\b(\w+)\.limits\(\)", line):
            keys |= {(tables[var], k) for k in limits_keys()}
        if re.match(r"^    }\s*$", line):  # the end of the function
            break
    return keys


def limits_keys() -> set[str]:
    text = (REPO / "Sources/DrowseCore/AppLimits.swift").read_text()
    body = text[text.index("func limits()"):]
    body = body[:body.index("\n    }\n")]
    return set(re.findall(r"\(\"(\w+)\"", body))


def parser_keys() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    main = swift_keys(REPO / "Sources/DrowseCore/MainConfig.swift", "parse")
    app = swift_keys(REPO / "Sources/DrowseCore/AppDefinition.swift", "parse")
    return main, app


def documented_keys() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The keys in docs/configuration.md's tables: under "## `drowse.toml`" one table per
    `### [table]` heading (or "Top level"), first column the keys; under "## App files" one
    table whose first column is the table and second the keys."""
    text = (DOCS / "configuration.md").read_text()
    main: set[tuple[str, str]] = set()
    app: set[tuple[str, str]] = set()
    section, table = None, None
    for _, line in prose_lines(text):
        if line.startswith("## "):
            section = "main" if "`drowse.toml`" in line else "app" if line.startswith("## App files") else None
            table = None
        elif line.startswith("### ") and section == "main":
            m = re.match(r"### `\[(\w+)\]`", line)
            table = m.group(1) if m else ("" if "Top level" in line else None)
            if table:
                main.add(("", table))
        elif line.startswith("|") and not re.match(r"^\|[-\s|]+$", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if section == "main" and table is not None and cells[0] != "key":
                main |= {(table, k) for k in re.findall(r"`(\w+)`", cells[0])}
            elif section == "app" and len(cells) > 2 and cells[0] != "table":
                t = re.findall(r"`\[(\w+)\]`", cells[0])
                tname = t[0] if t else ""
                if tname:
                    app.add(("", tname))
                app |= {(tname, k) for k in re.findall(r"`(\w+)`", cells[1])}
    return main, app


def test_configuration_md_lists_exactly_the_keys_the_parsers_read():
    main, app = parser_keys()
    doc_main, doc_app = documented_keys()
    assert len(main) > 40 and len(app) > 15, (sorted(main), sorted(app))  # the parsers were read
    show = lambda s: ", ".join(f"[{t}] {k}" if t else k for t, k in sorted(s))  # noqa: E731
    assert not main - doc_main, "drowse.toml keys missing from docs/configuration.md: " + show(main - doc_main)
    assert not doc_main - main, "docs/configuration.md lists drowse.toml keys MainConfig does not read: " + show(doc_main - main)
    assert not app - doc_app, "app file keys missing from docs/configuration.md: " + show(app - doc_app)
    assert not doc_app - app, "docs/configuration.md lists app file keys AppDefinition does not read: " + show(doc_app - app)


def toml_keys(text: str, commented: bool = False) -> list[tuple[int, str, str]]:
    """(line, table, key) of the keys of a TOML text, read line by line (examples hold "…")."""
    out, table = [], ""
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if commented and s.startswith("#"):
            s = s.lstrip("#").strip()
            if not re.match(r"^(\[\w+\]|\w+\s*=)", s) or s.startswith("Default"):
                continue
        elif s.startswith("#"):
            continue
        m = re.match(r"^\[(\w+)\]", s)
        if m:
            table = m.group(1)
            out.append((n, "", table))
            continue
        m = re.match(r"^(\w+)\s*=", s)
        if m:
            out.append((n, table, m.group(1)))
    return out


def config_key_problems() -> list[str]:
    main, app = parser_keys()
    problems = []
    mention = re.compile(r"`\[(\w+)\] (\w+)`")
    for md in markdown_files():
        text = md.read_text()
        for n, line in prose_lines(text):
            for t, k in mention.findall(line):
                if (t, k) not in main and (t, k) not in app:
                    problems.append(f"{rel(md)}:{n}: `[{t}] {k}` is no key of drowse.toml or of an app file")
        for lang, start, body in code_blocks(text):
            if lang != "toml":
                continue
            keys = toml_keys(body)
            known = app if any(t == "" and k == "id" for _, t, k in keys) else main
            for n, t, k in keys:
                if (t, k) not in known:
                    problems.append(f"{rel(md)}:{start + n - 1}: [{t}] {k} is no key of "
                                    + ("an app file" if known is app else "drowse.toml"))
    deploy = REPO / "deploy"
    for f in [deploy / "drowse.toml", deploy / "local.toml", *sorted((deploy / "apps.d").glob("*.toml")),
              *sorted(deploy.rglob("apps/**/*.toml"))]:
        text = f.read_text()
        keys = toml_keys(text, commented=f.name == "drowse.toml")
        known = app if any(t == "" and k == "id" for _, t, k in keys) else main
        for n, t, k in keys:
            if (t, k) not in known:
                problems.append(f"{rel(f)}:{n}: [{t}] {k} is no key the parser reads")
    return problems


def test_every_config_key_named_in_a_page_or_an_example_exists():
    problems = config_key_problems()
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------- API routes

def normalized(path: str) -> str:
    path = re.sub(r"\[?\?.*$", "", path)
    return "/".join("{}" if re.fullmatch(r"\{\w+\}|ID|EID|TID", seg) else seg for seg in path.split("/"))


def router_routes() -> set[tuple[str, str]]:
    """(METHOD, path) of every APIRoute, from its `method` and `template` switches."""
    text = (REPO / "Sources/DrowseAgent/APIRouter.swift").read_text()
    method: dict[str, str] = {}
    template: dict[str, str] = {}
    for cases, value in re.findall(r"case ((?:\.\w+(?:, )?)+): \"([^\"]+)\"", text):
        names = re.findall(r"\.(\w+)", cases)
        for name in names:
            (template if value.startswith("/") else method)[name] = value
    cases = set(re.findall(r"case ([a-z][\w, ]+)$", text, re.M))
    declared = {n.strip() for c in cases for n in c.split(",")} if cases else set()
    assert declared and declared <= set(template), (declared, template)
    return {(method.get(n, "POST"), normalized(template[n])) for n in template}


def openapi_routes() -> set[tuple[str, str]]:
    doc = json.loads((DOCS / "openapi.json").read_text())
    return {(m.upper(), normalized(p)) for p, ops in doc["paths"].items() for m in ops
            if m in ("get", "post", "put", "delete", "patch")}


ROUTE = re.compile(r"\b(GET|POST|PUT|DELETE|PATCH) (/v1/[^\s`),;\]]*)")


def api_md_table_routes() -> set[tuple[str, str]]:
    """The routes of api.md's Routes table; `…/x` after a route is a sibling of it."""
    out = set()
    text = (DOCS / "api.md").read_text()
    section = text[text.index("## Routes"):]
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        last = None
        for m in re.finditer(r"`(?:(GET|POST|PUT|DELETE|PATCH) )?([^`]+)`", cell):
            method, path = m.group(1), m.group(2)
            if method:
                last = (method, path)
            elif last and path.startswith("…/"):
                path = last[1].rsplit("/", 1)[0] + path[1:]
                method = last[0]
            else:
                continue
            out.add((method, normalized(path)))
    return out


def test_the_router_openapi_json_and_api_md_list_the_same_routes():
    router = router_routes()
    assert len(router) >= 20, router
    assert router == openapi_routes(), f"router only: {router - openapi_routes()}; openapi.json only: {openapi_routes() - router}"
    table = api_md_table_routes()
    assert router == table, f"router only: {router - table}; docs/api.md's table only: {table - router}"


def test_every_route_a_page_names_exists():
    router = router_routes()
    problems = []
    for md in markdown_files():
        for n, line in prose_lines(md.read_text()):
            for method, path in ROUTE.findall(line):
                if (method, normalized(path)) not in router:
                    problems.append(f"{rel(md)}:{n}: {method} {path} is no route of APIRouter")
    assert not problems, "\n".join(problems)


def schema_members(schema: dict, schemas: dict, at: str = "") -> set[str]:
    """The members of an object schema and of the objects nested in it, as dotted paths."""
    if "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
    out = set()
    for k, v in schema.get("properties", {}).items():
        out.add(at + k)
        if "$ref" in v or v.get("type") == "object":
            out |= schema_members(v, schemas, at + k + ".")
    return out


def json_members(value, at: str = "") -> set[str]:
    out = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(at + k)
            out |= json_members(v, at + k + ".")
    return out


def test_api_md_shows_every_status_member_openapi_json_lists():
    schemas = json.loads((DOCS / "openapi.json").read_text())["components"]["schemas"]
    text = (DOCS / "api.md").read_text()
    section = text[text.index("### `GET /v1/status`"):]
    example = json.loads(next(body for lang, _, body in code_blocks(section) if lang == "json"))
    documented = schema_members(schemas["Status"], schemas)
    shown = json_members(example)
    assert "lifecycle.spawner_pid" in documented and "journal.syncs" in documented, documented
    assert shown == documented, f"api.md's example only: {shown - documented}; openapi.json only: {documented - shown}"
    open_answers = [name for name, s in schemas.items() if s.get("type") == "object" and "properties" in s
              and s.get("additionalProperties") is not False]
    assert set(open_answers) <= {"TransferRequest", "Completion", "TaskRequest"}, f"answers open to undocumented members: {open_answers}"

# ---------------------------------------------------------------------------- metrics, environment

def test_api_md_lists_the_metrics_drowsed_serves():
    served = set()
    for f in (REPO / "Sources/DrowseAgent").glob("*.swift"):
        served |= set(re.findall(r"\"((?:drowse|process)_[a-z_]+)\"", f.read_text()))
    text = (DOCS / "api.md").read_text()
    section = text[text.index("### `GET /v1/metrics`"):]
    section = section[:section.index("\n## ")]
    listed = set(re.findall(r"`((?:drowse|process)_[a-z_]+)(?:\{[^`]*\})?`", section))
    assert len(served) > 15, served
    assert served == listed, f"served, not in api.md: {served - listed}; in api.md, not served: {listed - served}"
    problems = []
    for md in markdown_files():
        for n, line in prose_lines(md.read_text()):
            for name in re.findall(r"\b(drowse_\w+_total)\b", line):
                if name not in served:
                    problems.append(f"{rel(md)}:{n}: {name} is no metric drowsed serves")
    assert not problems, "\n".join(problems)


def test_handlers_md_lists_the_environment_a_handler_gets():
    source = ""
    for f in ("DrowseAgent/AppProcesses.swift", "DrowseAgent/HandlerRunner.swift", "DrowseSystem/HandlerLauncher.swift"):
        source += (REPO / "Sources" / f).read_text()
    body = source[source.index("func environment("):]
    body = body[:body.index("\n    }\n")]
    set_names = set(re.findall(r"\"([A-Z][A-Z_]+)\":", body)) | set(re.findall(r"env\[\"([A-Z][A-Z_]+)\"\] =", source))
    text = (DOCS / "handlers.md").read_text()
    section = text[text.index("### Environment"):]
    section = section[:section.index("\n### ", 5)]
    listed = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            listed |= set(re.findall(r"`([A-Z][A-Z_]+)`", line.split("|")[1]))
    assert "DROWSE_APP" in set_names and "PATH" in set_names, set_names
    assert set_names == listed, f"set, not in handlers.md: {set_names - listed}; in handlers.md, not set: {listed - set_names}"


# ---------------------------------------------------------------------------- shell examples

def test_a_shell_handler_shown_in_a_page_is_a_shipped_file():
    shipped = {p.read_text(): p for p in (REPO / "deploy" / "apps").rglob("*.sh")}
    problems = []
    for md in markdown_files():
        for lang, start, body in code_blocks(md.read_text()):
            if lang == "sh" and body.startswith("#!") and re.search(r"^[^#]*\bdrowse (payload|transfer|task)\b", body, re.M):
                if body not in shipped:
                    problems.append(f"{rel(md)}:{start}: a shell handler calling drowse that is not a file of "
                                    "deploy/apps as it is (copy the file into the page, or the page into the file)")
    assert not problems, "\n".join(problems)



# ---------------------------------------------------------------------------- deploy/test.sh

def run_test_sh_no_install(tmp_path: Path, installed_except: str):
    """deploy/test.sh --no-install with a dpkg-query that reports every package installed but
    `installed_except`, an apt-get and a sudo that record being run, and an empty venv folder."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    (fake / "dpkg-query").write_text(
        "#!/bin/sh\n"
        f'for a; do p=$a; done; [ "$p" = "{installed_except}" ] && exit 1; printf "install ok installed"\n')
    for name in ("apt-get", "sudo", "pip"):
        (fake / name).write_text(f"#!/bin/sh\necho {name} \"$@\" >>{calls}\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "DROWSE_VENV": str(tmp_path / "venv")}
    r = subprocess.run(["bash", str(REPO / "deploy/test.sh"), "--no-install"], env=env, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    return r, calls


def test_test_sh_no_install_names_what_is_missing_and_installs_nothing(tmp_path):
    r, calls = run_test_sh_no_install(tmp_path, "rabbitmq-server")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "rabbitmq-server" in r.stderr and f"schemathesis {schemathesis_version()}" in r.stderr, r.stderr
    assert not calls.exists(), calls.read_text()          # no apt-get, sudo or pip
    assert not (tmp_path / "venv").exists()               # no venv made
    assert "swift build" not in r.stderr                  # stopped before building


def schemathesis_version() -> str:
    return re.search(r"^DROWSE_SCHEMATHESIS_VERSION=(\S+)", (REPO / "deploy/common.sh").read_text(), re.M).group(1)



# ---------------------------------------------------------------------------- bench tables

def test_every_bench_script_writes_its_table_into_benchmarks_md():
    """Each deploy/bench-*.sh takes --markdown; the blocks in benchmarks.md are paired."""
    for script in sorted((REPO / "deploy").glob("bench-*.sh")):
        assert "--markdown" in script.read_text(), f"{rel(script)} takes no --markdown"
    text = (DOCS / "benchmarks.md").read_text()
    begins = re.findall(r"^<!-- (.+) --markdown writes from here -->$", text, re.M)
    ends = re.findall(r"^<!-- (.+) --markdown writes to here -->$", text, re.M)
    assert begins and begins == ends, (begins, ends)


def test_bench_markdown_replaces_only_its_own_block(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\n## A\n\nprose before\n<!-- a.sh --markdown writes from here -->\nold table\n"
                    "<!-- a.sh --markdown writes to here -->\nprose after\n\n## B\n\nB's text\n")
    tsv = tmp_path / "t.tsv"
    tsv.write_text("run\tdrowse\tbaseline\nfast\t1.5\t1.3 | 2\n# a goal: met\n")
    tool = [sys.executable, str(REPO / "deploy/bench-markdown.py")]
    subprocess.run([*tool, "write", str(page), "a.sh", "A", "deploy/a.sh 3", str(tsv)], check=True)
    subprocess.run([*tool, "write", str(page), "c.sh", "C", "deploy/c.sh", str(tsv)], check=True)
    text = page.read_text()
    assert "old table" not in text and "prose before\n<!-- a.sh" in text and "writes to here -->\nprose after\n" in text
    assert "\n## B\n\nB's text\n" in text
    assert "`deploy/a.sh 3` on " in text and "| fast | 1.5 | 1.3 \\| 2 |" in text and "\na goal: met\n" in text
    assert text.index("## B") < text.index("## C") and text.count("c.sh --markdown writes from here") == 1
    printed = subprocess.run([*tool, "print", str(tsv)], capture_output=True, text=True, check=True).stdout
    assert printed.splitlines()[2].split() == ["fast", "1.5", "1.3", "|", "2"]

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
