"""A stand-in for the `codex` CLI: prints a realistic `codex exec --json` event stream.

FAKE_CODEX_MODE: ok (default), crash (dies mid-stream with a panic on stderr), turn_failed
(exits 1 after `turn.failed`, with the real CLI's stderr noise), stderr_only (exits 1 with no
failure event: noise, a real message and a backtrace on stderr).
FAKE_CODEX_USAGE: per_turn (default) or cumulative: like codex 0.171.0, `exec resume` reports
the thread's total so far in `turn.completed.usage` (kept per thread under $CODEX_HOME).
FAKE_CODEX_TURN_USAGE: this turn's usage as a JSON object (default 1M input, 400k cached, 100k
output).
FAKE_CODEX_SESSION_FILE: when set, the thread's totals are also appended, like the real
CLI's rollout file, to $CODEX_HOME/sessions/2026/11/30/rollout-...-<thread>.jsonl.
FAKE_CODEX_LOG: a file to which each call appends {"argv", "stdin", "cwd"} as one JSON line.
The last agent message is "Done: <stdin>", so tests see what the executor was asked to run.
"""

import json
import os
import sys
from pathlib import Path

NEW_THREAD = "0199a213-81c0-7800-8aa1-bbab2a035a53"
TURN_USAGE = {
    "input_tokens": 1_000_000,
    "cached_input_tokens": 400_000,
    "cache_write_input_tokens": 0,
    "output_tokens": 100_000,
    "reasoning_output_tokens": 0,
}
PATH_ALIAS_WARNING = (
    "WARNING: proceeding, even though we could not create PATH aliases: Refusing to create "
    'helper binaries under temporary dir "/tmp"\n'
)
ROUTER_ERROR = (
    "2026-11-30T16:03:30.719050Z ERROR codex_core::tools::router: "
    "error=unsupported call: mcp__docs__search\n"
)


def thread_total(thread, turn):
    """The thread's usage with this turn added, kept in a file per thread under $CODEX_HOME."""
    home = Path(os.environ.get("CODEX_HOME") or ".")
    state = home / "fake-threads" / f"{thread}.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    total = json.loads(state.read_text()) if state.exists() else {}
    total = {key: total.get(key, 0) + value for key, value in turn.items()}
    state.write_text(json.dumps(total))
    if os.environ.get("FAKE_CODEX_SESSION_FILE"):
        rollout = home / "sessions/2026/11/30" / f"rollout-2026-11-30T00-00-00-{thread}.jsonl"
        rollout.parent.mkdir(parents=True, exist_ok=True)
        with rollout.open("a") as out:
            context = {"type": "turn_context", "payload": {"model": "gpt-5-mini"}}
            out.write(json.dumps(context) + "\n")
            info = {"total_token_usage": total, "last_token_usage": turn}
            count = {"type": "event_msg", "payload": {"type": "token_count", "info": info}}
            out.write(json.dumps(count) + "\n")
    return total


def emit(event):
    print(json.dumps(event), flush=True)


def item(kind, item_id, **fields):
    return {"type": kind, "item": {"id": item_id, **fields}}


def main():
    argv = sys.argv[1:]
    prompt = sys.stdin.read()
    log = os.environ.get("FAKE_CODEX_LOG")
    if log:
        with open(log, "a") as out:
            out.write(json.dumps({"argv": argv, "stdin": prompt, "cwd": os.getcwd()}) + "\n")
    mode = os.environ.get("FAKE_CODEX_MODE", "ok")
    thread = argv[argv.index("resume") + 1] if "resume" in argv else NEW_THREAD

    emit({"type": "thread.started", "thread_id": thread})
    emit(item("item.completed", "item_w", type="error", message="Model metadata not found"))
    emit({"type": "turn.started"})
    print("Reading prompt from stdin...", flush=True)  # not JSON: skipped with a warning
    emit(item("item.completed", "item_0", type="reasoning", text="**Looking at the login code**"))
    emit(
        item(
            "item.started",
            "item_1",
            type="command_execution",
            command="bash -lc 'rg login'",
            aggregated_output="",
            exit_code=None,
            status="in_progress",
        )
    )
    emit(
        item(
            "item.completed",
            "item_1",
            type="command_execution",
            command="bash -lc 'rg login'",
            aggregated_output="auth.py:12: def login(",
            exit_code=0,
            status="completed",
        )
    )
    emit(
        item(
            "item.started",
            "item_2",
            type="mcp_tool_call",
            server="docs",
            tool="search",
            arguments={"q": "session timeout"},
            result=None,
            error=None,
            status="in_progress",
        )
    )
    emit(
        item(
            "item.completed",
            "item_2",
            type="mcp_tool_call",
            server="docs",
            tool="search",
            arguments={"q": "session timeout"},
            result={
                "content": [{"type": "text", "text": "Sessions expire after 15 minutes"}],
                "structured_content": None,
            },
            error=None,
            status="completed",
        )
    )
    print('{"type": "item.completed", "item": {"id": "item_3", "ty', flush=True)  # cut short
    # the real CLI's web_search items carry two "id" keys: its own, then the model's
    print(
        '{"type":"item.completed","item":{"id":"item_4","type":"web_search","id":"ws_91",'
        '"query":"django session expiry","action":{"type":"search",'
        '"query":"django session expiry"}}}',
        flush=True,
    )
    emit(["not", "an", "event"])
    emit(item("item.completed", "item_5", type="agent_message", text="Looking into it."))
    if mode == "crash":
        sys.stderr.write(
            "thread 'main' panicked at core/src/codex.rs:812:\n"
            "stream disconnected before completion\n"
        )
        sys.exit(101)
    emit(
        item(
            "item.completed",
            "item_6",
            type="file_change",
            changes=[{"path": "auth.py", "kind": "update"}],
            status="completed",
        )
    )
    if mode == "turn_failed":
        sys.stderr.write(PATH_ALIAS_WARNING + ROUTER_ERROR)
        emit({"type": "error", "message": "Reconnecting... 1/5"})
        emit({"type": "error", "message": "exceeded retry limit, last status: 429"})
        emit({"type": "turn.failed", "error": {"message": "usage limit reached"}})
        sys.exit(1)
    if mode == "stderr_only":
        sys.stderr.write(
            PATH_ALIAS_WARNING
            + ROUTER_ERROR
            + "Error: thread/resume: no rollout found for thread id th-9\n\n"
            + "Stack backtrace:\n   0: <unknown>\n   1: <unknown>\n"
        )
        sys.exit(1)
    emit({"type": "error", "message": "Reconnecting... 1/5"})  # transient: the turn goes on
    emit(item("item.completed", "item_7", type="agent_message", text=f"Done: {prompt}"))
    turn = {**TURN_USAGE, **json.loads(os.environ.get("FAKE_CODEX_TURN_USAGE") or "{}")}
    total = thread_total(thread, turn)
    resumed = "resume" in argv
    cumulative = os.environ.get("FAKE_CODEX_USAGE") == "cumulative"
    emit({"type": "turn.completed", "usage": total if resumed and cumulative else turn})


if __name__ == "__main__":
    main()
