"""The rules that keep the code base from growing back into a few large files (issue 38),
as plain functions over a source tree: module and class sizes, import circles, and the
typed seams of the core (every match over commands or events is exhaustive; no event or
command carries free text). tests/unit/test_house_rules.py runs them on this tree and on
deliberate violations; `make lint` runs that test."""

import ast
import sys
import typing
from collections.abc import Iterable, Iterator
from dataclasses import fields, is_dataclass
from pathlib import Path

import grimp

MODULE_LINES = 400
CLASS_LINES = 300
# Where the rules apply: the packages, their tests and the examples users copy.
PACKAGES = (
    "stoker",
    "allocator",
    "tpm",
    "scheduler",
    "daemon",
    "agents",
    "fpga_driver",
    "workloads",
    "cli",
    "bench",
)
SKIPPED = frozenset({"__pycache__", ".venv", "stoker-out", "node_modules"})
# A field of an event or command with one of these names and type `str` is prose that a
# caller would have to parse: a reason is an enum, its details typed fields.
FREE_TEXT = frozenset({"why", "error", "reason", "message", "text", "detail"})


def sources(root: Path, tops: Iterable[str] = (*PACKAGES, "tests", "examples")) -> Iterator[Path]:
    """Every Python file under the given top-level folders of `root`, sorted."""
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            if not SKIPPED.intersection(path.relative_to(root).parts):
                yield path


def long_modules(root: Path, limit: int = MODULE_LINES) -> dict[str, int]:
    """Files over `limit` lines, by path relative to `root`."""
    found = {}
    for path in sources(root):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found[path.relative_to(root).as_posix()] = lines
    return found


def long_classes(root: Path, limit: int = CLASS_LINES) -> dict[str, int]:
    """Classes over `limit` lines, as `path::Class`."""
    found = {}
    for path in sources(root):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found[f"{path.relative_to(root).as_posix()}::{node.name}"] = lines
    return found


def over_allowance(found: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """What breaks an allow-list that may only shrink: a new entry, an entry grown past its
    allowance, and an allowance no longer needed (it must go, so it cannot grow back)."""
    broken = []
    for name, size in sorted(found.items()):
        if name not in allowed:
            broken.append(f"{name}: {size} lines, over the limit")
        elif size > allowed[name]:
            broken.append(f"{name}: {size} lines, its allowance is {allowed[name]}")
    for name in sorted(allowed.keys() - found.keys()):
        broken.append(f"{name}: within the limit now; remove it from the allow-list")
    return broken


def import_circles(root: Path, packages: Iterable[str]) -> list[tuple[str, ...]]:
    """Each circle of imports, as the modules around it (`a -> b -> a`), with the imports
    under `if TYPE_CHECKING:` counted: a circle a type checker needs is still one. An import
    of b by a closes a circle when some chain of imports leads from b back to a."""
    sys.path.insert(0, str(root))
    try:
        graph = grimp.build_graph(*packages, cache_dir=None)
    finally:
        sys.path.remove(str(root))
    circles = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                start = back.index(min(back))  # one circle, whichever import found it
                circles.add(back[start:] + back[:start])
    return sorted(circles)


def open_matches(root: Path, names: frozenset[str], tops: Iterable[str]) -> list[str]:
    """`match` statements over events or commands (a case names one of `names`) whose last
    case is not `case _ as x: assert_never(x)`: a new type would fall through silently."""
    found = []
    for path in sources(root, tops):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Match) and _over(node, names) and not _closed(node):
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def _over(node: ast.Match, names: frozenset[str]) -> bool:
    for case in node.cases:
        for pattern in ast.walk(case.pattern):
            if isinstance(pattern, ast.MatchClass):
                name = pattern.cls.attr if isinstance(pattern.cls, ast.Attribute) else None
                name = name or (pattern.cls.id if isinstance(pattern.cls, ast.Name) else None)
                if name in names:
                    return True
    return False


def _closed(node: ast.Match) -> bool:
    last = node.cases[-1]
    catch_all = _wildcard(last.pattern)
    calls = [
        call.func
        for statement in last.body
        for call in ast.walk(statement)
        if isinstance(call, ast.Call)
    ]
    named = {f.id for f in calls if isinstance(f, ast.Name)}
    named |= {f.attr for f in calls if isinstance(f, ast.Attribute)}
    return catch_all and "assert_never" in named


def _wildcard(pattern: ast.pattern | None) -> bool:
    """`_`, `name` or `_ as name`: a case that takes whatever came."""
    if not isinstance(pattern, ast.MatchAs):
        return False
    return pattern.pattern is None or _wildcard(pattern.pattern)


def free_text_fields(kinds: Iterable[type]) -> list[str]:
    """Fields of the given dataclasses that carry prose a caller would parse."""
    found = []
    for kind in kinds:
        if not is_dataclass(kind):
            continue
        hints = typing.get_type_hints(kind)
        for field in fields(kind):
            text = hints.get(field.name) in (str, str | None)
            if field.name in FREE_TEXT and text:
                found.append(f"{kind.__name__}.{field.name}")
    return found
