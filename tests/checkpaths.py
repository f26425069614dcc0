"""The path of every check, read statically (`ast`, nothing imported): the files a check's test
function reaches through its calls, and the layer of each, in the order check -> measure ->
judge -> outcome.

    .venv/bin/python tests/checkpaths.py            # a check per line: its files, in layers
    .venv/bin/python tests/checkpaths.py ssh_trust  # the checks whose name holds the word

How a call is read: `f(...)` is a function of the caller's module, or one it imports by name;
`mod.f(...)` is a function of a module of the package it imports (`ports.port_matrix`,
`outcome.fail`); `cluster.f(...)` is a method of core/cluster.py's Cluster; `pytest.skip`,
`pytest.fail`, `pytest.xfail` and `pytest.exit` end a test, as core/outcome.py does. A call on
any other value (`m.reach(a, b)`) is not followed. The path follows the test function, then,
transitively, every function of checks/ it calls (lambdas and nested functions included), then
one level into measure/ and judge/: the calls each measure or judge function it reaches makes.

Layers: checks/ is "check", measure/ "measure", judge/ "judge", core/outcome.py and pytest's
outcome functions "outcome", the rest of core/ "core" (the mechanics every layer may lean on:
the cluster, the memo, the pairs). tests/unit/test_check_paths.py holds the rule.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cluster_tests"
NAME = "cluster_tests"
CHECK, MEASURE, JUDGE, OUTCOME = "check", "measure", "judge", "outcome"
CORE, OTHER = "core", "other"
#: what pytest offers to end a test: core/outcome.py's layer
PYTEST_ENDS = frozenset({"skip", "fail", "xfail", "exit"})
#: a judge function whose result is a verdict (a red, or the red that holds a cause), by its
#: return annotation
VERDICT = re.compile(r"\b(Problem|Root)\b")


def layer(module: str) -> str:
    """The layer of a module of the package (`measure.ports`), or of "pytest" (its outcome
    functions)."""
    if module == "pytest" or module == "core.outcome":
        return OUTCOME
    top = module.split(".")[0]
    return {"checks": CHECK, "measure": MEASURE, "judge": JUDGE, "core": CORE}.get(top, OTHER)


@dataclass
class Module:
    name: str  # "measure.ports"; "checks" for checks/__init__.py
    path: Path
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: set[str] = field(default_factory=set)
    #: local name -> (module, attribute or "") it stands for
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    base = PACKAGE.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def read_module(name: str, source: str | None = None) -> Module:
    """The module `name` of the package (or `source` standing for it)."""
    base = PACKAGE.joinpath(*name.split(".")) if name else PACKAGE
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    mod = Module(name, path, tree)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            mod.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            mod.classes.add(node.name)
    for imp in ast.walk(tree):
        if isinstance(imp, ast.Import):
            for a in imp.names:
                if a.name == "pytest":
                    mod.imports[a.asname or a.name] = ("pytest", "")
        elif isinstance(imp, ast.ImportFrom) and (imp.module or "").startswith(NAME):
            inner = (imp.module or "")[len(NAME) + 1:]
            for a in imp.names:
                sub = f"{inner}.{a.name}".lstrip(".")
                mod.imports[a.asname or a.name] = (sub, "") if _is_module(sub) else (inner, a.name)
    return mod


#: sources standing for modules of the package (the rule's tests plant violations with them)
PLANTED: dict[str, str] = {}


@cache
def _read(name: str, source: str | None) -> Module:
    return read_module(name, source)


def module(name: str) -> Module:
    return _read(name, PLANTED.get(name))


@dataclass(frozen=True)
class Hop:
    """One call on a check's path: from (module, function) to (module, function)."""

    caller: str
    caller_function: str
    callee: str
    callee_function: str
    line: int

    @property
    def caller_layer(self) -> str:
        return layer(self.caller)

    @property
    def callee_layer(self) -> str:
        return layer(self.callee)


def resolve(mod: Module, call: ast.Call) -> tuple[str, str] | None:
    """(module, function) a call names, as far as it can be read statically; None otherwise."""
    f = call.func
    if isinstance(f, ast.Name):
        if f.id in mod.functions or f.id in mod.classes:
            return mod.name, f.id
        got = mod.imports.get(f.id)
        if got is not None and got[1]:
            return got
        return None
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        owner = f.value.id
        if owner == "cluster":
            return "core.cluster", f"Cluster.{f.attr}"
        got = mod.imports.get(owner)
        if got is None or got[1]:
            return None
        if got[0] == "pytest":
            return ("pytest", f.attr) if f.attr in PYTEST_ENDS else None
        return got[0], f.attr
    return None


def calls(mod: Module, fn: ast.AST) -> list[tuple[ast.Call, tuple[str, str]]]:
    """The calls in `fn` (its nested functions and lambdas too) that name a function, in source
    order."""
    found = [(c, t) for c in ast.walk(fn) if isinstance(c, ast.Call)
             if (t := resolve(mod, c)) is not None]
    return sorted(found, key=lambda x: (x[0].lineno, x[0].col_offset))


def function(name: str, func: str) -> ast.FunctionDef | None:
    """The function `func` of module `name` (a module-level def; None: a class, a method...)."""
    if not _is_module(name) and name not in PLANTED:
        return None
    return module(name).functions.get(func)


def path_of(check_module: str, test: str) -> list[Hop]:
    """Every call on the path of `test` (a test function of checks/`check_module`.py): the test,
    the checks/ functions it reaches, and one level into measure/ and judge/."""
    hops: list[Hop] = []
    seen: set[tuple[str, str]] = set()

    def visit(name: str, func: str, follow_checks: bool) -> None:
        if (name, func) in seen:
            return
        seen.add((name, func))
        fn = function(name, func)
        if fn is None:
            return
        for call, (callee, callee_func) in calls(module(name), fn):
            hops.append(Hop(name, func, callee, callee_func, call.lineno))
            if not follow_checks:
                continue
            if layer(callee) == CHECK:
                visit(callee, callee_func, True)
            elif layer(callee) in (MEASURE, JUDGE):
                visit(callee, callee_func, False)

    visit(f"checks.{check_module}", test, True)
    return hops


def checks() -> list[tuple[str, str]]:
    """(check module, test function) of every check, in file order."""
    out = []
    for path in sorted((PACKAGE / "checks").glob("*.py")):
        if path.name == "__init__.py":
            continue
        mod = module(_module_name(path))
        out += [(path.stem, f) for f in mod.functions if f.startswith("test_")]
    return out


def files_on(hops: list[Hop]) -> list[str]:
    """The files of a path, each once, in the order the path first reaches them."""
    seen: dict[str, None] = {}
    for h in hops:
        for m in (h.caller, h.callee):
            seen.setdefault(m, None)
    return [(f"cluster_tests/{m.replace('.', '/')}.py" if m != "pytest" else "pytest")
            if not m.endswith("checks") else "cluster_tests/checks/__init__.py" for m in seen]


# -- the rule ----------------------------------------------------------------------------------


def is_verdict(name: str, func: str) -> bool:
    """Whether judge function `func` of module `name` returns a verdict: a Problem or a Root
    (its return annotation says so; the two classes themselves too)."""
    if layer(name) != JUDGE:
        return False
    if name == "judge.problem" and func in ("Problem", "Root"):
        return True
    fn = function(name, func)
    return fn is not None and fn.returns is not None and bool(
        VERDICT.search(ast.unparse(fn.returns)))


#: what a judge may call outside judge/: the dependency-free constants (the folder rule's own)
JUDGE_CORE = frozenset({"core.testids", "core.sections"})


def hop_breaks(h: Hop) -> str | None:
    """Why a call leaves the layer order (None: it keeps it). A check may call every layer; a
    measure function measure/, core/ (not its outcome) and judge/ (its parsers and fact types,
    never a verdict); a judge function judge/ and the constants of core/testids.py."""
    src, dst = h.caller_layer, h.callee_layer
    if src == MEASURE:
        if dst == OUTCOME:
            return ("a measuring function calls the outcome layer (it ends, blocks or asks "
                    "about tests)")
        if dst not in (MEASURE, JUDGE, CORE):
            return f"a measuring function calls the {dst} layer"
        if is_verdict(h.callee, h.callee_function):
            return "a measuring function judges (it calls a judge that returns a verdict)"
    if src == JUDGE and dst != JUDGE and h.callee not in JUDGE_CORE:
        return f"a judge calls the {dst} layer"
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def verdict_into_measure(name: str, func: str) -> list[str]:
    """The calls of check function `func` (module `name`) that hand a judge's verdict to a
    measuring function: a name bound (=, :=, for) to a value made from a verdict call, or the
    call itself, among a measure call's arguments. In source order, as Python runs the body
    (a loop's second turn aside)."""
    fn = function(name, func)
    if fn is None:
        return []
    mod = module(name)
    tainted: set[str] = set()

    def from_verdict(expr: ast.AST) -> bool:
        return bool(_names(expr) & tainted) or any(
            isinstance(c, ast.Call) and (t := resolve(mod, c)) is not None and is_verdict(*t)
            for c in ast.walk(expr))

    found = []
    for node in sorted((n for n in ast.walk(fn) if hasattr(n, "lineno")),
                       key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if isinstance(node, ast.Call):
            t = resolve(mod, node)
            if t is not None and layer(t[0]) == MEASURE and any(
                    from_verdict(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                found.append(f"{mod.path.name}:{node.lineno}: {func} hands a verdict to "
                             f"{t[0]}.{t[1]}")
        targets: list[ast.AST] = []
        value: ast.AST | None = None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value:
            targets, value = [node.target], node.value
        elif isinstance(node, (ast.For, ast.comprehension)):
            targets, value = [node.target], node.iter
        if value is not None and from_verdict(value):
            tainted |= {n for t in targets for n in _names(t)}
    return found


def breaks(check_module: str, test: str) -> list[str]:
    """How the path of `test` leaves the order check -> measure -> judge -> outcome (none:
    it keeps it)."""
    hops = path_of(check_module, test)
    out = [f"{h.caller}.{h.caller_function} -> {h.callee}.{h.callee_function} (line {h.line}): "
           f"{why}" for h in hops if (why := hop_breaks(h)) is not None]
    in_checks = dict.fromkeys([(f"checks.{check_module}", test)] + [
        (h.callee, h.callee_function) for h in hops if h.callee_layer == CHECK])
    for name, func in in_checks:
        out += verdict_into_measure(name, func)
    return out


def measure_ends() -> list[str]:
    """Where a module of measure/ imports core/outcome.py or ends a test itself (outcome's
    functions, pytest.skip/fail/xfail/exit), on a check's path or not."""
    out = []
    for path in sorted((PACKAGE / "measure").glob("*.py")):
        mod = module(_module_name(path))
        out += [f"measure/{path.name}: imports core.outcome" for local, (m, attr)
                in mod.imports.items() if m == "core.outcome" or (m, attr) == ("core", "outcome")]
        out += [f"measure/{path.name}:{c.lineno}: calls {t[0]}.{t[1]}"
                for c in ast.walk(mod.tree) if isinstance(c, ast.Call)
                if (t := resolve(mod, c)) is not None and layer(t[0]) == OUTCOME]
    return out


def main(argv: list[str]) -> int:
    word = argv[0] if argv else ""
    for check_module, test in checks():
        if word not in test:
            continue
        hops = path_of(check_module, test)
        by_layer: dict[str, list[str]] = {}
        for f in files_on(hops):
            m = f.removeprefix("cluster_tests/").removesuffix(".py").replace("/", ".")
            by_layer.setdefault(layer(m.removesuffix(".__init__")), []).append(
                f.removeprefix("cluster_tests/"))
        parts = [f"{lay}: {' '.join(by_layer[lay])}" for lay in (CHECK, MEASURE, JUDGE, OUTCOME,
                                                                  CORE) if lay in by_layer]
        print(f"{test} ({len(hops)} calls)\n    " + "\n    ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
