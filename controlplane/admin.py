"""Admin pages for every host model. The audit log is read-only."""

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.utils import timezone
from rest_framework.authtoken.models import TokenProxy

from controlplane.errors import DomainError
from controlplane.models import (
    API_TOKEN_SHOWN_FIELDS,
    REPOSITORY_SHOWN_FIELDS,
    USAGE_TOKEN_FIELDS,
    ApiToken,
    AuditEvent,
    IdentityMemory,
    Membership,
    MemoryStatus,
    MonthlySpend,
    Project,
    Quota,
    Repository,
    Task,
    TaskEvent,
    TaskFollowup,
    UsageRecord,
)
from controlplane.services.audit import audit_record
from controlplane.services.memories import (
    memory_approve,
    memory_content_validate,
    memory_restore,
    memory_text_reviewed,
)
from controlplane.services.sign_in_locks import sign_in_unlock
from controlplane.services.tokens import token_revoke

USAGE_COLUMNS = [
    "kind",
    "turn",
    "finished_at",
    "executor",
    "model",
    *USAGE_TOKEN_FIELDS,
    "cost_usd",
]


class NoAddOrChangeAdminMixin:
    """Rows that services write: operators read them, and may delete them, but neither add
    nor change them. Also for inlines (whose permission checks take the parent object)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdminMixin(NoAddOrChangeAdminMixin):
    """Rows that services write and keep (ledgers, their totals, audit trails, logs):
    operators only read them."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class UsageRecordInline(ReadOnlyAdminMixin, admin.TabularInline):
    """A task's runs with their own usage and cost."""

    model = UsageRecord
    fields = USAGE_COLUMNS
    readonly_fields = USAGE_COLUMNS
    extra = 0
    verbose_name = "run"
    verbose_name_plural = "runs (usage ledger)"


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "created_by", "created_at"]
    search_fields = ["name", "created_by__username"]
    autocomplete_fields = ["created_by"]
    inlines = [MembershipInline]


@admin.register(Repository)
class RepositoryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """A project's repository as workers last found it; its credential is never shown (set
    and change it through the API)."""

    list_display = ["project", "url", "default_branch", "credential_set", "remote_status"]
    fields = ["project", *REPOSITORY_SHOWN_FIELDS, "created_by", "created_at", "updated_at"]
    readonly_fields = fields
    search_fields = ["url", "project__name"]

    @admin.display(boolean=True)
    def credential_set(self, repository: Repository) -> bool:
        return repository.credential_set

    def remote_status(self, repository: Repository) -> str:
        return repository.remote_status


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["id", "project", "user", "role", "updated_at"]
    list_filter = ["role"]
    search_fields = ["project__name", "user__username"]
    autocomplete_fields = ["project", "user"]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "project",
        "user",
        "kind",
        "status",
        "turn",
        "cost_usd",
        "queued_at",
        "finished_at",
    ]
    list_filter = ["status", "kind", "executor"]
    search_fields = ["prompt", "goal", "thread_id", "worker_id"]
    autocomplete_fields = ["project", "user", "parent_task"]
    date_hierarchy = "created_at"
    readonly_fields = ["created_at", "updated_at"]
    inlines = [UsageRecordInline]


@admin.register(TaskFollowup)
class TaskFollowupAdmin(admin.ModelAdmin):
    list_display = ["id", "task", "from_task", "created_by", "created_at"]
    search_fields = ["message"]
    autocomplete_fields = ["task", "from_task", "created_by"]


@admin.register(TaskEvent)
class TaskEventAdmin(admin.ModelAdmin):
    list_display = ["id", "task", "turn", "kind", "created_at"]
    list_filter = ["kind"]
    autocomplete_fields = ["task"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["user", "monthly_limit_usd", "updated_at"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["id", "user", "task", "project", *USAGE_COLUMNS]
    list_filter = ["kind", "executor", "model"]
    search_fields = ["user__username", "thread_id", "model"]
    list_select_related = ["user", "task", "project"]
    date_hierarchy = "finished_at"


@admin.register(MonthlySpend)
class MonthlySpendAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["user", "month", "total_usd", "entries", "updated_at"]
    list_filter = ["month"]
    search_fields = ["user__username"]
    list_select_related = ["user"]


class IdentityMemoryForm(forms.ModelForm):
    """Content passes the same checks as the API's (a memory holding a secret is refused)."""

    class Meta:
        model = IdentityMemory
        fields = [
            "scope",
            "user",
            "project",
            "content",
            "source",
            "source_task",
            "status",
            "superseded_by",
            "created_by",
        ]

    def clean_content(self) -> str:
        content = self.cleaned_data.get("content", "")
        if self.instance.pk is not None and "content" not in self.changed_data:
            return content  # another field changed: what is stored is not written again
        try:
            return memory_content_validate(content=content)
        except DomainError as error:
            raise forms.ValidationError(error.message) from None

    def clean(self) -> dict:
        cleaned = super().clean()
        # `archived_at` goes with the archived status (a check constraint): set or clear it.
        if cleaned.get("status") == MemoryStatus.ARCHIVED:
            self.instance.archived_at = self.instance.archived_at or timezone.now()
        else:
            self.instance.archived_at = None
        return cleaned


@admin.register(IdentityMemory)
class IdentityMemoryAdmin(admin.ModelAdmin):
    """Memories. New or edited content goes through the registered text reviews as the
    memory services' does (automemory flags it again: an edited text needs a new approval;
    the flags and their approval are on auto memory's own admin page); the approve and
    restore actions call the same services as the API."""

    form = IdentityMemoryForm
    list_display = [
        "id",
        "scope",
        "project",
        "user",
        "source",
        "status",
        "source_task",
        "short_content",
        "archived_at",
        "created_at",
    ]
    list_filter = [
        "scope",
        "project",
        "source",
        "status",
    ]
    list_select_related = ["project", "user", "source_task"]
    search_fields = ["content"]
    autocomplete_fields = ["user", "project", "source_task", "superseded_by", "created_by"]
    readonly_fields = [
        "archived_at",
        "created_at",
        "updated_at",
    ]
    actions = ["approve", "restore"]

    def save_model(self, request, obj: IdentityMemory, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        review = {}
        if not change or "content" in form.changed_data:
            # Staff's text is not approved by its author: a project owner reviews it.
            review = memory_text_reviewed(
                memory=obj, user=request.user, may_approve=lambda: False, created=not change
            ).audit
        # The form bypasses the project-owner rule the API applies: staff may act, and what
        # they did is in the audit log with them as actor (in the admin's own transaction).
        if not change or form.changed_data:
            audit_record(
                action="memory_updated" if change else "memory_created",
                actor=request.user,
                target_type="memory",
                target_id=obj.pk,
                data={
                    "via": "admin",
                    "changed_fields": sorted(form.changed_data),
                    "scope": obj.scope,
                    "source": obj.source,
                    "project_id": obj.project_id,
                    "status": obj.status,
                    **review,
                },
            )

    @admin.action(description="Approve the selected held memories", permissions=["change"])
    def approve(self, request, queryset) -> None:
        self._each(request, queryset, memory_approve, "Approved")

    @admin.action(description="Restore the selected archived memories", permissions=["change"])
    def restore(self, request, queryset) -> None:
        self._each(request, queryset, memory_restore, "Restored")

    def _each(self, request, queryset, service, verb: str) -> None:
        done, refused = 0, []
        for memory in queryset.order_by("pk"):
            try:
                service(user=request.user, memory=memory)
                done += 1
            except DomainError as error:
                refused.append(f"memory {memory.pk}: {error.message}")
        self.message_user(request, f"{verb} {done} memory(ies).")
        if refused:
            self.message_user(request, "Not changed: " + " ".join(refused), messages.WARNING)

    @admin.display(description="content")
    def short_content(self, memory: IdentityMemory) -> str:
        return memory.content if len(memory.content) <= 80 else memory.content[:79] + "…"


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "created_at",
        "action",
        "actor",
        "actor_label",
        "target_type",
        "target_id",
    ]
    list_filter = ["action", "target_type"]
    search_fields = ["action", "target_id", "actor__username", "actor_label"]
    date_hierarchy = "created_at"


@admin.register(ApiToken)
class ApiTokenAdmin(NoAddOrChangeAdminMixin, admin.ModelAdmin):
    """Tokens without their secrets (only a hash is stored); mint them with the API or
    `manage.py token`, revoke them here."""

    list_display = ["id", "user", *API_TOKEN_SHOWN_FIELDS]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "created_at"]
    search_fields = ["user__username", "name", "prefix"]
    list_select_related = ["user"]
    fields = ["user", *API_TOKEN_SHOWN_FIELDS]
    readonly_fields = fields
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke(self, request, queryset) -> None:
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True):
            token_revoke(token=token, actor=request.user)
            revoked += 1
        self.message_user(request, f"Revoked {revoked} token(s).")

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("controlplane.change_apitoken")


# DRF's authtoken app stays installed for its migrations only (docs/api.md): its plain-text
# tokens are neither used nor made any more.
if admin.site.is_registered(TokenProxy):
    admin.site.unregister(TokenProxy)


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class SignInUserAdmin(UserAdmin):
    """Django's users admin, with an action lifting a failed-sign-in lock (django-axes)."""

    actions = ["unlock_sign_in"]

    @admin.action(description="Unlock sign-in for the selected users", permissions=["change"])
    def unlock_sign_in(self, request, queryset) -> None:
        unlocked = [
            user.get_username()
            for user in queryset.order_by("pk")
            if sign_in_unlock(actor=request.user, username=user.get_username())
        ]
        if unlocked:
            self.message_user(request, f"Unlocked sign-in for {', '.join(unlocked)}.")
        else:
            self.message_user(request, "None of the selected users was locked.", messages.INFO)
