"""The host control plane's models: projects, memberships, tasks, messages, quotas, usage,
memories, audit, tokens. One module per subject; every model is importable from here."""

from controlplane.models.audit import (  # noqa: F401
    AuditEvent,
)
from controlplane.models.constraints import choices_check  # noqa: F401
from controlplane.models.memories import (  # noqa: F401
    IdentityMemory,
    MemoryScope,
    MemorySource,
    MemoryStatus,
    MemoryVisibility,
)
from controlplane.models.projects import (  # noqa: F401
    CREATE_TASK_ROLES,
    Membership,
    Project,
    Role,
)
from controlplane.models.repositories import (  # noqa: F401
    REPOSITORY_SHOWN_FIELDS,
    Repository,
    TaskDiff,
)
from controlplane.models.tasks import (  # noqa: F401
    TERMINAL_STATUSES,
    Task,
    TaskEvent,
    TaskFollowup,
    TaskKind,
    TaskStatus,
    task_title,
)
from controlplane.models.tokens import (  # noqa: F401
    API_TOKEN_SHOWN_FIELDS,
    ApiToken,
)
from controlplane.models.usage import (  # noqa: F401
    USAGE_TOKEN_FIELDS,
    MonthlySpend,
    Quota,
    UsageKind,
    UsageRecord,
)
