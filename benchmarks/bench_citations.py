#!/usr/bin/env python
"""What checking memories' citations against the code costs an injection.

A repository of --files files and --commits commits is built with `git fast-import` (each
commit after the first inserts a line at the top of one file, or changes one of its lines),
and --memories project memories cite 3 ranges each of it, written at the commit --moves
commits before the head. Injections then run with the base 1 commit and --moves commits
after the citations' commit (the default branch moved on), through `inject_memories` as the
worker runs it (the mirror and the base commit as `CodeView`). Printed per case:
statements per injection (against the same memories without citations), git processes per
injection (counted by a logging wrapper around the real git: the first injection of a
commit pair, then the next ones), and the injection's time against the same memories
without citations: "first" starts each run from the citations as written (rows put back)
and an empty in-process diff cache, so it pays the whole check and its write; "next" is
the steady state (the diff cached, what the first check found saved).

    .venv/bin/python benchmarks/bench_citations.py [--files 5000] [--commits 10000] [--save]
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import harness

ENV = {
    "PATH": os.environ.get("PATH", ""),
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
LINES_PER_FILE = 40


def file_text(index: int, version: int = 0) -> list[str]:
    return [f"def f_{index}_{line}():  # v{version}" for line in range(LINES_PER_FILE)]


def build_repository(folder: Path, *, files: int, commits: int) -> tuple[Path, list[str]]:
    """A bare repository whose `main` has `commits` commits; the commits, oldest first."""
    path = folder / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True, env=ENV)
    rng = random.Random(7)
    contents = {index: file_text(index) for index in range(files)}
    stream: list[str] = []
    stamp = 1_700_000_000
    for number in range(1, commits + 1):
        message = f"commit {number}"
        stream += [
            "commit refs/heads/main",
            f"mark :{number}",
            f"committer Bench <bench@example.com> {stamp + number} +0000",
            f"data {len(message)}",
            message,
        ]
        if number > 1:
            stream.append(f"from :{number - 1}")
        changed = range(files) if number == 1 else [rng.randrange(files)]
        for index in changed:
            lines = contents[index]
            if number > 1 and number % 2:
                lines.insert(0, f"# inserted by commit {number}")
            elif number > 1:
                at = rng.randrange(len(lines))
                lines[at] = f"{lines[at]}  # changed by {number}"
            text = "\n".join(lines) + "\n"
            stream += [
                f"M 100644 inline src/module_{index:04d}.py",
                f"data {len(text.encode())}",
                text,
            ]
    marks = folder / "marks"
    data = ("\n".join(stream) + "\n").encode()
    subprocess.run(
        ["git", "fast-import", "--quiet", f"--export-marks={marks}"],
        input=data,
        cwd=path,
        check=True,
        env=ENV,
    )
    by_mark = dict(line.split() for line in marks.read_text().splitlines())
    return path, [by_mark[f":{number}"] for number in range(1, commits + 1)]


def logging_git(folder: Path) -> tuple[Path, Path]:
    log = folder / "git-calls.log"
    binary = folder / "git-logging"
    real = shutil.which("git")
    binary.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary, log


def main() -> None:
    arguments = harness.parser(__doc__)
    arguments.add_argument("--files", type=int, default=5000)
    arguments.add_argument("--commits", type=int, default=10000)
    arguments.add_argument("--memories", type=int, default=1000)
    arguments.add_argument("--moves", type=int, default=500)
    arguments.add_argument("--repeats", type=int, default=15)
    args = arguments.parse_args()
    with harness.run(args):
        from django.conf import settings
        from django.utils import timezone

        from automemory.models import MemoryCitation
        from automemory.services.citations import code
        from automemory.services.citations.gate import CodeView
        from automemory.services.injector import inject_memories
        from controlplane.models import IdentityMemory, MemoryScope, MemorySource, Repository, Task
        from controlplane.services.mirrors import mirror_fetch

        root = Path(tempfile.mkdtemp(prefix="bench-citations-"))
        started = time.perf_counter()
        remote, commits = build_repository(root / "remotes", files=args.files, commits=args.commits)
        print(
            f"repository: {args.files} files, {args.commits} commits "
            f"(built with git fast-import in {time.perf_counter() - started:.1f}s)"
        )
        settings.REPOSITORY_FILE_ROOTS = [str(root / "remotes")]
        settings.WORKER_REPO_CACHE = str(root / "cache")
        settings.WORKER_REPO_MIRROR_MAX_BYTES = 10 * 2**30
        owner = harness.user_create("bench-owner", use_memories=True)
        cited_project = harness.project_create(owner, "cited")
        plain_project = harness.project_create(owner, "plain")
        repository = Repository.objects.create(
            project=cited_project, url=f"file://{remote}", default_branch="main"
        )
        mirror = mirror_fetch(repository)
        written_at = commits[-1 - args.moves]
        rng = random.Random(11)
        paths = [f"src/module_{rng.randrange(args.files):04d}.py" for _ in range(args.memories * 3)]
        blobs = code.blobs_read(mirror, written_at, paths)

        now = timezone.now()
        for project in (cited_project, plain_project):
            IdentityMemory.objects.bulk_create(
                IdentityMemory(
                    scope=MemoryScope.PROJECT,
                    project=project,
                    content=f"Fact {i} about module code.",
                    source=MemorySource.MANUAL,
                    created_by=owner,
                    created_at=now,
                )
                for i in range(args.memories)
            )
        memory_ids = list(
            IdentityMemory.objects.filter(project=cited_project).values_list("pk", flat=True)
        )
        rows = []
        for number, path in enumerate(paths):
            lines = code.lines_of(blobs[path].data)
            start = rng.randrange(1, len(lines) - 3)
            rows.append(
                MemoryCitation(
                    memory_id=memory_ids[number // 3],
                    path=path,
                    start_line=start,
                    end_line=start + 2,
                    commit=written_at,
                    branch="main",
                    content_hash=code.lines_hash(lines[start - 1 : start + 2]),
                    checked_commit=written_at,
                )
            )
        MemoryCitation.objects.bulk_create(rows)
        written = list(
            MemoryCitation.objects.values(
                "pk", "start_line", "end_line", "commit", "state", "checked_commit"
            )
        )
        print(
            f"{args.memories} memories with 3 citations each ({len(rows)}), written at the commit "
            f"{args.moves} before the head; {args.memories} more without citations"
        )

        by_pk = {row["pk"]: row for row in written}

        def restore() -> None:
            """The rows a check changed, put back as written (one read, one update)."""
            changed = MemoryCitation.objects.exclude(
                commit=written_at, checked_commit=written_at, state="fresh"
            ).values_list("pk", flat=True)
            MemoryCitation.objects.bulk_update(
                [MemoryCitation(**by_pk[pk]) for pk in changed],
                ["start_line", "end_line", "commit", "state", "checked_commit"],
                batch_size=500,
            )

        def task_of(project) -> Task:
            return Task.objects.create(
                project=project, user=owner, prompt="Fix the module code", queued_at=now
            )

        binary, log = logging_git(root)
        settings.WORKER_GIT_BINARY = str(binary)

        def git_calls(call) -> int:
            log.unlink(missing_ok=True)
            call()
            return len(log.read_text().splitlines()) if log.exists() else 0

        for limit in (5, 50):
            settings.AUTOMEMORY_INJECT_PROJECT_LIMIT = limit
            settings.AUTOMEMORY_INJECT_USER_LIMIT = 0
            print(f"\ninjection limit {limit} project memories ({limit * 3} citations checked)")
            print(
                "  moved | statements (plain, cited) | git (first, next) |"
                " ms: plain, cited first (ratio), cited next (ratio) | moved or changed"
            )
            for moved in (1, args.moves):
                base = commits[-1 - args.moves + moved]
                view = CodeView(mirror, base, "main", "main")
                cited_task, plain_task = task_of(cited_project), task_of(plain_project)

                def cited(task=cited_task, view=view):
                    return inject_memories(task=task, prompt="Fix it", goal=None, code=view)

                def plain(task=plain_task):
                    return inject_memories(task=task, prompt="Fix it", goal=None, code=None)

                restore()
                code.changed_between.cache_clear()
                with harness.captured() as cited_capture:
                    first = git_calls(cited)
                restore()
                following = git_calls(cited)
                with harness.captured() as plain_capture:
                    plain()
                states = MemoryCitation.objects.filter(state__in=["moved", "changed"]).count()

                def cited_cold(cited=cited):
                    restore()
                    code.changed_between.cache_clear()
                    began = time.perf_counter()
                    cited()
                    return time.perf_counter() - began

                def cited_steady(cited=cited):
                    began = time.perf_counter()
                    cited()
                    return time.perf_counter() - began

                def plain_timed(plain=plain):
                    began = time.perf_counter()
                    plain()
                    return time.perf_counter() - began

                def median_ms(call) -> float:
                    return sorted(call() for _ in range(args.repeats))[args.repeats // 2] * 1000

                cold_ms, plain_ms = median_ms(cited_cold), median_ms(plain_timed)
                steady_ms = median_ms(cited_steady)
                statements = (len(plain_capture.statements), len(cited_capture.statements))
                print(
                    f"  {moved:>5} | {statements[0]:>5} {statements[1]:>5}"
                    f"            | {first:>5} {following:>5}   |"
                    f" {plain_ms:6.1f} {cold_ms:6.1f} {cold_ms / plain_ms:5.2f}x"
                    f" {steady_ms:6.1f} {steady_ms / plain_ms:5.2f}x | {states}"
                )
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
