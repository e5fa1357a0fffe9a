"""Auto memory's own tables: per-user settings, per-task flags, the extraction log, the
sweep's state and drafts, feedback on memories, their embeddings, daily injection counts
and search words, tasks' texts as others read them, the code memories cite, and auto
memory's state of tasks and memories (memory tool keys, injected memories, usage,
provenance)."""

from automemory.models.citations import (  # noqa: F401
    MAX_CITATIONS_PER_MEMORY,
    STALE_STATES,
    CitationState,
    MemoryBranchScope,
    MemoryCitation,
)
from automemory.models.embeddings import MemoryEmbedding  # noqa: F401
from automemory.models.feedback import (  # noqa: F401
    OPEN_PERSON_REPORT,
    FeedbackKind,
    FeedbackVia,
    MemoryFeedback,
    ReportReason,
    TaskMemoryShown,
)
from automemory.models.flags import (  # noqa: F401
    TaskAutoMemoryFlags,
)
from automemory.models.goals import MemoryGoal  # noqa: F401
from automemory.models.injections import MemoryInjectionDay  # noqa: F401
from automemory.models.log import (  # noqa: F401
    AutoMemoryLog,
    Outcome,
    Reason,
)
from automemory.models.search import MemorySearch  # noqa: F401
from automemory.models.settings import (  # noqa: F401
    AutoMemorySettings,
    InjectionRanking,
    mcp_server_names_problems,
    validate_mcp_server_names,
)
from automemory.models.state import (  # noqa: F401
    MEMORY_REVIEW_DEFAULTS,
    MEMORY_STATE_FIELDS,
    MEMORY_USAGE_DEFAULTS,
    MemorySourceTask,
    MemoryState,
    TaskMemoryState,
    injected_ids_of,
    memory_awaiting_approval,
    memory_review,
    memory_usage,
    task_injected_ids,
    tasks_injected_ids,
)
from automemory.models.sweep import (  # noqa: F401
    ExtractionDraft,
    SweepState,
)
from automemory.models.transcripts import TaskTextCleaned  # noqa: F401
