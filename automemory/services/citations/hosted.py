"""The citations the host's memory API takes and shows (`controlplane.services.
memory_citations`): checked against the head of the project's default branch in the
control plane's mirror, stored with the memory, read into a list page's one statement."""

from __future__ import annotations

from django.db.models import Expression, JSONField, OuterRef, Subquery

from automemory.models.citations import MemoryCitation
from automemory.services.citations import code_views, store
from automemory.services.citations.anchors import Anchor, CitationRefused, anchors_make
from controlplane.errors import DomainError
from controlplane.models import IdentityMemory, Project, Repository
from controlplane.services.memory_citations import CitationStore
from controlplane.services.mirrors import branch_head_resolve

OUTPUT_FIELDS = ("path", "start_line", "end_line", "commit", "state")


def citations_prepare(*, project: Project, citations: list[dict]) -> list[Anchor]:
    """The citations checked against the default branch's head now (the mirror fetched when
    over a minute old); a `DomainError` on the field at fault."""
    if not citations:
        return []
    repository = Repository.objects.filter(project_id=project.pk).first()
    if repository is None:
        raise DomainError(
            "the project has no repository to cite (PUT /projects/{id}/repository)",
            field="citations",
        )
    git_dir, why = code_views.mirror_ready(repository, refresh=True)
    head = branch_head_resolve(git_dir, repository.default_branch) if git_dir else None
    if git_dir is None or head is None:
        raise DomainError(
            why or f"branch {repository.default_branch!r} is not in the repository",
            field="citations",
        )
    try:
        return anchors_make(
            citations, git_dir=git_dir, commit=head, branch=repository.default_branch
        )
    except CitationRefused as exc:
        raise DomainError(exc.message, field=exc.field) from None


def citations_store(*, memory: IdentityMemory, prepared: list[Anchor] | None) -> None:
    store.citations_replace(memory_id=memory.pk, anchors=prepared or [])


class CitationsColumn(Subquery):
    """A memory's citations (`OUTPUT_FIELDS`, in the order written) read in its own row:
    `json_agg` on PostgreSQL, `json_group_array` of `json_object`s on SQLite. Always a list."""

    def __init__(self) -> None:
        rows = MemoryCitation.objects.filter(memory_id=OuterRef("pk")).order_by("id")
        super().__init__(rows.values(*OUTPUT_FIELDS), output_field=JSONField())

    def as_sql(self, compiler, connection, template=None, **extra_context):
        sql, params = super().as_sql(compiler, connection, **extra_context)
        quote = connection.ops.quote_name
        pairs = ", ".join(f"'{name}', {quote(name)}" for name in OUTPUT_FIELDS)
        return f"(SELECT json_group_array(json_object({pairs})) FROM {sql})", params

    def as_postgresql(self, compiler, connection, **extra_context):
        sql, params = super().as_sql(compiler, connection, **extra_context)
        return f"(SELECT coalesce(json_agg(c), '[]'::json) FROM {sql} AS c)", params

    def get_db_converters(self, connection):
        return [_citation_list]


def _citation_list(value, expression, connection) -> list[dict]:
    if value is None:
        return []
    return store.json_value(value)


def citations_column() -> Expression:
    return CitationsColumn()


def citations_read(memory: IdentityMemory) -> list[dict]:
    return list(
        MemoryCitation.objects.filter(memory_id=memory.pk).order_by("id").values(*OUTPUT_FIELDS)
    )


CITATION_STORE = CitationStore(
    prepare=citations_prepare,
    store=citations_store,
    column=citations_column,
    read=citations_read,
)
