"""A project's repository: attaching it (with an optional write-only credential), removing
it, and what workers learn about its remote.

The credential is encrypted before it is stored (`controlplane.credentials`) and never
returned, logged or audited: the audit event says only whether one was set, kept or removed.
Changing the URL drops the stored credential unless a new one comes with it, so a token is
never sent to a host its owner did not give it for.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from controlplane.credentials import credential_encrypt
from controlplane.errors import DomainError, NotFoundError
from controlplane.limits import text_problem
from controlplane.models import Project, Repository
from controlplane.repository_urls import (
    RepositoryUrlError,
    branch_name_problem,
    remote_url_parse,
)
from controlplane.services.audit import audit_record

CREDENTIAL_MAX_CHARS = 16_384
# `credential` left out of a PUT: keep the stored one (while the URL stays the same).
KEEP = object()
# What `Repository.last_error` keeps of a failed fetch's reason.
REACH_ERROR_MAX_CHARS = 2000


def _credential_problem(credential: str, *, kind: str) -> str:
    if not isinstance(credential, str) or not credential.strip():
        return "A credential is a non-empty string (null removes the stored one)."
    if len(credential) > CREDENTIAL_MAX_CHARS:
        return f"At most {CREDENTIAL_MAX_CHARS} characters."
    problem = text_problem(credential)
    if problem:
        return problem
    if kind == "file":
        return "A file:// repository takes no credential."
    if kind == "https" and any(ch.isspace() or ord(ch) < 32 for ch in credential):
        return "An https credential is a token: one line, no spaces."
    if kind == "ssh" and not ("-----BEGIN" in credential and "PRIVATE KEY-----" in credential):
        return "An ssh credential is a private key (-----BEGIN ... PRIVATE KEY-----)."
    return ""


@transaction.atomic
def repository_set(
    *, actor, project: Project, url: str, default_branch: str, credential=KEEP
) -> tuple[Repository, bool]:
    """Attach or change the project's repository; `(repository, created)`.

    `credential`: a string sets it, None removes it, KEEP (absent) keeps the stored one if
    the URL is unchanged and drops it otherwise. Nothing is written on a 400.
    """
    try:
        remote = remote_url_parse(url)
    except RepositoryUrlError as exc:
        raise DomainError(str(exc), field="url") from None
    problem = (
        branch_name_problem(default_branch)
        if isinstance(default_branch, str)
        else ("Not a valid string.")
    )
    if problem:
        raise DomainError(problem, field="default_branch")
    if credential is not KEEP and credential is not None:
        problem = _credential_problem(credential, kind=remote.kind)
        if problem:
            raise DomainError(problem, field="credential")
    repository = Repository.objects.select_for_update().filter(project=project).first()
    created = repository is None
    if created:
        repository = Repository(project=project, created_by=actor if actor else None)
    url_changed = repository.url != remote.url
    now = timezone.now()
    if credential is KEEP:
        change = "kept" if repository.credential_ciphertext else "none"
        if url_changed and repository.credential_ciphertext:
            repository.credential_ciphertext, repository.credential_set_at = "", None
            change = "dropped_with_url"
    elif credential is None:
        change = "removed" if repository.credential_ciphertext else "none"
        repository.credential_ciphertext, repository.credential_set_at = "", None
    else:
        repository.credential_ciphertext = credential_encrypt(credential)
        repository.credential_set_at = now
        change = "set"
    if url_changed:
        repository.last_checked_at = repository.last_reached_at = None
        repository.last_error = ""
    repository.url = remote.url
    repository.default_branch = default_branch
    repository.save()
    audit_record(
        action="repository_created" if created else "repository_changed",
        actor=actor,
        target_type="project",
        target_id=project.pk,
        data={"url": remote.url, "default_branch": default_branch, "credential": change},
    )
    return repository, created


@transaction.atomic
def repository_delete(*, actor, project: Project) -> None:
    """Detach the project's repository (its credential goes with it); 404 when none.
    Tasks already queued on one of its branches fail when claimed, saying so."""
    repository = Repository.objects.select_for_update().filter(project=project).first()
    if repository is None:
        raise NotFoundError("This project has no repository.")
    url = repository.url
    repository.delete()
    audit_record(
        action="repository_deleted",
        actor=actor,
        target_type="project",
        target_id=project.pk,
        data={"url": url},
    )


def repository_get(*, project: Project) -> Repository:
    """The project's repository; 404 when it has none."""
    repository = Repository.objects.filter(project=project).first()
    if repository is None:
        raise NotFoundError("This project has no repository.")
    return repository


def repository_reach_record(*, repository_id: int, error: str, now: datetime | None = None) -> None:
    """What a worker's fetch found: the remote reached (`error` "") or why not. One update."""
    now = now or timezone.now()
    values = {"last_checked_at": now, "last_error": error[:REACH_ERROR_MAX_CHARS]}
    if not error:
        values["last_reached_at"] = now
    Repository.objects.filter(pk=repository_id).update(**values)
