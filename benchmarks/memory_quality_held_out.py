"""The memory quality harness's held-out set: transcripts never tuned on (the tuning set and
the labelling rules are in memory_quality_set.py)."""

from memory_quality_set import T, Transcript

HELD_OUT: list[Transcript] = [
    T(
        "h-fact-fixtures",
        "fact",
        "Add sample data for the demo",
        "Demo data is loaded with `manage.py seed_demo`, which reads YAML files from "
        "demo/data/; add new sample records there rather than as JSON fixtures.",
        ["seed_demo|demo/data"],
    ),
    T(
        "h-fact-feature-branch",
        "fact",
        "Where should the payments work go?",
        "Long-running work is done on branches named feature/<ticket>, rebased on main "
        "daily; main deploys to staging automatically on every merge.",
        ["feature/|rebase"],
    ),
    T(
        "h-gotcha-ipv6",
        "gotcha",
        "The webhook tests hang",
        "The webhook tests hung for 60 s each: localhost resolved to ::1 first and the test "
        "server listened only on 127.0.0.1. Using 127.0.0.1 explicitly in "
        "WEBHOOK_TEST_URL fixed it.",
        ["127.0.0.1|::1|ipv6"],
    ),
    T(
        "h-gotcha-disk",
        "gotcha",
        "CI runs out of disk",
        "CI failed with 'No space left on device' during the Docker build: the runner's "
        "disk fills with old images. The workflow now runs `docker system prune -af` "
        "before building.",
        ["prune|disk"],
    ),
    T(
        "h-gotcha-utf8",
        "gotcha",
        "Fix the garbled names in exports",
        "Exported CSVs showed Ã© instead of é in Excel: Excel needs a UTF-8 BOM. The "
        "exporter now writes with encoding='utf-8-sig'.",
        ["utf-8-sig|bom"],
    ),
    T(
        "h-pref-sql",
        "preference",
        "Review the new report query",
        "Rewrote the report with the ORM. The team's rule: no raw SQL outside "
        "core/rawsql.py, and every raw statement there needs a test on both SQLite and "
        "PostgreSQL.",
        ["rawsql|raw sql"],
    ),
    T(
        "h-pref-ui",
        "preference",
        "Polish the settings page",
        "Adjusted the settings page. The designer wants plain HTML forms that work without "
        "JavaScript; htmx only as progressive enhancement, never a SPA framework.",
        ["javascript|htmx"],
    ),
    T(
        "h-noise-thanks",
        "noise",
        "thanks, that's all",
        "You're welcome! Let me know if there's anything else I can help with.",
    ),
    T(
        "h-noise-count",
        "noise",
        "How many tests are there?",
        "There are 912 tests: 604 in tests/controlplane, 250 in tests/automemory and 58 in "
        "tests/worker, as collected by pytest --collect-only.",
    ),
    T(
        "h-noise-revert",
        "noise",
        "Revert my last commit",
        "Reverted commit 3f2a9c1 ('WIP') with git revert; the working tree is clean.",
    ),
    T(
        "h-secret-stripe",
        "secret",
        "Set up payments on staging",
        "Payments failed on staging because the webhook secret was missing. The app reads "
        "STRIPE_WEBHOOK_SECRET; I set it to whsec_4eC39HqLyjWDarjtT1zdp7dc on staging.",
        ["stripe_webhook_secret"],
        secrets=("whsec_4eC39HqLyjWDarjtT1zdp7dc",),
    ),
    T(
        "h-private-address",
        "private",
        "Make the mail tests pass",
        "The mail tests need the MAIL_BACKEND set to the locmem backend in tests/settings.py; "
        "the SMTP one made them hang.",
        ["locmem"],
        private="Dave moved to 12 Rue des Lilas, Lyon; send the hardware there",
    ),
    T(
        "h-repeat-tmp",
        "repeat",
        "The archive test fails on CI again",
        "Same as before: /tmp is noexec on the CI runners. TMPDIR must point into the "
        "workspace; .ci/run does that now.",
        ["noexec|tmpdir"],
        earlier="CI mounts /tmp noexec: tests that execute files unpacked there fail, so "
        ".ci/run sets TMPDIR inside the workspace.",
    ),
    T(
        "h-contradict-python",
        "contradict",
        "Move to Python 3.13",
        "The project now requires Python 3.13: pyproject.toml's requires-python is >=3.13 "
        "and CI tests only 3.13.",
        ["3.13"],
        earlier="The project supports Python 3.11 and newer (requires-python >=3.11).",
        old_term="3.11",
    ),
]
