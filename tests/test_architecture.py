"""The shape of the code, read from its own imports: layers, no import circles, the named
host modules auto memory reaches, leaf modules, and modules that stay one job long.

Every `import` statement of the three apps counts, at module level or inside a function (a
lazy import is still a dependency), and so does a dotted module path in a string (an
`include()`, an `import_module()`). Migrations are left out: they are history, not design.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("controlplane", "automemory", "worker")
# Which app may import which: worker uses automemory and controlplane, automemory uses
# controlplane, never the other way round.
MAY_IMPORT = {
    "controlplane": {"controlplane"},
    "automemory": {"automemory", "controlplane"},
    "worker": {"worker", "automemory", "controlplane"},
}
# The host modules auto memory reaches, and only these (docs/architecture.md, "How auto
# memory reaches the host"): what it stores (the host's models), who may see and do what,
# the host's services it calls, the API's shared pieces and a few leaf helpers.
AUTOMEMORY_HOST_MODULES = {
    "controlplane.models",
    "controlplane.access",
    "controlplane.admin",
    "controlplane.errors",
    "controlplane.limits",
    "controlplane.selectors",
    "controlplane.services.audit",
    "controlplane.services.demo",
    "controlplane.services.instructions",
    "controlplane.services.memories",
    "controlplane.services.memory_citations",
    "controlplane.services.mirrors",
    "controlplane.services.quota",
    "controlplane.services.tasks",
    "controlplane.services.usage",
    "controlplane.api.common",
    "controlplane.api.serializers",
    "controlplane.api.throttling",
    "controlplane.api.row_output",
    "controlplane.api.prepared",
    "controlplane.addrport",
    "controlplane.credentials",
    "controlplane.git",
    "controlplane.repository_urls",
    "controlplane.months",
    "controlplane.pricing",
    "controlplane.rawsql",
    "controlplane.textnorm",
}
# Where the host may name an app above it by a dotted string (an import all the same): the
# root URL configuration includes auto memory's URLs and names the console's error views.
DOTTED_NAMES_ALLOWED_IN = {"controlplane.urls"}
ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
# Ground-floor modules: they import nothing of this project above them.
LEAVES = {
    "automemory.metrics": set(),
    "automemory.conf": set(),
    "controlplane.months": set(),
    "controlplane.pricing": set(),
    "automemory.models": {"controlplane.models"},
    "controlplane.models": set(),
}
MAX_SERVICE_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files() -> dict[str, Path]:
    files = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.parts:
                files[_module_name(path)] = path
    return files


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The project modules `path` imports (`from x import y` counts `x.y` when that is a
    module, else `x`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = _source_files()
    known = set(files)
    return {module: _imports(path, module, known) for module, path in files.items()}


def test_apps_import_only_their_own_layer_and_those_below(graph):
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if target.split(".")[0] not in MAY_IMPORT[module.split(".")[0]]
    )
    assert upward == []


def test_the_import_graph_has_no_circle(graph):
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert circles == []


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_ground_floor_modules_import_nothing_above_them(graph, leaf):
    # A leaf that is a package (controlplane.models) counts with its own modules.
    inside = {module for module in graph if module.startswith(f"{leaf}.")}
    imported = set(graph[leaf]).union(*(graph[module] for module in inside))
    assert imported - inside - {leaf} <= LEAVES[leaf]


def test_no_service_module_outgrows_one_job():
    big = {
        str(path.relative_to(ROOT)): lines
        for app in APPS
        for path in (ROOT / app).glob("**/services/**/*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_SERVICE_LINES
    }
    assert big == {}


def _host_modules_imported_by_automemory(graph) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module.split(".")[0] == "automemory":
            for target in targets:
                if target.split(".")[0] == "controlplane":
                    found.setdefault(target, set()).add(module)
    return found


def test_automemory_reaches_the_host_only_through_its_named_modules(graph):
    imported = _host_modules_imported_by_automemory(graph)
    unnamed = {
        target: sorted(modules)
        for target, modules in imported.items()
        if target not in AUTOMEMORY_HOST_MODULES
    }
    assert unnamed == {}, "add it to AUTOMEMORY_HOST_MODULES and docs/architecture.md, or not"


def test_every_named_host_module_is_still_used_by_automemory(graph):
    unused = AUTOMEMORY_HOST_MODULES - set(_host_modules_imported_by_automemory(graph))
    assert unused == set()


def test_the_architecture_doc_lists_the_same_host_modules():
    text = ARCHITECTURE_DOC.read_text()
    section = text.split("## How auto memory reaches the host", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(controlplane(?:\.\w+)+)`", section))
    assert listed == AUTOMEMORY_HOST_MODULES


@pytest.mark.parametrize(
    ("app", "never"), [("controlplane", ("automemory", "worker")), ("automemory", ("worker",))]
)
def test_a_lower_app_never_imports_a_higher_one(graph, app, never):
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.split(".")[0] == app
        for target in targets
        if target.split(".")[0] in never
    )
    assert upward == []


@pytest.mark.parametrize(
    ("app", "never"), [("controlplane", ("automemory", "worker")), ("automemory", ("worker",))]
)
def test_a_lower_app_names_no_module_of_a_higher_one_by_string(app, never):
    """`import_module("worker.x")`, `include("automemory.api.urls")`, a dotted path in a
    setting: an import all the same. Only the root URL configuration may name auto memory's
    URLs and views."""
    dotted = re.compile(rf"^(?:{'|'.join(never)})\.[A-Za-z_][\w.]*(?::\w+)?$")
    found = []
    for module, path in _source_files().items():
        if module.split(".")[0] != app or module in DOTTED_NAMES_ALLOWED_IN:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and dotted.match(text):
                found.append(f"{module}:{node.lineno} {text}")
    assert found == []


# --- What the host's tables hold --------------------------------------------------------------

# The fields of the host's task and memory that a control plane has anyway, auto memory or
# not: who owns a row, what it says, where it came from, its state and who wrote it when.
# Everything that exists only because of auto memory lives in automemory's own tables
# (`automemory/models/state.py`: `TaskMemoryState`, `MemoryState`; `goals.py`: `MemoryGoal`;
# `search.py`: `MemorySearch`).
# A memory's visibility and archive time are the host's access and lifecycle state: its
# access rules filter every memory read by the visibility, and the archive time goes with
# the host's `archived` status in one constraint (docs/architecture.md, "The boundary").
HOST_FIELDS = {
    "Task": {
        "id", "project", "user", "prompt", "goal", "kind", "parent_task", "status", "turn",
        "continuation_prompt", "is_resume", "started_at", "finished_at", "result_text",
        "failure_reason", "cost_usd", "executor", "thread_id", "worker_id", "claimed_at",
        "heartbeat_at", "branch", "base_commit", "head_commit", "changed_files", "created_at",
        "queued_at", "updated_at",
    },
    "IdentityMemory": {
        "id", "scope", "user", "project", "content", "source", "source_task", "status",
        "superseded_by", "created_by", "visibility", "archived_at", "created_at", "updated_at",
    },
}  # fmt: skip
# Host code that counts as using a field: the host's and the worker's own modules, not the
# models that declare it, their admin pages or the migrations (history).
HOST_CODE_SKIPPED = {"models", "migrations", "admin.py"}


def _declared_fields(model) -> set[str]:
    return {
        field.name for field in model._meta.get_fields() if not field.auto_created or field.concrete
    }


@pytest.mark.parametrize("model_name", sorted(HOST_FIELDS))
def test_the_hosts_task_and_memory_hold_no_auto_memory_state(model_name):
    from django.apps import apps

    fields = _declared_fields(apps.get_model("controlplane", model_name))
    assert fields - HOST_FIELDS[model_name] == set()


def test_no_host_field_is_there_for_auto_memory_alone():
    """Every field of every host model is read or written by the host or the worker (their
    code other than the models, admin and migrations): a field only auto memory uses belongs
    in its own tables."""
    from django.apps import apps

    code = "\n".join(
        path.read_text()
        for app in ("controlplane", "worker")
        for path in (ROOT / app).rglob("*")
        if path.suffix in (".py", ".html") and not HOST_CODE_SKIPPED & set(path.parts)
    )
    unused = []
    for model in apps.get_app_config("controlplane").get_models():
        for name in sorted(_declared_fields(model)):
            field = model._meta.get_field(name)
            names = {name, getattr(field, "attname", name), getattr(field, "column", name)}
            if not any(re.search(rf"\b{re.escape(n)}\b", code) for n in names if n):
                unused.append(f"{model.__name__}.{name}")
    assert unused == []
