"""Memories that cite code, checked against the code before they are given to an agent.

`memories_gate` is the one step injection, `memory_search` and the preview take between
ranking memories and showing them: it takes the candidates' citations and branch scopes
from their rows (the ranked read folds them in), checks the citations against the commit
the task starts from (`checks.citations_check`: at most one `git diff --name-only` per
commit pair, cached, and one `git cat-file --batch`), saves what changed (one statement),
and says which memories are left out: `stale_code` (a citation `changed` or `deleted`) and
`other_branch` (drawn on a branch not merged into the default branch yet while the task is
on another branch, or citing a task's work not merged into the task's base).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from automemory.models.citations import STALE_STATES, CitationState
from automemory.services.citations import code, store
from automemory.services.citations.checks import Cited, citations_check
from controlplane.git import GitError, git_run
from controlplane.services.mirrors import LOCAL_TIMEOUT_SECONDS, git_dir_env

logger = logging.getLogger(__name__)

STALE_CODE = "stale_code"
OTHER_BRANCH = "other_branch"


@dataclass(frozen=True)
class CodeView:
    """The code a task starts from: the repository's bare copy on this host (`git_dir`,
    None when there is none or it cannot be read: `unavailable` says why), the commit
    (`commit`), the task's branch and the repository's default branch."""

    git_dir: Path | None
    commit: str
    branch: str
    default_branch: str
    unavailable: str = ""


@dataclass
class Gate:
    """What the gate found: each memory's citations as checked (`citations`, by memory id)
    and the memories left out with why (`left_out`, by memory id)."""

    citations: dict[int, list[Cited]] = field(default_factory=dict)
    left_out: dict[int, str] = field(default_factory=dict)

    def allowed(self, memories: list) -> list:
        """`memories` without those left out, each given its checked citations
        (`code_citations`) and the line the block shows of them (`code_citations_note`)."""
        kept = [m for m in memories if m.pk not in self.left_out]
        for memory in kept:
            memory.code_citations = self.citations.get(memory.pk, [])
            # Written once: the block is rendered again for every memory it tries to fit.
            memory.code_citations_note = citations_note(memory.code_citations)
        return kept


def memories_gate(memories: list, view: CodeView | Callable[[], CodeView | None] | None) -> Gate:
    """Check the memories' citations and branch scopes against `view` (see the module). The
    memories come from a ranked read, their citations folded into their rows
    (`store.folded_columns`); no statement reads them again. Statements: at most two
    writes (what the check changed, the branches found merged), whatever the number.
    `view` may be a function making it, called only when a memory cites code or is scoped
    to a branch (the API process's view may fetch the mirror)."""
    gate = Gate()
    cited: dict[int, list[Cited]] = {}
    scopes: dict[int, tuple[str, str]] = {}
    for memory in memories:
        citations, scope = store.folded_read(memory)
        if citations:
            cited[memory.pk] = citations
        if scope:
            scopes[memory.pk] = scope
    if callable(view):
        view = view() if cited or scopes else None
    before = [c for citations in cited.values() for c in citations]
    if before:
        if view is None or view.git_dir is None:
            why = view.unavailable if view else "the task has no repository"
            logger.warning("%s citations left unchecked: %s", len(before), why)
        after = citations_check(
            before,
            git_dir=view.git_dir if view else None,
            base=view.commit if view else "",
            branch=view.branch if view else "",
        )
        store.checks_save(before, after)
        for citation in after:
            gate.citations.setdefault(citation.memory_id, []).append(citation)
            if citation.state in STALE_STATES:
                gate.left_out[citation.memory_id] = STALE_CODE
            elif citation.state == CitationState.UNMERGED:
                gate.left_out.setdefault(citation.memory_id, OTHER_BRANCH)
    merged = []
    for memory_id, (branch, commit) in scopes.items():
        if view is not None and view.branch == branch:
            continue
        if view is not None and _merged(view, commit):
            merged.append(memory_id)
            continue
        gate.left_out[memory_id] = OTHER_BRANCH
    store.branch_merged_save(merged)
    return gate


def _merged(view: CodeView, commit: str) -> bool:
    """Whether `commit` is reachable from the default branch's head: the task's own base when
    the task is on the default branch (cached per pair), else the branch as the copy has it."""
    if view.git_dir is None:
        return False
    try:
        if view.branch == view.default_branch:
            return code.is_ancestor(view.git_dir, commit, view.commit)
        result = git_run(
            ["merge-base", "--is-ancestor", commit, f"refs/heads/{view.default_branch}"],
            env=git_dir_env(view.git_dir),
            timeout=LOCAL_TIMEOUT_SECONDS,
            check=False,
        )
        return result.returncode == 0
    except (GitError, OSError) as exc:
        logger.warning("whether %s is merged could not be read: %s", commit[:12], exc)
        return False


def citations_note(citations: list[Cited]) -> str:
    """How a memory's citations read in the block and in search results:
    `Cites: api/client.py:40-60, web/x.py:3-3 (not checked against the code)`."""
    if not citations:
        return ""
    parts = ", ".join(f"{c.path}:{c.start_line}-{c.end_line}" for c in citations)
    unchecked = any(c.state == "unchecked" for c in citations)
    return f"Cites: {parts}" + (" (not checked against the code)" if unchecked else "")
