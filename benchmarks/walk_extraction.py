"""Walk: one candidate followed through the extraction sweep, module by module.

A real sweep extracts one pending task while a profiler (`sys.setprofile`) notes the module
of each Python call in the project's packages (`automemory/`, `controlplane/`):

- every call in the pipeline's own modules (`automemory/services/extraction/`) is a step;
- a call into any other project module (a helper: text cleaning, provenance, the model
  client, the redactor package as one, a controlplane service) is one step, whatever that
  helper calls in turn;
- Django, the standard library and the tests are walked through, never counted, and so are
  settings lookups (`automemory.conf`), metric counters (`automemory.metrics`) and the ORM
  models (`*.models`); a generator's resumption is not a new call.

Consecutive steps in one module are one stop; a stop in a module the walk had already left
is a return. Returning to a caller is not a stop: only a new call is (a module that calls
the phases in order is not counted again after each of them). Per path it prints the stops
in order (`module xN`: N calls in a row) and the returns per module, for the whole sweep
(`process_auto_memories()`: lease, candidates, phases, cursor), for the pipeline function
that takes the batch through the phases (`--phases`), and for one candidate's step
through drafting, privacy, consolidation and writing (`--step`).

Two paths, each a sweep of one pending task (as in tests/automemory/test_sweep.py and
test_consolidation.py):
- deterministic: no model, the configured deterministic strategy writes the memory;
- model: the extraction model and the consolidation model, answered by the fake
  OpenAI-compatible server (tests/automemory/fake_openai.py, real HTTP on 127.0.0.1); the
  consolidation supersedes an earlier memory of the project.

    .venv/bin/python benchmarks/walk_extraction.py                    # a throwaway SQLite file
    .venv/bin/python benchmarks/walk_extraction.py --postgres postgres://postgres@127.0.0.1:5432/postgres
"""

import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import harness

PACKAGES = ("automemory", "controlplane")
# The pipeline's module, and its functions whose walks are printed besides the whole sweep's:
# the phases of a batch of candidates, and one candidate's extraction.
PIPELINE_MODULE = "automemory/services/extraction/sweep.py"
SCOPES = {"phases": "_process", "step": "_extract"}
CO_GENERATOR_LIKE = 0x20 | 0x80 | 0x200  # generator, coroutine, async generator
# The pipeline's own modules: every call frame in them is walked.
PIPELINE = "automemory.services.extraction."
# Counted as one helper: the redactor's package.
REDACTOR = "automemory.services.redactor"
# Infrastructure the walk leaves out, like Django's own frames: settings lookups, metric
# counters and the ORM models (any `models` module).
IGNORED = ("automemory.conf", "automemory.metrics")
MODEL = "gpt-5-mini"
ANSWER = {
    "reason": "a deploy pitfall later tasks hit again",
    "worth_remembering": True,
    "kind": "gotcha",
    "memory": "ops/deploy.sh fails on staging unless STAGING=1 is set before it runs.",
    "keywords": ["deploy", "staging"],
    "citations": [],
}


def unit(module: str) -> str | None:
    """What a project module counts as in the walk: itself, its package for the redactor
    (one helper), or None for the infrastructure it leaves out (settings, metrics, models)."""
    if module in IGNORED or ".models" in f"{module}.":
        return None
    if module.startswith(REDACTOR):
        return REDACTOR
    return module


@dataclass
class Walk:
    """The stops of one sweep: the pipeline's modules, each call into a helper (cut off below)."""

    root: Path
    scopes: dict[str, str] = field(default_factory=dict)  # function name -> module path
    calls: list[str] = field(default_factory=list)
    scoped: dict[str, list[str]] = field(default_factory=dict)
    functions: bool = False
    names: list[str] = field(default_factory=list)  # module.function of each call
    _modules: dict[str, str | None] = field(default_factory=dict)
    _started: set[int] = field(default_factory=set)
    _keep: list = field(default_factory=list)
    _depth: int = 0
    _below: int = 0  # the depth of the helper (or infrastructure) call being walked through
    _open: dict[str, int] = field(default_factory=dict)  # scope -> depth of its frame

    def module(self, filename: str) -> str | None:
        """The dotted name of a project module's file (None outside the project's packages)."""
        if filename not in self._modules:
            name = None
            path = Path(filename)
            if path.is_absolute():
                try:
                    relative = path.resolve().relative_to(self.root)
                except ValueError:
                    relative = None
                if relative is not None and relative.parts[0] in PACKAGES:
                    name = relative.with_suffix("").as_posix().replace("/", ".")
                    name = name.removesuffix(".__init__")
            self._modules[filename] = name
        return self._modules[filename]

    def profile(self, frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_flags & CO_GENERATOR_LIKE:
                # A generator's resumption is not a new call: only its first start counts.
                resumed = id(frame) in self._started
                self._started.add(id(frame))
                self._keep.append(frame)
            else:
                resumed = False
            self._depth += 1
            if self._below or resumed:
                return
            name = self.module(code.co_filename)
            if name is None:
                return  # Django, the standard library, the tests: walked through, not counted
            counted = unit(name)
            if not name.startswith(PIPELINE):
                self._below = self._depth  # a helper: one stop, whatever it calls
            if counted is None:
                return
            self.calls.append(counted)
            if self.functions:
                self.names.append(f"{counted}.{code.co_name}")
            scope = self.scopes.get(code.co_name)
            if (
                scope is not None
                and code.co_filename.endswith(scope)
                and code.co_name not in self._open
            ):
                self._open[code.co_name] = self._depth
            for opened in self._open:
                self.scoped.setdefault(opened, []).append(counted)
        elif event == "return":
            if self._below == self._depth:
                self._below = 0
            for name, depth in list(self._open.items()):
                if depth == self._depth:
                    del self._open[name]
            self._depth -= 1


def stops(calls: list[str]) -> list[tuple[str, int]]:
    """Consecutive calls within one module, as (module, number of calls)."""
    result: list[tuple[str, int]] = []
    for name in calls:
        if result and result[-1][0] == name:
            result[-1] = (name, result[-1][1] + 1)
        else:
            result.append((name, 1))
    return result


def returns(walk: list[tuple[str, int]]) -> Counter:
    """Per module, how many times the walk came back to it after leaving it."""
    seen: set[str] = set()
    back: Counter = Counter()
    for name, _ in walk:
        if name in seen:
            back[name] += 1
        seen.add(name)
    return back


def short(name: str) -> str:
    for prefix in ("automemory.services.extraction.", "automemory.services.", "automemory."):
        if name.startswith(prefix):
            return name[len(prefix) :] if prefix != "automemory." else name
    return name


def report(title: str, calls: list[str]) -> None:
    walk = stops(calls)
    back = returns(walk)
    print(f"{title}: {len(walk)} stops, {sum(back.values())} returns to a module already left")
    line = "  "
    for index, (name, count) in enumerate(walk):
        item = short(name) + (f" x{count}" if count > 1 else "")
        item += " -> " if index < len(walk) - 1 else ""
        if len(line) + len(item) > 96:
            print(line.rstrip())
            line = "  "
        line += item
    print(line.rstrip())
    if back:
        print("  returns: " + ", ".join(f"{short(n)} {c}" for n, c in back.most_common()))


def traced_sweep(root: Path, scopes: dict[str, str], *, functions: bool) -> Walk:
    walk = Walk(
        root=root,
        scopes={name: PIPELINE_MODULE for name in scopes.values()},
        functions=functions,
    )
    sys.setprofile(walk.profile)
    try:
        summary = harness.sweep()
    finally:
        sys.setprofile(None)
    assert summary is not None and summary.extracted == 1, summary
    return walk


def main() -> None:
    parser = harness.parser(__doc__)
    for scope, function in SCOPES.items():
        parser.add_argument(
            f"--{scope}",
            default=function,
            help=f"the function of {PIPELINE_MODULE} walked as the {scope} (default {function})",
        )
    parser.add_argument(
        "--functions", action="store_true", help="also print each counted call's function"
    )
    args = parser.parse_args()
    scopes = {scope: getattr(args, scope) for scope in SCOPES}
    with harness.run(args):
        from tests.automemory.fake_openai import FakeOpenAI

        server = FakeOpenAI().start()
        try:
            run(server, scopes=scopes, functions=args.functions)
        finally:
            server.stop()


def run(server, *, scopes: dict[str, str], functions: bool) -> None:
    from django.conf import settings

    from tests.automemory.fake_openai import answer

    settings.AUTOMEMORY_OPENAI_BASE_URL = server.base_url
    settings.AUTOMEMORY_OPENAI_API_KEY = "walk"
    settings.AUTOMEMORY_MODEL_MAX_RETRIES = 0
    root = harness.BASE_DIR.resolve()

    user = harness.user_create("walker", generate_memories=True)
    project = harness.project_create(user)
    # An earlier memory of the project, written by a sweep (the consolidation's candidate).
    harness.tasks_completed(
        project,
        user,
        1,
        prompt="Document the deploy script",
        result_text="The deploy script lives in ops/deploy.sh and needs the staging flag. " * 5,
        finished_ago=timedelta(hours=3),
    )
    harness.sweep()  # warm up: imports, compiled patterns, the first memory
    deploy_result = "The deploy script ops/deploy.sh fails without the staging flag set. " * 5

    walks = []
    harness.tasks_completed(
        project, user, 1, prompt="Explain the release checklist", start=10, result_text=None
    )
    walks.append(("deterministic", traced_sweep(root, scopes, functions=functions)))

    from automemory.models import AutoMemorySettings
    from controlplane.models import IdentityMemory

    AutoMemorySettings.objects.filter(user=user).update(
        extract_model=MODEL, consolidation_model=MODEL
    )
    first = IdentityMemory.objects.filter(source="auto").order_by("pk").first()
    server.enqueue(
        answer(ANSWER),
        answer(
            {
                "reason": "the new memory replaces the older one",
                "action": "supersede",
                "memory_id": None,
                "memory_ids": [first.pk],
                "text": "",
            }
        ),
    )
    harness.tasks_completed(
        project, user, 1, prompt="Fix the staging deploy", start=20, result_text=deploy_result
    )
    walks.append(("model", traced_sweep(root, scopes, functions=functions)))
    assert len(server.completion_requests) == 2, server.completion_requests

    for title, walk in walks:
        report(f"{title}, whole sweep", walk.calls)
        for scope, function in scopes.items():
            report(f"{title}, {scope} ({function})", walk.scoped.get(function, []))
        if walk.functions:
            print("  calls: " + " ".join(short(name) for name in walk.names))
        print()


if __name__ == "__main__":
    main()
