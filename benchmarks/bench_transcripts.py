"""Benchmark: what reading a task costs another member, whose copy has its user's private
notes taken out, against the task's own user, who reads it whole.

A task's first turn received 5 of its user's own memories and 5 of the project's, and its
agent quoted all of them in its result. Prints, for results of 10,000, 100,000 and
1,000,000 characters, `GET /tasks/{id}` through the API as the task's user and as another
member: median and best milliseconds, statements, and the ratio of the two.

    .venv/bin/python benchmarks/bench_transcripts.py
    .venv/bin/python benchmarks/bench_transcripts.py --postgres postgres://postgres@127.0.0.1:5432/postgres

`--save` writes the output to docs/figures/bench_transcripts.<database>.txt.
"""

import harness

SIZES = (10_000, 100_000, 1_000_000)
REPEATS = 9
FILLER = "The session check now compares expiry with the server clock before it renews. "


def seed(size: int):
    from automemory.models import TaskMemoryState
    from controlplane.models import IdentityMemory, MemoryScope

    owner = harness.user_create(f"owner{size}")
    member = harness.user_create(f"member{size}")
    project = harness.project_create(owner, f"transcripts{size}", members=[member])
    private = [
        IdentityMemory.objects.create(
            scope=MemoryScope.USER,
            user=owner,
            created_by=owner,
            content=f"My own note {i}: I keep the pager rotation in a blue notebook number {i}.",
        )
        for i in range(5)
    ]
    shared = [
        IdentityMemory.objects.create(
            scope=MemoryScope.PROJECT,
            project=project,
            created_by=owner,
            content=f"Project note {i}: run make test before pushing branch {i}.",
        )
        for i in range(5)
    ]
    quoted = "\n".join(f"> {memory.content}" for memory in private + shared)
    body = (FILLER * (size // len(FILLER) + 1))[: max(0, size - len(quoted))]
    (task,) = harness.tasks_completed(project, owner, 1, result_text=quoted + "\n" + body)
    TaskMemoryState.objects.create(task=task, injected_memory_ids=[m.pk for m in private + shared])
    return task, owner, member


def main() -> None:
    args = harness.parser(__doc__).parse_args()
    with harness.run(args):
        from rest_framework.test import APIClient

        print(
            f"GET /tasks/{{id}}, {REPEATS} runs each; ms median / best, statements; "
            "a result quoting 5 private and 5 project memories"
        )
        for size in SIZES:
            task, owner, member = seed(size)
            rows = {}
            for label, reader in (("its user", owner), ("a member", member)):
                client = APIClient()
                client.force_authenticate(reader)

                def read(client=client, task=task):
                    response = client.get(f"/tasks/{task.pk}", HTTP_HOST="127.0.0.1")
                    assert response.status_code == 200, response.status_code
                    return response.json()

                body = read()
                removed = body["result_text"].count("[private note removed]")
                timing = harness.timed(read, repeats=REPEATS)
                rows[label] = timing
                print(
                    f"  {size:>9,} chars, read by {label:<8}: {timing.median_ms:8.2f} / "
                    f"{timing.best_ms:8.2f} ms, {harness.statements_of(read):2d} statements, "
                    f"{removed} notes removed"
                )
            ratio = rows["a member"].median_ms / rows["its user"].median_ms
            best = rows["a member"].best_ms / rows["its user"].best_ms
            print(f"  {size:>9,} chars: a member's read costs x{ratio:.2f} (best x{best:.2f})")


if __name__ == "__main__":
    main()
