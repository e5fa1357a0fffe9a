"""The memory block: the text put in front of a task's first prompt, and what fits in it.

A header says the notes are past memories for reference only and asks the agent to end its
answer with a `Memories used:` line; the notes sit between two marker lines carrying a
random nonce, each labelled with its id (`#12`) so the agent can cite it, with the code it
cites under it (`Cites: api/client.py:40-60`); a `## Task`
heading follows. The whole block stays within the user's `injection_max_chars`.
"""

from dataclasses import dataclass

from automemory.services.citations.gate import citations_note
from automemory.services.provenance import (
    CITE_NOTE,
    FENCE_NOTE,
    FOOTER,
    HEADER,
    fence_begin,
    fence_end,
    fence_nonce,
    text_neutralised,
)
from controlplane.models import IdentityMemory, MemoryScope

SCOPE_LABELS = {MemoryScope.USER: "About you", MemoryScope.PROJECT: "About this project"}


@dataclass(frozen=True)
class FittedBlock:
    """The block to prepend, the memories in it, and the candidates it had no room for."""

    block: str
    user_memories: list[IdentityMemory]
    project_memories: list[IdentityMemory]
    left_out_for_budget: list[int]

    @property
    def memory_ids(self) -> list[int]:
        return [m.pk for m in self.user_memories + self.project_memories]


def fit_memory_block(
    user_candidates: list[IdentityMemory],
    project_candidates: list[IdentityMemory],
    *,
    max_chars: int,
    nonce: str | None = None,
) -> FittedBlock:
    """The largest block within `max_chars` that takes the candidates in rank order.

    The budget covers the whole block (header, markers, labels, memories). Candidates are
    offered alternately by rank (user 1st, project 1st, user 2nd, ...) so neither scope
    starves the other; one that does not fit whole is skipped, never cut, and a later
    smaller one may still fit. When not even one fits, the block is empty.
    """
    nonce = nonce or fence_nonce()
    chosen: dict[str, list[IdentityMemory]] = {"user": [], "project": []}
    left_out: list[int] = []
    block = ""
    for scope, memory in _alternating(user_candidates, project_candidates):
        chosen[scope].append(memory)
        attempt = render_memory_block(chosen["user"], chosen["project"], nonce=nonce)
        if len(attempt) <= max_chars:
            block = attempt
        else:
            chosen[scope].pop()
            left_out.append(memory.pk)
    return FittedBlock(
        block=block,
        user_memories=chosen["user"],
        project_memories=chosen["project"],
        left_out_for_budget=left_out,
    )


def render_memory_block(
    user_memories: list[IdentityMemory],
    project_memories: list[IdentityMemory],
    *,
    nonce: str | None = None,
) -> str:
    """The header, the fenced memories (user ones first, one bullet each, labelled with
    their id), the task heading.

    The fence's markers carry a random nonce the memories cannot know, and memory text is
    neutralised (no marker lines, no headings, no line of its own), so nothing inside can
    end the block early or pose as the task.
    """
    nonce = nonce or fence_nonce()
    lines = [HEADER, CITE_NOTE, FENCE_NOTE, fence_begin(nonce)]
    for scope, memories in (
        (MemoryScope.USER, user_memories),
        (MemoryScope.PROJECT, project_memories),
    ):
        if not memories:
            continue
        lines.append(f"{SCOPE_LABELS[scope]}:")
        lines.extend(
            f"- #{memory.pk} {memory_text_fenced(memory.content)}{_cites(memory)}"
            for memory in memories
        )
    lines.extend([fence_end(nonce), "", FOOTER])
    return "\n".join(lines)


def memory_text_fenced(content: str) -> str:
    """A memory's text as it sits in the block: inert, every line indented under its bullet.

    Any line break (CR, CRLF, form feed, Unicode line and paragraph separators...) becomes
    a newline followed by the indent, so no memory line can start a line of the block, and
    marker lines and headings are neutralised.
    """
    lines = content.strip().splitlines() or [""]
    return "\n  ".join(text_neutralised(line) for line in lines)


def _cites(memory: IdentityMemory) -> str:
    """The memory's checked code citations, on a line of their own under its text (moved
    ones at their new line numbers), or ""."""
    note = getattr(memory, "code_citations_note", None)
    if note is None:
        note = citations_note(getattr(memory, "code_citations", None) or [])
    return f"\n  {text_neutralised(note)}" if note else ""


def _alternating(
    user_memories: list[IdentityMemory], project_memories: list[IdentityMemory]
) -> list[tuple[str, IdentityMemory]]:
    order = []
    for rank in range(max(len(user_memories), len(project_memories))):
        if rank < len(user_memories):
            order.append(("user", user_memories[rank]))
        if rank < len(project_memories):
            order.append(("project", project_memories[rank]))
    return order
