"""Code citations on memories, as the host's memory API takes and shows them: a memory may
cite lines of its project's code (`{"path", "start_line", "end_line"}`). The host keeps none
of it: an app registers `CitationStore` (automemory does in `ready()`), so the host never
imports the apps that plug into it. Without one, a request naming `citations` is a 400 and
every memory cites nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import Expression

from controlplane.errors import DomainError
from controlplane.models import IdentityMemory, Project


@dataclass(frozen=True)
class CitationStore:
    """`prepare(project=, citations=)`: the citations checked against the project's code,
    ready to store (a `DomainError` naming the field when one cannot be; called before any
    write); `store(memory=, prepared=)`: the memory cites those and nothing else (inside the
    memory's transaction); `column()`: an expression reading a memory row's citations as a
    list of dicts, so a list page stays one statement; `read(memory)`: one memory's."""

    prepare: Callable[..., object]
    store: Callable[..., None]
    column: Callable[[], Expression]
    read: Callable[[IdentityMemory], list[dict]]


_stores: list[CitationStore] = []


def citation_store_register(store: CitationStore) -> None:
    """Keep memories' citations with `store` (one store; a later one replaces it)."""
    _stores[:] = [store]


def citations_prepare(*, project: Project | None, citations: list[dict]) -> object:
    """What `citations_store` stores; a `DomainError` on `citations` when nothing may."""
    if not _stores:
        raise DomainError("this server keeps no citations", field="citations")
    if project is None:
        raise DomainError("only a project's memories may cite code", field="citations")
    return _stores[0].prepare(project=project, citations=citations)


def citations_store(*, memory: IdentityMemory, prepared: object) -> None:
    _stores[0].store(memory=memory, prepared=prepared)


def citations_column() -> Expression | None:
    """The list rows' `citations` expression, None when no store is registered."""
    return _stores[0].column() if _stores else None


def citations_read(memory: IdentityMemory) -> list[dict]:
    return _stores[0].read(memory) if _stores else []
