#!/usr/bin/env python3
"""The summary table of a bench script (deploy/bench-*.sh), printed, and with --markdown also
written into docs/benchmarks.md. deploy/common.sh's bench_table calls this.

    bench-markdown.py print TSV
    bench-markdown.py write FILE KEY TITLE COMMAND TSV

TSV: the table, tab-separated, its header first; a line starting with "# " is a note, printed
and written under the table. `print` aligns the columns on standard output. `write` replaces, in
FILE, the block between KEY's two marker lines (`<!-- KEY --markdown writes from here -->` and
`<!-- KEY --markdown writes to here -->`) with the command, the date, the machine and the table;
FILE's other lines stay as they are. Without the markers in FILE it appends a `## TITLE` section
holding the block.
"""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys


def read(tsv: str) -> tuple[list[list[str]], list[str]]:
    rows, notes = [], []
    with open(tsv) as f:
        for line in f.read().splitlines():
            if line.startswith("# "):
                notes.append(line[2:])
            elif line.strip():
                rows.append(line.split("\t"))
    if not rows:
        sys.exit(f"bench-markdown.py: {tsv} holds no table")
    width = max(len(r) for r in rows)
    return [r + [""] * (width - len(r)) for r in rows], notes


def print_table(tsv: str) -> None:
    rows, notes = read(tsv)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    for note in notes:
        print(note)


def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":")[0].strip() in ("model name", "Model"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cpus = os.cpu_count() or 1
    return f"{platform.machine()}, {cpus} CPU{'s' if cpus != 1 else ''}" + (f" ({model})" if model else "") + \
        f", Linux {platform.release()}"


def commit(repo: str) -> str:
    r = subprocess.run(["git", "-C", repo, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "a checkout without git"


def block(command: str, tsv: str, repo: str) -> list[str]:
    rows, notes = read(tsv)
    cell = lambda c: c.replace("|", "\\|")  # noqa: E731
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = [f"`{command}` on {today}, commit {commit(repo)}, {machine()}:", ""]
    out.append("| " + " | ".join(cell(c) for c in rows[0]) + " |")
    out.append("|" + "---|" * len(rows[0]))
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows[1:]]
    for note in notes:   # each its own paragraph
        out += ["", note]
    return out


def write(path: str, key: str, title: str, command: str, tsv: str) -> None:
    begin, end = f"<!-- {key} --markdown writes from here -->", f"<!-- {key} --markdown writes to here -->"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    new = [begin] + block(command, tsv, repo) + [end]
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = ["# Drowse — benchmarks"]
    if begin in lines and end in lines[lines.index(begin):]:
        i = lines.index(begin)
        j = lines.index(end, i)
        lines[i:j + 1] = new
    else:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", f"## {title}", ""] + new
    with open(path + ".new", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".new", path)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "print":
        print_table(sys.argv[2])
    elif len(sys.argv) == 7 and sys.argv[1] == "write":
        write(*sys.argv[2:])
    else:
        sys.exit(__doc__)
