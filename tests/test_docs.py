"""The docs stay readable and true: short pages, paths that exist, links that resolve.

Plain file checks; no database.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MAX_LINES = 500
PAGES = sorted(DOCS.rglob("*.md"))
# A backticked repository path: starts with one of the repository's top-level folders and
# names a module (`.py`) or a folder (ends with `/`).
PATH = re.compile(r"`((?:controlplane|automemory|worker|benchmarks|tests)/[\w/.-]*?(?:\.py|/))`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_there_are_docs():
    assert PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_doc_is_longer_than_its_limit(page):
    lines = len(page.read_text().splitlines())
    assert lines <= MAX_LINES, f"{page.relative_to(ROOT)} has {lines} lines"


def test_paths_named_in_the_architecture_exist():
    named = set(PATH.findall((DOCS / "architecture.md").read_text()))
    assert named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_between_docs_resolve(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # another site, a mail address, or a place on the same page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert broken == []
