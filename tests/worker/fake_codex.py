"""A stand-in for the `codex` CLI: prints a realistic `codex exec --json` event stream.

FAKE_CODEX_MODE: ok (default), crash (dies mid-stream with a panic on stderr), turn_failed.
FAKE_CODEX_LOG: a file to which each call appends {"argv", "stdin", "cwd"} as one JSON line.
The last agent message is "Done: <stdin>", so tests see what the executor was asked to run.
"""

import json
import os
import sys

NEW_THREAD = "0199a213-81c0-7800-8aa1-bbab2a035a53"


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
    emit(
        item(
            "item.completed",
            "item_4",
            type="web_search",
            query="django session expiry",
            action={"type": "search", "query": "django session expiry"},
        )
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
        emit({"type": "error", "message": "Reconnecting... 1/5"})
        emit({"type": "turn.failed", "error": {"message": "usage limit reached"}})
        sys.exit(1)
    emit({"type": "error", "message": "Reconnecting... 1/5"})  # transient: the turn goes on
    emit(item("item.completed", "item_7", type="agent_message", text=f"Done: {prompt}"))
    emit(
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 1_000_000,
                "cached_input_tokens": 400_000,
                "output_tokens": 100_000,
            },
        }
    )


if __name__ == "__main__":
    main()
