"""Full-text search over memories, on the database's own engine, and the search words a
memory is found by besides its content (`MemorySearch.keywords`).

SQLite: an FTS5 table `automemory_memory_fts` holding each memory's content and keywords
(porter stemming), ranked with BM25. PostgreSQL: a `document` tsvector column (English
configuration) of `automemory_memory_search` with a GIN index, ranked with `ts_rank_cd`.

Both are auto memory's, created by its migration 0031 and kept by triggers on the host's
memory table and its own. A task's text becomes a query of its distinct content words
(stop words dropped, at most `MAX_QUERY_TERMS`) OR-ed together: any word may match, and
memories matching more and rarer words rank first. The words are extracted here
and passed as bound parameters or as quoted FTS5 strings, so no operator, quote or bracket
in the task's text ever reaches the search syntax.
"""

import importlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connections
from django.db.migrations.recorder import MigrationRecorder

from automemory.models import MemorySearch

logger = logging.getLogger(__name__)

# The index's objects, as the migration that creates them spells them.
INDEX_MIGRATION = "automemory.migrations.0031_memory_search_index"
_index = importlib.import_module(INDEX_MIGRATION)
FTS_TABLE = _index.FTS
SEARCH_TABLE = _index.SEARCH
MAX_QUERY_TERMS = 32
# A query is built from the start of the text: enough for any goal and prompt, and the cost
# of tokenising a huge prompt stays bounded.
MAX_QUERY_SOURCE_CHARS = 20_000
MIN_TERM_CHARS = 2
MAX_TERM_CHARS = 40

# Letters and digits only: underscores, punctuation and FTS operators split words.
_TERM = re.compile(r"[^\W_]+")

# Stop words: function words, and the request verbs most task prompts open with ("add",
# "fix", "update"...), which say what to do, not what the task is about.
_STOP_WORDS_TEXT = """
    a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing done down during
    each either else etc ever every few for from further get gets getting got had has have
    having he her here hers him his how i if in into is it its itself just let lets like
    make makes may me might more most much must my need needs no nor not now of off on once
    one only or other our ours out over own please same shall she should so some such than
    that the their theirs them then there these they this those through to too under until
    up upon us use used using very via was we were what when where which while who whom why
    will with within without would yet you your yours
    new thing things way want wants sure ok okay
    add adds added fix fixes fixed change changes changed update updates updated create
    creates created remove removes removed write check look looks help work works working
    try tried still today tomorrow again know see seems
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())


def query_terms(text: str, *, limit: int = MAX_QUERY_TERMS) -> list[str]:
    """The distinct content words of `text` (case-folded, first seen first), at most `limit`.

    Words are runs of letters and digits; stop words, one-letter words and runs longer
    than `MAX_TERM_CHARS` (hashes, base64) are dropped.
    """
    terms: list[str] = []
    seen: set[str] = set()
    for match in _TERM.finditer(text[:MAX_QUERY_SOURCE_CHARS]):
        word = match.group().casefold()
        if (
            word in seen
            or word in STOP_WORDS
            or not MIN_TERM_CHARS <= len(word) <= MAX_TERM_CHARS
            or word.isdigit()
        ):
            continue
        seen.add(word)
        terms.append(word)
        if len(terms) >= limit:
            break
    return terms


def fts5_match_expression(terms: list[str]) -> str:
    """An FTS5 MATCH string: every term a quoted string, OR-ed (quotes inside are doubled)."""
    return " OR ".join('"{}"'.format(term.replace('"', '""')) for term in terms)


@dataclass(frozen=True)
class MatchSql:
    """SQL pieces that find memories matching some terms and score them.

    `from_sql` names the memory table `m`; `condition` selects matching rows; `score` is
    lower for a better match on both databases. `params` bind `from_sql` then `condition`.
    """

    from_sql: str
    condition: str
    score: str
    params: tuple


def match_sql(terms: list[str], vendor: str) -> MatchSql:
    """How to find and score memories matching `terms` (non-empty) on `vendor`."""
    if vendor == "sqlite":
        return MatchSql(
            from_sql=f"{FTS_TABLE} CROSS JOIN identity_memories m ON m.id = {FTS_TABLE}.rowid",
            condition=f"{FTS_TABLE} MATCH %s",
            score=f"bm25({FTS_TABLE})",
            params=(fts5_match_expression(terms),),
        )
    if vendor == "postgresql":
        query = " || ".join(["plainto_tsquery('english'::regconfig, %s)"] * len(terms))
        return MatchSql(
            from_sql=(
                f"{SEARCH_TABLE} s JOIN identity_memories m ON m.id = s.memory_id"
                f" CROSS JOIN (SELECT {query} AS query) AS q"
            ),
            condition="s.document @@ q.query",
            score="-ts_rank_cd(s.document, q.query)",
            params=tuple(terms),
        )
    raise NotImplementedError(f"no full-text search for database vendor {vendor!r}")


def search_supported(vendor: str) -> bool:
    """Whether memories can be searched on this database (else ranking falls back to recency)."""
    return vendor in ("sqlite", "postgresql")


def memory_keywords(memory_id: int) -> list[str]:
    """The search words stored with a memory (none for a memory without)."""
    found = MemorySearch.objects.filter(memory_id=memory_id).values_list("keywords", flat=True)
    keywords = next(iter(found), None)
    return list(keywords) if isinstance(keywords, list) else []


def memory_keywords_set(memory_id: int, keywords: Sequence[str]) -> None:
    """Store a memory's search words (cleaned by the caller); the index follows by trigger.

    The memory's row exists from its insert (a trigger on the host's table writes it)."""
    MemorySearch.objects.filter(memory_id=memory_id).update(keywords=list(keywords))


def search_triggers_drop(*, using: str = "default", **_kwargs) -> None:
    """Drop the SQLite search triggers before `migrate` runs (pre_migrate);
    `search_index_ensure` puts them back after, with the index written afresh.

    The host's memory table has triggers naming `automemory_memory_search`: SQLite re-reads
    every trigger when a migration rebuilds a table (copy, drop, rename), and one naming the
    dropped table fails the rename, so the table could not be rebuilt under them.
    """
    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        for name in _index.SQLITE_TRIGGERS:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


def search_index_ensure(*, using: str = "default", **_kwargs) -> None:
    """Recreate the SQLite search triggers if they are missing, and re-index.

    Run after every `migrate` (post_migrate): `search_triggers_drop` dropped them, or a
    table rebuild did (Django rebuilds a SQLite table to alter some of its columns, which
    drops the table's triggers). The index is written afresh from both tables, memories a
    migration wrote meanwhile included. PostgreSQL keeps its triggers.
    """
    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    applied = MigrationRecorder(connection).applied_migrations()
    if ("automemory", INDEX_MIGRATION.rpartition(".")[2]) not in applied:
        return  # not migrated this far yet: the migration creates them
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN"
            f" ({', '.join(['%s'] * len(_index.SQLITE_TRIGGERS))})",
            list(_index.SQLITE_TRIGGERS),
        )
        if len(cursor.fetchall()) == len(_index.SQLITE_TRIGGERS):
            return
        # Expected after every `migrate`: nothing an operator must act on.
        logger.debug("re-creating the memory search triggers and index")
        for statement in (*_index.SQLITE_DROP, *_index.SQLITE_CREATE):
            cursor.execute(statement)
