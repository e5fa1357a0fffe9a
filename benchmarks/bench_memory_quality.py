"""Benchmark: what the memories are worth, on labelled coding-agent task transcripts.

Runs the extraction sweep (`process_auto_memories`, forced past the idle and length gates:
redaction, the injected-memory removal, the privacy check, consolidation and writing all as
in production) over each transcript of `benchmarks/memory_quality_set.py`, once with the
deterministic extractor and once with a model (extraction and consolidation), each transcript
in a project of its own. The tuning set is the one the prompts were worded against; the
held-out set never was. Prints per extractor and set:

- precision: memories written that state their transcript's labelled fact, of all written;
- recall: labelled facts stated by the memory written (or merged) for their transcript;
- kind accuracy: memories of fact, gotcha and preference transcripts whose kind (the model's
  `kind`) is the label's (the deterministic extractor has none);
- noise: memories written for transcripts labelled noise (right: none);
- leaks: memories holding a labelled secret, or a word of the private note the task
  received (must be 0);
- copied: memories repeating 12 words of their transcript as they stood;
- consolidation: repeat and contradiction transcripts decided right (a repeat: anything but
  a second memory; a contradiction: supersede, or a merge that drops the old value);
- tokens (input and output, from the ledger) and seconds per task.

A labelled fact is stated when the memory holds one term of each of its term groups
(memory_quality_set.py says why that is a rule of meaning, not of wording).

    .venv/bin/python benchmarks/bench_memory_quality.py [--save]     # both sets and extractors
    .venv/bin/python benchmarks/bench_memory_quality.py --set held-out --limit 3

The model is the local one (`make model`, started here on 127.0.0.1), or any
OpenAI-compatible server with `--model-url URL --model NAME` (key: AUTOMEMORY_OPENAI_API_KEY).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from dataclasses import dataclass, field
from datetime import timedelta

import harness
from memory_quality_held_out import HELD_OUT
from memory_quality_set import TUNING, Transcript

SETS = {"tuning": TUNING, "held-out": HELD_OUT}
COPIED_WORDS = 12
DECISIONS = {"new": "add", "merged": "update", "already_known": "noop", "superseded": "supersede"}
FACT_KINDS = ("fact", "gotcha", "preference")


@dataclass
class Result:
    transcript: Transcript
    memory: str = ""
    keywords: list[str] = field(default_factory=list)
    kind: str = ""
    reason: str = ""
    detail: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    merged_text: str = ""


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--set", choices=[*SETS, "both"], default="both")
    parser.add_argument("--extractor", choices=["deterministic", "model", "both"], default="both")
    parser.add_argument("--model-url", help="an OpenAI-compatible server (default: local)")
    parser.add_argument("--model", help="the model's name on --model-url")
    parser.add_argument("--limit", type=int, help="the first N transcripts of each set")
    args = parser.parse_args()
    sets = list(SETS) if args.set == "both" else [args.set]
    extractors = ["deterministic", "model"] if args.extractor == "both" else [args.extractor]
    with harness.run(args):
        server = None
        model = args.model
        if "model" in extractors:
            server, model = model_endpoint(args)
        try:
            for set_name in sets:
                transcripts = SETS[set_name][: args.limit]
                for extractor in extractors:
                    results = run_set(
                        transcripts,
                        set_name=set_name,
                        model=model if extractor == "model" else None,
                    )
                    report(f"{extractor}{f' ({model})' if extractor == 'model' else ''}",
                           set_name, results)  # fmt: skip
        finally:
            if server is not None:
                server.stop()


def model_endpoint(args):
    """The model server (started here when it is the local one) and the model's name."""
    from django.conf import settings

    from automemory.local_model import MODEL_NAME, LocalModelServer, local_model_missing

    server = None
    if args.model_url:
        url, model = args.model_url, args.model or MODEL_NAME
    else:
        problem = local_model_missing()
        if problem:
            raise SystemExit(problem)
        server = LocalModelServer().start()
        url, model = server.base_url, MODEL_NAME
    settings.AUTOMEMORY_OPENAI_BASE_URL = url
    settings.AUTOMEMORY_OPENAI_API_KEY = os.environ.get("AUTOMEMORY_OPENAI_API_KEY", "not-needed")
    settings.AUTOMEMORY_MODEL_TIMEOUT_SECONDS = 300.0
    settings.AUTOMEMORY_MODEL_MAX_RETRIES = 0
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = 5000
    print(f"model: {model} at {url}")
    return server, model


def run_set(transcripts: list[Transcript], *, set_name: str, model: str | None) -> list[Result]:
    from automemory.services.extraction import drafting as extraction_drafting

    drafts = []
    real_answer_draft = extraction_drafting.answer_draft

    def observed(answer, **kwargs):
        draft = real_answer_draft(answer, **kwargs)
        drafts.append(draft)
        return draft

    # Observe the model's drafts (their kind is not stored); nothing else changes.
    extraction_drafting.answer_draft = observed
    try:
        prefix = f"{set_name}-{'model' if model else 'det'}"
        return [run_one(t, prefix=prefix, model=model, drafts=drafts) for t in transcripts]
    finally:
        extraction_drafting.answer_draft = real_answer_draft


def run_one(t: Transcript, *, prefix: str, model: str | None, drafts: list) -> Result:
    from django.db.models import Sum
    from django.utils import timezone

    from automemory.models import AutoMemoryLog, MemorySourceTask
    from automemory.services.injector import inject_memories
    from automemory.services.search import memory_keywords
    from controlplane.models import (
        IdentityMemory,
        MemorySource,
        Task,
        UsageRecord,
    )

    user = harness.user_create(
        f"{prefix}-{t.id}",
        generate_memories=True,
        use_memories=True,
        extract_model=model,
        consolidation_model=model,
    )
    project = harness.project_create(user, name=t.id)
    if t.earlier:
        earlier = Task.objects.create(project=project, user=user, prompt="earlier", status="failed")
        memory = IdentityMemory.objects.create(
            scope="project", project=project, created_by=user, content=t.earlier,
            source=MemorySource.AUTO, source_task=earlier,
        )  # fmt: skip
        MemorySourceTask.objects.create(memory=memory, task=earlier)
    task = Task.objects.create(project=project, user=user, prompt=t.prompt)
    result_text = t.result
    if t.private:
        IdentityMemory.objects.create(scope="user", user=user, created_by=user, content=t.private)
        injected = inject_memories(task=task, prompt=t.prompt, goal="", actor_label="bench")
        # The agent echoed its prompt, the private note with it, then did the work.
        result_text = f"You asked:\n{injected.prompt}\n\n{t.result}"
    now = timezone.now()
    Task.objects.filter(pk=task.pk).update(
        status="completed",
        result_text=result_text,
        started_at=now - timedelta(hours=2),
        finished_at=now - timedelta(hours=1),
    )
    drafts.clear()
    started = time.monotonic()
    harness.sweep(user=user, force=True)
    seconds = time.monotonic() - started
    log = AutoMemoryLog.objects.get(task=task)
    out = Result(t, reason=log.reason, detail=log.detail, seconds=seconds)
    written = IdentityMemory.objects.filter(pk=log.memory_id).first() if log.memory_id else None
    if written is not None:
        out.keywords = memory_keywords(written.pk)
        if log.reason == "merged":
            out.merged_text = written.content
        out.memory = written.content
    if drafts:
        out.kind = drafts[-1].kind
    usage = UsageRecord.objects.filter(task=task).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens")
    )
    out.input_tokens, out.output_tokens = usage["i"] or 0, usage["o"] or 0
    return out


def states(memory: str, t: Transcript) -> bool:
    """Whether `memory` states the transcript's labelled fact (one term of each group)."""
    text = memory.casefold()
    return bool(t.fact) and all(any(term.casefold() in text for term in group) for group in t.fact)


def leaks(result: Result) -> tuple[bool, bool]:
    """(a secret, a word of the private note) in the memory or its keywords."""
    t = result.transcript
    text = " ".join([result.memory, *result.keywords])
    secret = any(s in text for s in t.secrets)
    private = False
    if t.private:
        distinctive = [w for w in re.findall(r"\w+", t.private) if len(w) > 5]
        private = any(w.casefold() in text.casefold() for w in distinctive)
    return secret, private


def copied(result: Result) -> bool:
    source = " ".join(result.transcript.result.casefold().split())
    tokens = result.memory.casefold().split()
    return any(
        " ".join(tokens[i : i + COPIED_WORDS]) in source
        for i in range(len(tokens) - COPIED_WORDS + 1)
    )


def decision_right(result: Result) -> bool:
    t = result.transcript
    decision = DECISIONS.get(result.reason, result.reason)
    if t.kind == "repeat":
        return decision in ("noop", "update", "supersede")
    if decision == "supersede":
        return True
    return (
        decision == "update"
        and states(result.merged_text, t)
        and (t.old_term.casefold() not in result.merged_text.casefold())
    )


def report(extractor: str, set_name: str, results: list[Result]) -> None:
    written = [r for r in results if r.memory]
    labelled = [r for r in results if r.transcript.fact]
    stated = [r for r in written if states(r.memory, r.transcript)]
    recalled = [r for r in labelled if r.memory and states(r.memory, r.transcript)]
    kinded = [r for r in written if r.transcript.kind in FACT_KINDS]
    kind_right = [r for r in kinded if r.kind == r.transcript.kind]
    noise = [r for r in results if r.transcript.kind == "noise"]
    secret_leaks = sum(leaks(r)[0] for r in results)
    private_leaks = sum(leaks(r)[1] for r in results)
    consolidation = [r for r in results if r.transcript.kind in ("repeat", "contradict")]
    model = any(r.input_tokens for r in results)

    def share(part, whole):
        return f"{len(part)}/{len(whole)} ({len(part) / len(whole):.0%})" if whole else "n/a"

    print(f"\n== {extractor} on the {set_name} set ({len(results)} transcripts)")
    print(f"precision:        {share(stated, written)} memories state their fact")
    print(f"recall:           {share(recalled, labelled)} labelled facts stated")
    kinds = share(kind_right, kinded) if model else "n/a (no kind without a model)"
    print(f"kind accuracy:    {kinds}")
    print(f"noise:            {sum(1 for r in noise if r.memory)}/{len(noise)} noise transcripts "
          "got a memory")  # fmt: skip
    print(f"leaks:            {secret_leaks} secrets, {private_leaks} private notes")
    print(f"copied:           {share([r for r in written if copied(r)], written)} memories "
          f"repeat {COPIED_WORDS} words of the transcript")  # fmt: skip
    decided = ", ".join(
        f"{r.transcript.id}={DECISIONS.get(r.reason, r.reason)}" for r in consolidation
    )
    right = [r for r in consolidation if decision_right(r)]
    if model:
        print(f"consolidation:    {share(right, consolidation)} right ({decided})")
    else:
        print(f"consolidation:    n/a (no model: the same-goal rule only; {decided})")
    errors = [r for r in results if r.reason in ("error", "model_output_invalid")]
    if errors:
        print(f"errors:           {', '.join(f'{r.transcript.id}={r.reason}' for r in errors)}")
    if model:
        print(
            "per task:         "
            f"{statistics.mean(r.input_tokens for r in results):.0f} input tokens, "
            f"{statistics.mean(r.output_tokens for r in results):.0f} output tokens, "
            f"{statistics.mean(r.seconds for r in results):.1f} s (median "
            f"{statistics.median(r.seconds for r in results):.1f} s, max "
            f"{max(r.seconds for r in results):.1f} s)"
        )
    else:
        print(f"per task:         0 tokens, {statistics.mean(r.seconds for r in results):.2f} s")
    misses = [r.transcript.id for r in labelled if r not in recalled]
    print(f"facts missed:     {', '.join(misses) or 'none'}")
    wrong_kinds = [f"{r.transcript.id}={r.kind or '-'}" for r in kinded if r not in kind_right]
    if model and wrong_kinds:
        print(f"kinds wrong:      {', '.join(wrong_kinds)}")
    for r in written:
        print(f"  {r.transcript.id} [{r.kind or '-'}]: {' '.join(r.memory.split())[:160]}")


if __name__ == "__main__":
    main()
