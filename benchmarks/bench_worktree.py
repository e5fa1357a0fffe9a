#!/usr/bin/env python
"""Preparing a task's worktree on a host: the first task of a repository there (a cold
mirror: the whole repository fetched, then checked out) against the next ones (a warm
mirror: a fetch that finds nothing new, then the checkout), and the disk each task takes.

The repository is built here with `git fast-import`: --files files of random text (about
--megabytes MB in all, as a pack) and a history of --commits commits, served as a bare
repository over file://. Each measurement is `worker.workspace.workspace_open` (what the
worker runs before a task's agent starts) followed by its close; cold runs start from an
empty repository cache. Also printed: keeping a one-file turn (commit, diff, push).

    .venv/bin/python benchmarks/bench_worktree.py [--megabytes 100] [--repeats 5] [--save]
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import harness


def build_repository(folder: Path, *, megabytes: int, files: int, commits: int) -> Path:
    """A bare repository whose `main` holds `files` files of random base64 text (about
    `megabytes` MB packed) and `commits` commits of history."""
    path = folder / "remote.git"
    env = {
        "PATH": os.environ["PATH"],
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True, env=env)
    rng = random.Random(7)
    per_file = megabytes * 2**20 // files  # random base64 text packs to about its own size
    stream = []
    stamp = 1_700_000_000
    for number in range(1, commits + 1):
        message = f"commit {number}\n"
        stream += [
            "commit refs/heads/main",
            f"mark :{number}",
            f"committer Bench <bench@example.com> {stamp + number} +0000",
            f"data {len(message)}",
            message.rstrip("\n"),
        ]
        if number > 1:
            stream.append(f"from :{number - 1}")
        changed = range(files) if number == 1 else [rng.randrange(files)]
        for index in changed:
            text = base64.encodebytes(rng.randbytes(per_file * 3 // 4)).decode()
            stream += [f"M 100644 inline src/module_{index:04d}.txt", f"data {len(text)}", text]
    data = "\n".join(stream).encode()
    subprocess.run(["git", "fast-import", "--quiet"], input=data, cwd=path, check=True, env=env)
    subprocess.run(["git", "gc", "-q"], cwd=path, check=True, env=env)
    return path


def main() -> None:
    arguments = harness.parser(__doc__)
    arguments.add_argument("--megabytes", type=int, default=100)
    arguments.add_argument("--files", type=int, default=2000)
    arguments.add_argument("--commits", type=int, default=500)
    arguments.add_argument("--repeats", type=int, default=5)
    args = arguments.parse_args()
    with harness.run(args):
        from django.conf import settings
        from django.utils import timezone

        from controlplane.git import folder_size
        from controlplane.models import Repository, Task
        from worker.workspace import workspace_close, workspace_open, workspace_turn_store

        root = Path(tempfile.mkdtemp(prefix="bench-worktree-"))
        started = time.perf_counter()
        remote = build_repository(
            root / "remotes", megabytes=args.megabytes, files=args.files, commits=args.commits
        )
        print(
            f"repository: {args.files} files, {args.commits} commits, "
            f"{folder_size(remote) / 2**20:.1f} MB on disk (built in "
            f"{time.perf_counter() - started:.1f}s)"
        )
        settings.REPOSITORY_FILE_ROOTS = [str(root / "remotes")]
        settings.WORKER_REPO_CACHE = str(root / "cache")
        settings.WORKER_TASK_ROOT = str(root / "tasks")
        settings.WORKER_REPO_MIRROR_MAX_BYTES = 10 * 2**30
        settings.WORKER_WORKTREE_MAX_BYTES = 10 * 2**30
        owner = harness.user_create("bench-owner")
        project = harness.project_create(owner)
        Repository.objects.create(project=project, url=f"file://{remote}", default_branch="main")

        def new_task() -> Task:
            return Task.objects.create(
                project=project, user=owner, prompt="bench", branch="main", queued_at=timezone.now()
            )

        def prepare(task: Task) -> tuple[float, dict[str, int]]:
            began = time.perf_counter()
            workspace = workspace_open(task)
            seconds = time.perf_counter() - began
            sizes = {
                "worktree": folder_size(workspace.paths.worktree),
                "task git folder": folder_size(workspace.paths.root),
                "mirror": folder_size(workspace.mirror),
            }
            workspace_close(workspace)
            return seconds, sizes

        cold, warm = [], []
        for _ in range(args.repeats):
            shutil.rmtree(root / "cache", ignore_errors=True)
            seconds, sizes = prepare(new_task())
            cold.append(seconds)
            for _ in range(2):
                warm.append(prepare(new_task())[0])
        cold_s, warm_s = statistics.median(cold), statistics.median(warm)
        print(f"{args.repeats} cold and {len(warm)} warm preparations; seconds (median, best)")
        print(f"  cold mirror (first task on the host): {cold_s:6.2f}  {min(cold):6.2f}")
        print(f"  warm mirror (the next task):          {warm_s:6.2f}  {min(warm):6.2f}")
        print(f"  cold / warm: {cold_s / warm_s:.1f}x")
        print("disk, MB:")
        print(f"  the mirror (once per repository and host): {sizes['mirror'] / 2**20:8.1f}")
        per_task = sizes["worktree"] + sizes["task git folder"]
        print(
            f"  per task: {per_task / 2**20:8.1f} (worktree {sizes['worktree'] / 2**20:.1f}, "
            f"its own git folder {sizes['task git folder'] / 2**20:.2f})"
        )

        task = new_task()
        workspace = workspace_open(task)
        Task.objects.filter(pk=task.pk).update(status="running", worker_id="bench")
        (workspace.paths.worktree / "src" / "module_0000.txt").write_text("changed\n")
        began = time.perf_counter()
        changes = workspace_turn_store(workspace, turn=1, worker_id="bench", claimed_at=None)
        stored = time.perf_counter() - began
        workspace_close(workspace)
        print(
            f"keeping a one-file turn (commit, diff, push to the remote): {stored:.2f}s, "
            f"{changes.diff.files_changed} file, diff {changes.diff.diff_bytes} bytes"
        )
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
