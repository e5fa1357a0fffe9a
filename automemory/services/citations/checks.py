"""Citations checked against the commit a task starts from, before any memory citing code is
given to an agent.

Per citation: `fresh` (the cited lines' content is what was written), `moved` (the same
lines found elsewhere in the file: the line numbers follow them), `changed` (the file is
there, the lines are not) or `deleted` (no such file); `unmerged` when the lines are not
there and the citation was written on another branch whose commit is not in the base's
history (a task's work not merged yet: not stale, not there yet).

What it costs, whatever the number of memories: one `git diff --name-only` per (citation
commit, base) pair, cached in the process (`code.changed_between`), and one `git cat-file
--batch` reading, at the base, only the files those diffs name. A path the diff does not
name is unchanged, so its citation is fresh without reading it; a citation already checked
against the same commit keeps what that check found, with no git at all. A citation of
another branch found missing costs one `git merge-base --is-ancestor` per (commit, base)
pair, cached, to tell `unmerged` from stale. When a citation's commit is gone (a
force-push), no diff can say what changed: its file is read at the base and its lines'
hash decides.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from automemory.models.citations import STALE_STATES, CitationState
from automemory.services.citations import code
from automemory.services.citations.anchors import Anchor
from controlplane.git import GitError

logger = logging.getLogger(__name__)

# What a check found that stands for the commit it checked against (`checked_commit`).
CHECKED_STATES = (
    CitationState.FRESH,
    CitationState.MOVED,
    CitationState.CHANGED,
    CitationState.DELETED,
)


@dataclass(frozen=True)
class Cited(Anchor):
    """A citation as stored (an anchor of a memory) and, after a check, as found: `commit`
    is the commit at which `start_line`..`end_line` hold the content whose hash is
    `content_hash`."""

    id: int
    memory_id: int
    state: str
    checked_commit: str = ""

    def as_output(self) -> dict:
        return {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "commit": self.commit,
            "state": self.state,
        }


def citations_check(
    citations: list[Cited], *, git_dir: Path | None, base: str, branch: str = ""
) -> list[Cited]:
    """The citations as found at `base` (the head of `branch`, or a commit of it) in the
    repository at `git_dir` (see the module).
    When the repository cannot be read, each comes back `unchecked` and the reason is
    logged: a citation that could not be checked is never reported fresh."""
    if not citations:
        return []
    if git_dir is None or not base:
        return [replace(c, state=CitationState.UNCHECKED) for c in citations]
    to_read: dict[int, Cited] = {}
    result: dict[int, Cited] = {}
    by_commit: dict[str, list[Cited]] = defaultdict(list)
    for citation in citations:
        if citation.checked_commit == base and citation.state in CHECKED_STATES:
            result[citation.id] = citation  # checked against this very commit already
        else:
            by_commit[citation.commit].append(citation)
    try:
        for commit, group in by_commit.items():
            changed = code.changed_between(git_dir, commit, base)
            for citation in group:
                if changed is not None and citation.path not in changed:
                    result[citation.id] = replace(
                        citation, state=CitationState.FRESH, checked_commit=base
                    )
                else:
                    to_read[citation.id] = citation
        blobs = code.blobs_read(git_dir, base, [c.path for c in to_read.values()])
    except (GitError, OSError) as exc:
        logger.warning(
            "citations could not be checked against %s in %s (%s); they stay unchecked",
            base[:12],
            git_dir,
            exc,
        )
        return [replace(c, state=CitationState.UNCHECKED) for c in citations]
    for citation in to_read.values():
        blob = blobs.get(citation.path) or code.Blob(None, missing=True)
        found = _found(citation, blob, base=base, branch=branch)
        if found.state in STALE_STATES and _unmerged(git_dir, citation, base=base, branch=branch):
            found = replace(citation, state=CitationState.UNMERGED)
        result[citation.id] = found
    return [result[c.id] for c in citations]


def _unmerged(git_dir: Path, citation: Cited, *, base: str, branch: str) -> bool:
    """Whether the citation's lines are missing because its commit is not merged into the
    base yet: it is not in the base's history (one cached `merge-base --is-ancestor`) and was
    written on another branch. On the base's own branch, a commit not in its history was
    rewritten away (a force-push): the lines are stale, not unmerged."""
    if citation.branch == branch:
        return False
    try:
        return not code.is_ancestor(git_dir, citation.commit, base)
    except (GitError, OSError):
        return False


def _found(citation: Cited, blob: code.Blob, *, base: str, branch: str) -> Cited:
    if blob.missing:
        return replace(citation, state=CitationState.DELETED, checked_commit=base)
    if blob.data is None or code.is_binary(blob.data):
        return replace(citation, state=CitationState.CHANGED, checked_commit=base)
    lines = code.lines_of(blob.data)
    span = citation.end_line - citation.start_line + 1
    start = _lines_find(lines, span, citation.content_hash, near=citation.start_line)
    if start is None:
        return replace(citation, state=CitationState.CHANGED, checked_commit=base)
    state = CitationState.FRESH if start == citation.start_line else CitationState.MOVED
    return replace(
        citation,
        start_line=start,
        end_line=start + span - 1,
        commit=base,
        branch=branch or citation.branch,
        state=state,
        checked_commit=base,
    )


def _lines_find(lines: list[bytes], span: int, content_hash: str, *, near: int) -> int | None:
    """The 1-based first line of `span` lines hashing to `content_hash`, the one nearest
    `near` when several do; None when none does."""
    if span > len(lines):
        return None
    if near + span - 1 <= len(lines) and (
        code.lines_hash(lines[near - 1 : near - 1 + span]) == content_hash
    ):
        return near
    best = None
    for index in range(len(lines) - span + 1):
        if code.lines_hash(lines[index : index + span]) == content_hash:
            start = index + 1
            if best is None or abs(start - near) < abs(best - near):
                best = start
    return best
