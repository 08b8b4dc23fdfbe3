"""ARCHITECTURE.md is true as written: every module of ``brrm/`` is placed in exactly one row of its layer table,
no import runs up the table (every import counts: module level, inside functions, and under ``TYPE_CHECKING``,
since a type-only import still couples the two layers), and every file path the table, the prose or a docstring
of brrm names as brrm's own exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "brrm"
DOC = REPO / "ARCHITECTURE.md"


def layer_table() -> list[tuple[str, list[str]]]:
    """(layer, entries) per row of the "Layers" table, top first; an entry is ``name/`` (a package) or
    ``name.py`` (a module); names inside parentheses are the rooms of an entry, not entries."""
    section = DOC.read_text(encoding="utf-8").split("## Layers (top imports bottom)")[1].split("\n## ")[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or cells[0] in ("layer", "---"):
            continue
        entries = cells[1]
        while re.search(r"\([^()]*\)", entries):
            entries = re.sub(r"\([^()]*\)", "", entries)
        rows.append((cells[0], re.findall(r"`([^`]+)`", entries)))
    return rows


def _top(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _owners() -> dict[str, int]:
    owners: dict[str, int] = {}
    for k, (_layer, entries) in enumerate(layer_table()):
        for entry in entries:
            name = entry.rstrip("/").removesuffix(".py")
            assert name not in owners, f"{entry} is in two rows of ARCHITECTURE.md's layer table"
            owners[name] = k
    return owners


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, the brrm top-level name imported) for every absolute import of brrm in a module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "brrm" else [f"brrm.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out += [(node.lineno, n.split(".")[1]) for n in names if n.startswith("brrm.")]
    return out


def test_every_module_is_placed_in_one_layer():
    owners = _owners()
    missing = sorted({_top(p) for p in PACKAGE.rglob("*.py")} - set(owners))
    assert not missing, f"modules of brrm/ that ARCHITECTURE.md's layer table does not place: {missing}"
    stale = sorted(n for n in owners if not (PACKAGE / n).is_dir() and not (PACKAGE / f"{n}.py").is_file())
    assert not stale, f"ARCHITECTURE.md's layer table names what brrm/ does not have: {stale}"


def test_no_import_runs_up_the_layer_table():
    owners, rows = _owners(), layer_table()
    up = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = owners[_top(path)]
        for line, name in _imports(path):
            if name in owners and owners[name] < here:
                up.append(f"{path.relative_to(REPO)}:{line} imports brrm.{name}: {rows[here][0]} -> "
                          f"{rows[owners[name]][0]}")
    assert not up, "imports that run up ARCHITECTURE.md's layer table:\n" + "\n".join(up)


def test_no_two_top_level_parts_import_each_other():
    edges = {(_top(p), name) for p in PACKAGE.rglob("*.py") for _, name in _imports(p) if name != _top(p)}
    both = sorted({tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges})
    assert not both, f"parts of brrm that import each other: {both}"


def test_the_paths_brrm_names_as_its_own_exist():
    """``brrm/…py`` in any docstring or comment of brrm, and every backticked ``…py`` in ARCHITECTURE.md (found
    somewhere under brrm/ with that ending)."""
    own = re.compile(r"(?<![\w./-])(brrm/(?:\w+/)*\w+\.py)\b")
    missing = [f"{p.relative_to(REPO)} names {m}" for p in sorted(PACKAGE.rglob("*.py"))
               for m in own.findall(p.read_text(encoding="utf-8")) if not (REPO / m).is_file()]
    files = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}
    for name in re.findall(r"`((?:\w+/)*\w+\.py)`", DOC.read_text(encoding="utf-8")):
        if not any(f == name or f.endswith("/" + name) for f in files) and not (REPO / name).is_file():
            missing.append(f"ARCHITECTURE.md names {name}")
    assert not missing, "\n".join(missing)
