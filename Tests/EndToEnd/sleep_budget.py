#!/usr/bin/env python3
"""The end-to-end suite's fixed sleeps, in seconds, per test file and in all.

Usage:  python3 Tests/EndToEnd/sleep_budget.py [--max SECONDS] [-v] [DIR]

A fixed sleep is a `time.sleep(...)` a test makes whatever happens: it costs its seconds on every
run. Polling for an outcome (`wait_until`, `Drowse.wait_runs`) is not one; it returns as soon as
the outcome is there. How the sum is made (read from the source, nothing is run):

- Only the test files (test_*.py) count: the helpers' sleeps (drowse_e2e.wait_until's poll
  interval, the scripted servers' pacing) belong to polling or to serving.
- `time.sleep(<number>)` counts its number; `time.sleep(name)` counts the number `name` was last
  assigned in the same function (e.g. `window = 12.0`); `time.sleep(max(0.0, <expr>))` counts
  N when the expression is "a time + N - now" (a wait until N s after something: at most N),
  else it is listed as unresolved (and counted as 0).
- Inside `for ... in range(<number>)` a sleep counts once per iteration, unless the loop can
  `break` (a retry loop: it ends at the first success). Inside any other loop (a `while` bounded
  by a deadline or a condition, a `for` over data) it is a poll or pacing interval and counts
  once: the loop's own bound, not the sleep, sets how long it runs.
- Random waits (`time.sleep(rng.uniform(...))`, the kill tests' random gaps) are listed as
  unresolved: they pick random moments to act at, not a time to wait for.
- Sleeps inside the text of a script a test runs (a string) are not calls and do not count.

With --max the exit status is 1 when the total exceeds SECONDS (a guard for CI).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _number(node) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _number(node.operand)
        return -v if v is not None else None
    return None


def _is_sleep(call: ast.Call) -> bool:
    f = call.func
    return isinstance(f, ast.Attribute) and f.attr == "sleep" and isinstance(f.value, ast.Name) and f.value.id == "time"


class _Visitor(ast.NodeVisitor):
    def __init__(self):
        self.found: list[tuple[int, float, str]] = []  # (line, seconds counted, note)
        self.unresolved: list[tuple[int, str]] = []
        self.loops: list[float] = []  # multiplier of each enclosing loop
        self.assigned: list[dict[str, float]] = [{}]

    def visit_FunctionDef(self, node):
        self.assigned.append({})
        saved, self.loops = self.loops, []
        self.generic_visit(node)
        self.loops = saved
        self.assigned.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        v = _number(node.value)
        for t in node.targets:
            if isinstance(t, ast.Name) and v is not None:
                self.assigned[-1][t.id] = v
        self.generic_visit(node)

    def visit_For(self, node):
        times = 1.0
        it = node.iter
        breaks = any(isinstance(n, ast.Break) for n in ast.walk(node))
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1 \
                and not breaks:
            times = _number(it.args[0]) or 1.0
        self.loops.append(times)
        self.generic_visit(node)
        self.loops.pop()

    def visit_While(self, node):
        self.loops.append(1.0)
        self.generic_visit(node)
        self.loops.pop()

    def _resolve(self, arg) -> float | None:
        v = _number(arg)
        if v is not None:
            return v
        if isinstance(arg, ast.Name):
            return self.assigned[-1].get(arg.id)
        # max(0, <t> + N - time.time()): a wait until N seconds after <t>
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "max" and len(arg.args) == 2:
            expr = arg.args[1]
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Sub) and isinstance(expr.left, ast.BinOp) \
                    and isinstance(expr.left.op, ast.Add):
                return _number(expr.left.right)
        return None

    def visit_Call(self, node):
        if _is_sleep(node) and node.args:
            v = self._resolve(node.args[0])
            if v is None:
                self.unresolved.append((node.lineno, ast.unparse(node)))
            else:
                times = 1.0
                for m in self.loops:
                    times *= m
                note = f" x{times:g}" if times != 1 else (" (in a loop: counted once)" if self.loops else "")
                self.found.append((node.lineno, v * times, ast.unparse(node) + note))
        self.generic_visit(node)


def budget(folder: Path = HERE) -> dict[str, _Visitor]:
    out = {}
    for path in sorted(folder.glob("test_*.py")):
        v = _Visitor()
        v.visit(ast.parse(path.read_text(), filename=str(path)))
        if v.found or v.unresolved:
            out[path.name] = v
    return out


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    limit = float(argv[argv.index("--max") + 1]) if "--max" in argv else None
    args = [a for i, a in enumerate(argv) if not a.startswith("-") and (i == 0 or argv[i - 1] != "--max")]
    files = budget(Path(args[0]) if args else HERE)
    total = 0.0
    for name, v in sorted(files.items(), key=lambda kv: -sum(s for _, s, _ in kv[1].found)):
        seconds = sum(s for _, s, _ in v.found)
        total += seconds
        print(f"{seconds:7.2f} s  {name}")
        if verbose:
            for line, s, text in v.found:
                print(f"           {s:6.2f}  line {line}: {text}")
        for line, text in v.unresolved:
            print(f"           unresolved, line {line}: {text}")
    print(f"{total:7.2f} s  in all")
    if limit is not None and total > limit:
        print(f"over the budget of {limit:g} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
