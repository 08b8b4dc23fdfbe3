"""The README stays a README (at most 250 lines), every page of the docs site's navigation exists, and the
README's and docs' examples are collected by the test command (sybil, ``tests/docs_examples.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML comes with mkdocs (the docs extra)")

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250


def _nav_pages(node: object) -> list[str]:
    """Every page path of a mkdocs ``nav`` (nested lists of ``{title: page-or-section}``)."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for entry in node for page in _nav_pages(entry)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    raise TypeError(f"unexpected nav entry {node!r}")


def _config() -> dict:
    # mkdocs.yml uses no !!python tags, so the safe loader reads it
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def test_readme_is_at_most_250_lines() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the manual belongs in docs/"


def test_every_nav_page_exists_and_every_page_is_in_the_nav() -> None:
    config = _config()
    docs = REPO / config.get("docs_dir", "docs")
    pages = _nav_pages(config["nav"])
    missing = [page for page in pages if not (docs / page).is_file()]
    assert not missing, f"mkdocs.yml nav names pages that do not exist: {missing}"
    assert len(pages) == len(set(pages)), "a page is listed twice in the nav"
    orphans = sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md") if str(p.relative_to(docs)) not in pages)
    assert not orphans, f"pages not in mkdocs.yml's nav: {orphans}"


def test_the_site_builds_offline() -> None:
    config = _config()
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config.get("plugins", [])]
    assert not {"social", "privacy", "material/social", "material/privacy"} & set(plugins)
    assert config["theme"].get("font") is False, "web fonts would be fetched by the browser (font: false)"


def test_readme_and_docs_examples_are_collected(pytestconfig: pytest.Config) -> None:
    from tests.docs_examples import DOCS

    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        assert DOCS.should_parse(path), path
    assert "README.md" in pytestconfig.getini("testpaths") and "docs" in pytestconfig.getini("testpaths")
    examples = [e for e in DOCS.parse(REPO / "README.md")]
    assert len(examples) >= 5, "the README's code blocks and skip markers are not parsed"


def test_every_skipped_example_says_why() -> None:
    import re

    directive = re.compile(r"<!--\s*skip:(.*?)-->")
    with_reason = re.compile(r'^\s*next\s+(".{10,}"|if\(.+reason=".{10,}"\))\s*$')
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for found in directive.finditer(path.read_text(encoding="utf-8")):
            assert with_reason.match(found.group(1)), f"{path.name}: a skip without a reason: {found.group(0)}"
