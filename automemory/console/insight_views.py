"""Console pages that show what memory does: "What would a task get?" (the preview, the very
path of injection) and a project's memory health over the last weeks, drawn as SVG.

Both are reads for any member (viewers too). The preview is `injector.memory_preview`,
validated by the API's `PreviewInput`; the counting is `selectors.memory_health_get`.
"""

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from automemory import selectors
from automemory.api.serializers import PreviewInput
from automemory.console import charts, settings_fields
from automemory.console.views import access_get
from automemory.services.injector import InjectionPlan, LeftOutReason, memory_preview
from controlplane.access import READ, project_get_for
from controlplane.models import IdentityMemory

LEFT_OUT_EXPLANATIONS = {
    LeftOutReason.BUDGET: "no room left within your injection budget",
    LeftOutReason.RANKED_BELOW: "ranked below its scope's limit",
    LeftOutReason.REPORTED: "reported: held until a project owner reviews it",
    LeftOutReason.ARCHIVED: "archived by the retention rule (not cited, edited or restored)",
    LeftOutReason.AWAITING_APPROVAL: "reads like instructions: awaiting an owner's approval",
}


@dataclass(frozen=True)
class PreviewRow:
    """A memory of the preview: received (with its rank and score) or left out (with why)."""

    memory: IdentityMemory
    scope: str
    rank: int | None = None
    score: float | None = None
    reason: str = ""

    @property
    def explanation(self) -> str:
        return LEFT_OUT_EXPLANATIONS.get(self.reason, self.reason)


def _preview_rows(plan: InjectionPlan) -> tuple[list[PreviewRow], list[PreviewRow]]:
    """The memories the task would receive, in the block's order, and those left out."""
    planned = {item.memory.pk: item for item in plan.candidates}
    received = [
        PreviewRow(planned[pk].memory, planned[pk].scope, planned[pk].rank, planned[pk].score)
        for pk in plan.memory_ids
        if pk in planned
    ]
    left_out = [PreviewRow(left.memory, left.scope, reason=left.reason) for left in plan.left_out]
    return received, left_out


@require_GET
@login_required
def project_preview(request: HttpRequest, project_id: str) -> HttpResponse:
    """What a new task of yours with this prompt and goal would receive now, and what is
    left out and why. A GET form: it writes nothing, and works without JavaScript."""
    project = access_get(project_get_for, user=request.user, project_id=project_id, action=READ)
    values = {name: request.GET.get(name, "") for name in ("prompt", "goal")}
    context: dict = {"project": project, "preview": values, "preview_errors": {}}
    status = 200
    if "prompt" in request.GET:
        data = {"prompt": values["prompt"]}
        if values["goal"]:
            data["goal"] = values["goal"]
        serializer = PreviewInput(data=data)
        if serializer.is_valid():
            plan = memory_preview(
                user=request.user,
                project_id=project.pk,
                prompt=serializer.validated_data["prompt"],
                goal=serializer.validated_data.get("goal") or None,
            )
            received, left_out = _preview_rows(plan)
            context.update(
                plan=plan,
                preview_block=plan.fitted.block if plan.fitted is not None else "",
                received=received,
                left_out=left_out,
            )
        else:
            context["preview_errors"] = {
                name: settings_fields.error_messages(found)
                for name, found in serializer.errors.items()
            }
            status = 400
    htmx = getattr(request, "htmx", None)
    partial = bool(htmx) and htmx.target == "preview-result" and not htmx.history_restore_request
    template = "console/_preview_result.html" if partial else "console/project_preview.html"
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


STATE_LABELS = {
    "active": ("Active", "series-active"),
    "held_for_review": ("Held for review", "series-held"),
    "superseded": ("Superseded", "series-superseded"),
    "archived": ("Archived", "series-archived"),
}


def _percent(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"


@require_GET
@login_required
def project_health(request: HttpRequest, project_id: str) -> HttpResponse:
    """A project's memory health over the last weeks: memories by state, injected and cited
    per week (the cite rate), reports, memories injected often and never cited, and the most
    cited and reported. Charts are SVG drawn here; the numbers are also in tables."""
    project = access_get(project_get_for, user=request.user, project_id=project_id, action=READ)
    health = selectors.memory_health_get(project=project, user=request.user)
    labels = [week.start.strftime("%b %d") for week in health.weeks]
    state_rows = [
        (STATE_LABELS[name][0], count, STATE_LABELS[name][1])
        for name, count in health.states.items()
    ]
    context = {
        "project": project,
        "health": health,
        "weeks": [
            {"week": week, "label": label, "rate": _percent(week.cite_rate)}
            for week, label in zip(health.weeks, labels, strict=True)
        ],
        "state_rows": state_rows,
        "cite_rate": _percent(health.cite_rate),
        "states_chart": charts.horizontal_bars(
            slug="chart-states",
            title="Memories by state",
            desc=", ".join(f"{label}: {count}" for label, count, _ in state_rows),
            rows=state_rows,
        ),
        "use_chart": charts.grouped_bars(
            slug="chart-use",
            title="Injected and cited, per week",
            desc=f"Over {len(labels)} weeks: {health.injected} injected, {health.cited} "
            f"cited (cite rate {_percent(health.cite_rate)}).",
            categories=labels,
            series=[
                charts.Series("injected", "series-injected", [w.injected for w in health.weeks]),
                charts.Series("cited", "series-cited", [w.cited for w in health.weeks]),
            ],
        ),
        "reports_chart": charts.grouped_bars(
            slug="chart-reports",
            title="Reports, per week",
            desc=f"Over {len(labels)} weeks: {health.reported} reports.",
            categories=labels,
            series=[
                charts.Series("reports", "series-reported", [w.reported for w in health.weeks])
            ],
            height=180,
        ),
    }
    return render(request, "console/project_health.html", context)
