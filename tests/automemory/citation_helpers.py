"""What the citation tests share: a memory written with citations through the service the
API runs, the code a task starts from (the mirror fetched as a worker fetches it), and a
count of the git processes run, through a wrapper around the real git binary."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from automemory.services.citations.gate import CodeView
from automemory.services.injector import inject_memories
from controlplane.models import Repository
from controlplane.services.memories import memory_create
from controlplane.services.mirrors import mirror_fetch
from tests.git_remotes import GIT


def cited_memory(project, user, content: str, *citations: tuple[str, int, int]):
    return memory_create(
        user=user,
        project=project,
        content=content,
        citations=[{"path": p, "start_line": s, "end_line": e} for p, s, e in citations],
    )


def code_view(project, remote, branch: str = "main") -> CodeView:
    """The code a task on `branch` starts from now: its head in the mirror, fetched."""
    repository = Repository.objects.get(project=project)
    return CodeView(mirror_fetch(repository), remote.head(branch), branch, "main")


def injected(task, code: CodeView | None) -> str:
    return inject_memories(task=task, prompt=task.prompt, goal=None, code=code).prompt


class GitCalls:
    """The real git, each run logged (its arguments) before it runs."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / "git-calls.log"
        self.binary = folder / "git-logging"
        self.binary.write_text(f'#!/bin/sh\necho "$*" >> "{self.log}"\nexec "{GIT}" "$@"\n')
        self.binary.chmod(self.binary.stat().st_mode | stat.S_IXUSR)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def reset(self) -> None:
        if self.log.exists():
            os.unlink(self.log)
