"""Inside an agent's sandbox: the bridge from its private network to the worker's egress door.

Run by bubblewrap as `python netbridge.py SOCKET_FOLDER -- AGENT ARGS...` in a network
namespace that has only a loopback interface (`worker/sandbox.py`). For each
`port-<N>.sock` in SOCKET_FOLDER it listens on `127.0.0.1:N` and passes each connection
through the socket (the worker connects it on to `127.0.0.1:N` of the host); for
`proxy.sock`, on a free loopback port that `HTTP_PROXY`/`HTTPS_PROXY` name. Then it starts the
agent with those variables added, hands on the signals it gets, and exits with the agent's
status. Everything is bound before the agent starts, so its first connection finds the
listener.

A single file of the standard library: the sandbox shows the worker's Python and this file,
not the project.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading

CHUNK = 64 * 1024
PROXY_SOCKET = "proxy.sock"
LOOPBACK_NAMES = "localhost,127.0.0.1,::1"
# The memory relay (automemory/memory_relay.py) takes only its own variable, not the others.
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "CONTROLPLANE_MEMORY_PROXY",
)


def pipe(source: socket.socket, target: socket.socket) -> None:
    """Copy one direction until its end, then half-close the other side."""
    try:
        while chunk := source.recv(CHUNK):
            target.sendall(chunk)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def serve(listener: socket.socket, socket_path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=connect, args=(client, socket_path), daemon=True).start()


def connect(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
    back.start()
    pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def listen(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    return listener


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: netbridge.py SOCKET_FOLDER -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    folder, command = argv[0], argv[2:]
    # Inside the sandbox: this process's environment is already the agent's allow-listed one
    # (worker/sandbox.py built it from nothing); the agent gets it with the proxy names added.
    env = dict(os.environ)
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith("port-") and name.endswith(".sock"):
            port = int(name[len("port-") : -len(".sock")])
            listener = listen(port)
        elif name == PROXY_SOCKET:
            listener = listen(0)
            proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
            for variable in PROXY_VARIABLES:
                env[variable] = proxy
        else:
            continue
        threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    # Loopback destinations are this sandbox's own listeners: never sent to the proxy.
    env["NO_PROXY"] = env["no_proxy"] = LOOPBACK_NAMES
    try:
        agent = subprocess.Popen(command, env=env)
    except OSError as exc:
        print(f"netbridge: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda received, _frame: agent.send_signal(received))
    while True:
        try:
            status = agent.wait()
            break
        except InterruptedError:
            continue
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
