"""Citations checked as they are written: a path inside the repository, a regular text file
there at the commit, lines within it. Each written citation records the commit, the branch
and the hash of its lines' content (`code.lines_hash`), all that a later check needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from automemory.models.citations import MAX_CITED_LINES, MAX_PATH_CHARS
from automemory.services.citations import code

# The citations a model gives in its answers (extraction, revalidation), in their strict
# schemas; each is checked (`anchors_check`) before it is kept.
CITATIONS_SCHEMA: dict = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "start_line": {"type": "integer"},
            "end_line": {"type": "integer"},
        },
        "required": ["path", "start_line", "end_line"],
        "additionalProperties": False,
    },
}


class CitationRefused(Exception):
    """A citation that cannot be written; `field` names it (`citations[2].path`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Anchor:
    """A citation ready to store."""

    path: str
    start_line: int
    end_line: int
    commit: str
    branch: str
    content_hash: str


def path_problem(path: object) -> str | None:
    """Why `path` cannot name a file in a repository (None when it can): relative, inside
    the tree (no `..`, no `.git`), no NUL, newline or backslash, at most 1,024 characters."""
    if not isinstance(path, str) or not path.strip():
        return "must be a non-empty path inside the repository"
    if len(path) > MAX_PATH_CHARS:
        return f"must be at most {MAX_PATH_CHARS} characters"
    if any(char in path for char in "\0\n\r\\"):
        return "must not hold NUL, line breaks or backslashes"
    if path.startswith("/"):
        return "must be relative to the repository's root, not absolute"
    parts = PurePosixPath(path).parts
    if ".." in parts or "." in parts or path.endswith("/") or "//" in path:
        return "must not hold '..' or '.' parts"
    if parts[0] == ".git":
        return "must not name git's own files"
    return None


def lines_problem(start: object, end: object) -> tuple[str, str] | None:
    """(field, why) when the line range is not 1 <= start <= end within MAX_CITED_LINES."""
    for name, value in (("start_line", start), ("end_line", end)):
        if type(value) is not int or value < 1:
            return name, "must be a whole number of at least 1"
    if end < start:
        return "end_line", "must not be before start_line"
    if end - start + 1 > MAX_CITED_LINES:
        return "end_line", f"a citation spans at most {MAX_CITED_LINES} lines"
    return None


def anchors_make(
    citations: list[dict], *, git_dir: Path, commit: str, branch: str, field: str = "citations"
) -> list[Anchor]:
    """The citations checked against the tree at `commit` (one `git ls-tree` and one `git
    cat-file --batch` for all of them); CitationRefused naming the first bad one."""
    checked = anchors_check(citations, git_dir=git_dir, commit=commit, branch=branch, field=field)
    for item in checked:
        if isinstance(item, CitationRefused):
            raise item
    return checked


def anchors_check(
    citations: list[dict], *, git_dir: Path, commit: str, branch: str, field: str = "citations"
) -> list[Anchor | CitationRefused]:
    """Each citation checked against the tree at `commit`: an Anchor, or CitationRefused
    saying why not. Two git processes for all of them (`ls-tree`, `cat-file --batch`), and
    only for those whose path and lines are well formed."""
    checked: list[Anchor | CitationRefused | None] = []
    for index, citation in enumerate(citations):
        name = f"{field}[{index}]"
        problem = path_problem(citation.get("path"))
        lines = lines_problem(citation.get("start_line"), citation.get("end_line"))
        if problem:
            checked.append(CitationRefused(f"{name}.path", problem))
        elif lines:
            checked.append(CitationRefused(f"{name}.{lines[0]}", lines[1]))
        else:
            checked.append(None)
    paths = [c["path"] for c, done in zip(citations, checked, strict=True) if done is None]
    modes = code.modes_read(git_dir, commit, paths)
    readable = [path for path in paths if modes.get(path) in code.FILE_MODES]
    blobs = code.blobs_read(git_dir, commit, readable)
    for index, citation in enumerate(citations):
        if checked[index] is None:
            checked[index] = _anchor(
                citation,
                mode=modes.get(citation["path"]),
                blob=blobs.get(citation["path"]),
                name=f"{field}[{index}]",
                commit=commit,
                branch=branch,
            )
    return checked


def _anchor(
    citation: dict, *, mode: str | None, blob: code.Blob | None, name: str, commit: str, branch: str
) -> Anchor | CitationRefused:
    where = f"at {commit[:12]} ({branch})"
    if mode is None:
        return CitationRefused(f"{name}.path", f"is not a file {where}")
    if mode not in code.FILE_MODES:
        return CitationRefused(f"{name}.path", "is a symlink, a folder or a submodule, not a file")
    if blob is not None and blob.too_large:
        return CitationRefused(
            f"{name}.path", f"is larger than {code.MAX_FILE_BYTES} bytes and cannot be cited"
        )
    if blob is None or blob.data is None:
        return CitationRefused(f"{name}.path", f"is not a file {where}")
    if code.is_binary(blob.data):
        return CitationRefused(f"{name}.path", "is a binary file; only text can be cited")
    lines = code.lines_of(blob.data)
    start, end = citation["start_line"], citation["end_line"]
    if end > len(lines):
        return CitationRefused(f"{name}.end_line", f"the file has {len(lines)} lines {where}")
    return Anchor(
        path=citation["path"],
        start_line=start,
        end_line=end,
        commit=commit,
        branch=branch,
        content_hash=code.lines_hash(lines[start - 1 : end]),
    )


@dataclass
class TaskCitations:
    """What a task's memory will cite, and the note its log detail gets."""

    anchors: list[Anchor] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    branch: str = ""
    default_branch: str = ""
    head: str = ""

    @property
    def note(self) -> str:
        if not self.dropped:
            return ""
        return "citations dropped: " + "; ".join(self.dropped)
