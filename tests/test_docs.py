"""The docs stay readable and true: short pages, paths and modules that exist, links that resolve.

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
# A path inside an app (`services/mirrors.py`, `console/`), and a dotted module name.
APP_PATH = re.compile(r"`([\w-]+(?:/[\w.-]+)*?(?:\.py|/))`")
MODULE = re.compile(r"`((?:controlplane|automemory|worker)(?:\.[A-Za-z_]\w*)+)`")
APPS = ("controlplane", "automemory", "worker")
CHECK_ID = re.compile(r"\.[EW]\d{3}$")
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


def test_files_named_in_the_architecture_by_their_app_path_exist():
    """`services/instructions.py`, `console/`, `sweep.py`: a path inside one of the apps."""
    named = set(APP_PATH.findall((DOCS / "architecture.md").read_text())) - set(
        PATH.findall((DOCS / "architecture.md").read_text())
    )
    assert named
    missing = sorted(
        path
        for path in named
        if not any(
            found.is_dir() if path.endswith("/") else found.is_file()
            for app in APPS
            for found in (ROOT / app).glob(f"**/{path.rstrip('/')}")
        )
        and not (ROOT / path).exists()
    )
    assert missing == []


def _module_path(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_named_in_the_docs_exist(page):
    """`controlplane.services.usage`, `controlplane.services.usage.usage_record`: a module, or a
    name its module defines or imports. Check ids (`worker.W004`) are not modules."""
    named = set(MODULE.findall(page.read_text()))
    missing = []
    for name in sorted(named):
        if CHECK_ID.search(name):
            continue
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            module = _module_path(".".join(parts[:cut]))
            if module is not None:
                break
        rest = parts[cut:]
        if module is None or (rest and not re.search(rf"\b{rest[0]}\b", module.read_text())):
            missing.append(name)
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
