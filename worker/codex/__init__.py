"""Codex support of the worker, one job a module:

- `executor`: `CodexExecutor`, one `codex exec --json` process per turn in the task's sandbox;
- `stream`: its JSONL event stream read line by line (`CodexStream`);
- `usage`: a turn's own token usage, from the CLI's session files or its report, and its price;
- `mcp_config`: the `memory` MCP server as codex is told of it (`-c` overrides);
- `session_files`: the CLI's session files of a thread, and their archive (no database);
- `session_store`: session records (`CodexSession` rows, their archives), `SessionStore`
  that stores and restores them around a run, and their retention;
- `checks`: its settings, checked by `manage.py check`.

Outside this package, only where Django looks for them: the `CodexSession` model
(`worker/models.py`), its admin (`worker/admin.py`), the `codex_sessions_prune` command and
the session metrics (`worker/metrics.py`, with the worker's other counters).
"""

# `worker.executors` registers `CodexExecutor` and holds `worker.executors.base`, which every
# module here imports: loading it first lets either package be imported first.
import worker.executors  # noqa: F401
from worker.codex.executor import CodexExecutor

__all__ = ["CodexExecutor"]
