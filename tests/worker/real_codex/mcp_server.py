"""A small MCP server over stdio (newline-delimited JSON-RPC 2.0) for the real `codex` CLI.

One tool, `search(query)`, answers from a fixed text. Each call is appended as one JSON line
to the file named by FAKE_MCP_LOG, so tests can see that the agent really called it.
"""

import json
import os
import sys

TOOLS = [
    {
        "name": "search",
        "description": "Search the project documentation.",
        "inputSchema": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    }
]


def reply(message_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message_id, "result": result}) + "\n")
    sys.stdout.flush()


def fail(message_id, code, text):
    error = {"code": code, "message": text}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message_id, "error": error}) + "\n")
    sys.stdout.flush()


def handle(message):
    method = message.get("method")
    message_id = message.get("id")
    if message_id is None:
        return  # a notification (notifications/initialized and the like)
    if method == "initialize":
        reply(
            message_id,
            {
                "protocolVersion": message.get("params", {}).get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "docs", "version": "1.0.0"},
            },
        )
    elif method == "tools/list":
        reply(message_id, {"tools": TOOLS})
    elif method == "tools/call":
        params = message.get("params") or {}
        arguments = params.get("arguments") or {}
        log = os.environ.get("FAKE_MCP_LOG")
        if log:
            with open(log, "a") as out:
                out.write(json.dumps({"tool": params.get("name"), "arguments": arguments}) + "\n")
        text = f"Sessions expire after 15 minutes (searched: {arguments.get('query', '')})"
        reply(message_id, {"content": [{"type": "text", "text": text}], "isError": False})
    elif method == "ping":
        reply(message_id, {})
    else:
        fail(message_id, -32601, f"method not found: {method}")


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            handle(message)


if __name__ == "__main__":
    main()
