"""The labelled coding-agent task transcripts of `bench_memory_quality.py`.

`TUNING` (48 transcripts) is the set the extraction and consolidation prompts were worded
against; `HELD_OUT` (14) was written apart and is never tuned on. Each transcript is a task's
prompt and its agent's final result, labelled with its kind and what a good memory holds:

- `fact`, `gotcha`, `preference`: one durable fact of that kind;
- `noise`: nothing worth remembering (no memory is right);
- `secret`: a durable fact next to secrets (`secrets`) that must never be remembered;
- `private`: a durable fact, the task having received its user's private note (`private`),
  which the agent echoed; the note must never reach the project's memory;
- `repeat`: the fact of an `earlier` memory again, in other words (right: anything but a
  second memory, `add`);
- `contradict`: a fact that replaces an `earlier` memory's (right: `supersede`, or an
  `update` whose text holds the new value and not the old one).

A labelled fact is a list of term groups; a memory states the fact when it holds at least
one term of every group (case-insensitive substring): the names a memory cannot state the
fact without, whatever its words (`6379` and `redis` for "the tests need Redis on port 6379").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Transcript:
    id: str
    kind: str
    prompt: str
    result: str
    fact: tuple[tuple[str, ...], ...] = ()
    secrets: tuple[str, ...] = ()
    private: str = ""
    earlier: str = ""
    # For `contradict`: a term only the old value has (an update must drop it).
    old_term: str = ""
    tags: tuple[str, ...] = field(default=())


def T(id, kind, prompt, result, fact=(), **kwargs) -> Transcript:
    groups = tuple(tuple(group.split("|")) for group in fact)
    return Transcript(id, kind, prompt, result, groups, **kwargs)


TUNING: list[Transcript] = [
    # --- durable facts -------------------------------------------------------------------
    T(
        "fact-migrations",
        "fact",
        "Add the invoices table",
        "Added the Invoice model and ran `manage.py makemigrations billing`. Note for later: "
        "migrations here must be generated with `make migrations`, which runs makemigrations "
        "with --check for every app and refuses unnamed migrations; plain makemigrations "
        "produced 0004_auto_* and the pre-commit hook rejected it. Renamed it "
        "0004_invoice_table and the hook passed.",
        ["make migrations"],
    ),
    T(
        "fact-test-db",
        "fact",
        "Speed up the test suite",
        "Profiled the suite: 70% of the time went to creating the test database. The project "
        "runs its tests with `pytest --reuse-db` locally (set in setup.cfg under addopts); "
        "CI passes --create-db. With reuse the suite went from 9 min to 2 min 40 s.",
        ["reuse-db"],
    ),
    T(
        "fact-settings-env",
        "fact",
        "Where do feature flags live?",
        "Feature flags are not in the database: they are read from the FEATURE_FLAGS "
        "environment variable as a comma-separated list in config/flags.py, and "
        "`flags.enabled('name')` is the only way code should check them. I documented this "
        "in docs/flags.md.",
        ["FEATURE_FLAGS|flags.enabled|config/flags.py"],
    ),
    T(
        "fact-api-version",
        "fact",
        "Add the /v2/orders endpoint",
        "Added GET /v2/orders. All public endpoints are versioned in the URL and registered "
        "in api/routers.py; the v1 router is frozen (no new endpoints) since the 2.0 release, "
        "so new endpoints go only into the v2 router. Tests in tests/api/test_orders_v2.py.",
        ["v1|v2", "router"],
    ),
    T(
        "fact-build-cmd",
        "fact",
        "Build the frontend",
        "The frontend is built with `pnpm build` inside web/ (not npm: the lockfile is "
        "pnpm-lock.yaml and npm install breaks the workspace links). The output lands in "
        "web/dist, which Django serves via STATICFILES_DIRS.",
        ["pnpm"],
    ),
    T(
        "fact-logging",
        "fact",
        "Make the worker's logs searchable",
        "Switched the worker to structured logs. The project logs JSON through "
        "structlog; call `log = structlog.get_logger()` and pass fields as keyword "
        "arguments (`log.info('task_done', task_id=...)`), never f-strings, so the log "
        "pipeline can index them.",
        ["structlog"],
    ),
    T(
        "fact-release",
        "fact",
        "Cut release 3.4.0",
        "Released 3.4.0. The release procedure is `make release VERSION=x.y.z`: it bumps "
        "the version in pyproject.toml, writes the changelog from fragments in "
        "changes/, tags and pushes. Do not edit CHANGELOG.md by hand; add a fragment "
        "file in changes/ instead.",
        ["make release|changes/"],
    ),
    T(
        "fact-cache-key",
        "fact",
        "Fix stale prices on the product page",
        "Prices were stale for up to an hour after an update: the cache key of the product "
        "page did not include the price list version. All page cache keys are built by "
        "cache_key_for(obj) in core/cache.py, which now includes obj.version; use it rather "
        "than building keys by hand.",
        ["cache_key_for|core/cache.py"],
    ),
    T(
        "fact-queue",
        "fact",
        "Why is the email job not running?",
        "Background jobs run on Celery with two queues: `default` and `mail`. The mail "
        "queue has its own worker (`celery -A app worker -Q mail`), which was not started "
        "on staging; any new mail-sending task must be routed to the mail queue in "
        "app/celery.py's task_routes.",
        ["mail"],
    ),
    T(
        "fact-timezone",
        "fact",
        "Fix the off-by-one day in reports",
        "The report showed yesterday's orders under today. The database stores every "
        "timestamp in UTC and reports must convert with `to_local(dt, user.tz)` from "
        "core/time.py just before display, never in queries.",
        ["utc|to_local"],
    ),
    # --- environment gotchas -------------------------------------------------------------
    T(
        "gotcha-redis",
        "gotcha",
        "Make the API tests pass on a fresh machine",
        "41 tests in tests/controlplane/test_throttling.py failed with ConnectionRefusedError: "
        "the throttle tests need a real Redis on 127.0.0.1:6379 and nothing was listening. "
        "Started it with `redis-server --daemonize yes --port 6379`; all 912 tests pass.",
        ["redis", "6379"],
    ),
    T(
        "gotcha-tmp-noexec",
        "gotcha",
        "Fix the flaky archive test on CI",
        "test_extract_archive failed only on CI: the runners mount /tmp with noexec, so "
        "the unpacked helper could not be executed. Setting TMPDIR to a folder in the "
        "workspace in .ci/run fixed it.",
        ["noexec|tmpdir"],
    ),
    T(
        "gotcha-node-version",
        "gotcha",
        "The frontend build fails with a syntax error",
        "`pnpm build` failed with 'SyntaxError: Unexpected token ?.' The machine had Node 12; "
        "the build needs Node 18 or newer (the .nvmrc says 18). `nvm use` before building "
        "fixes it.",
        ["node", "18|nvm"],
    ),
    T(
        "gotcha-pg-locale",
        "gotcha",
        "Tests fail on the new PostgreSQL server",
        "Sorting tests failed on the new database server: it was initialised with the C "
        "locale instead of en_US.UTF-8, so ORDER BY on names sorted capital letters first. "
        "The test database must be created with LC_COLLATE en_US.UTF-8 (see "
        "scripts/createdb.sh).",
        ["collate|locale|en_us"],
    ),
    T(
        "gotcha-port-8000",
        "gotcha",
        "The dev server does not start",
        "runserver failed with 'Address already in use': the docs container from `make "
        "docs-serve` also binds port 8000. Either stop it or run the API on another port "
        "with `make run ADDR=127.0.0.1:8001`.",
        ["8000|8001"],
    ),
    T(
        "gotcha-ssl-cert",
        "gotcha",
        "pip install fails in the office network",
        "pip failed with CERTIFICATE_VERIFY_FAILED: the office proxy re-signs TLS with the "
        "company root certificate. Export PIP_CERT=/etc/ssl/certs/company-root.pem (or "
        "REQUESTS_CA_BUNDLE) before installing.",
        ["pip_cert|requests_ca_bundle|company-root"],
    ),
    T(
        "gotcha-sqlite-threads",
        "gotcha",
        "Fix 'database is locked' in tests",
        "The concurrency tests failed with 'database is locked' on SQLite: SQLite allows "
        "one writer at a time. Those tests are marked @pytest.mark.postgres and only run "
        "with DATABASE_URL pointing at PostgreSQL; on SQLite they are skipped.",
        ["postgres", "lock|sqlite|concurren"],
    ),
    T(
        "gotcha-docker-mem",
        "gotcha",
        "The integration suite gets killed",
        "The integration suite died with exit 137 (killed): Docker Desktop's default 2 GB "
        "memory limit is too small for Elasticsearch plus the app. Raising Docker's memory "
        "to 6 GB fixed it.",
        ["docker", "memory|gb|137"],
    ),
    T(
        "gotcha-git-lfs",
        "gotcha",
        "The fixtures look corrupted",
        "The JSON fixtures in tests/fixtures/ were 130-byte text files starting with "
        "'version https://git-lfs'. They are stored in Git LFS: run `git lfs install && "
        "git lfs pull` after cloning or the fixture tests fail with JSONDecodeError.",
        ["lfs"],
    ),
    T(
        "gotcha-clock",
        "gotcha",
        "Fix test_token_expiry",
        "test_token_expiry failed at random: it compared against datetime.now() while the "
        "code uses timezone.now() (UTC). Tests that touch expiry must freeze time with "
        "freezegun's @freeze_time instead of reading the clock.",
        ["freeze"],
    ),
    # --- preferences ----------------------------------------------------------------------
    T(
        "pref-naming",
        "preference",
        "Rename the billing helpers as asked in review",
        "Renamed calc_tot, get_inv and mk_rcpt to invoice_total, invoice_get and "
        "receipt_make. The reviewer explained the rule: service functions are named "
        "<entity>_<action> with keyword-only arguments and no abbreviations.",
        ["entity|invoice_total|abbreviat"],
    ),
    T(
        "pref-commits",
        "preference",
        "Squash the branch before merging",
        "Squashed the 14 commits into 3. The maintainers want each commit message to say "
        "what the change does in the imperative ('Add invoice export'), no ticket numbers "
        "in the subject, and a body explaining why when it is not obvious.",
        ["imperative|commit message"],
    ),
    T(
        "pref-tests-style",
        "preference",
        "Add tests for the export",
        "Added tests for CSV export. The team's rule for tests: go through the public API "
        "or service functions, never assert on private helpers, and no mocks of our own "
        "code; use the factories in tests/factories.py.",
        ["mock|public|factor"],
    ),
    T(
        "pref-docs",
        "preference",
        "Document the export endpoint",
        "Documented GET /exports in docs/api.md. The owner asked that docs stay short: a "
        "guide first, then a reference; no page longer than 500 lines, and every figure "
        "taken from saved benchmark output, never typed by hand.",
        ["500|guide|figure"],
    ),
    T(
        "pref-deps",
        "preference",
        "Add a library to parse dates",
        "Added python-dateutil instead of writing a parser. The project prefers a "
        "well-kept library to hand-written code, with a lower bound in pyproject.toml "
        "(python-dateutil>=2.8), never an exact pin.",
        ["lower bound|well-kept|>="],
    ),
    T(
        "pref-errors",
        "preference",
        "Return useful errors from the signup form",
        "Signup now answers 400 with a message per field. The lead's rule: bad input gets "
        "400 with a message for each field, a foreign object 404, and no request may ever "
        "produce a 500.",
        ["400", "field|404|500"],
    ),
    T(
        "pref-type-hints",
        "preference",
        "Clean up services/orders.py",
        "Added type hints to every function in services/orders.py. The convention is type "
        "hints on all service functions and a one-line docstring saying what and why; "
        "comments only where the code cannot say it.",
        ["type hint|docstring"],
    ),
    # --- noise ----------------------------------------------------------------------------
    T(
        "noise-typo",
        "noise",
        "Fix the typo in the README",
        "Changed 'recieve' to 'receive' in the README's second paragraph. Nothing else "
        "changed; no code touched and no tests affected. Done.",
    ),
    T(
        "noise-hello",
        "noise",
        "hi, are you there?",
        "Yes, I'm here. How can I help you with this repository today? I can fix bugs, "
        "write tests, explain code or review a change.",
    ),
    T(
        "noise-bump",
        "noise",
        "Bump the version to 2.3.1",
        "Changed the version in pyproject.toml from 2.3.0 to 2.3.1. No other files "
        "reference the version. Committed as 'Bump version to 2.3.1'.",
    ),
    T(
        "noise-explain",
        "noise",
        "What does this regex do: ^\\d{3}-\\d{4}$",
        "It matches strings made of exactly three digits, a hyphen and four digits, like "
        "555-1234, and nothing else: ^ and $ anchor it to the whole string.",
    ),
    T(
        "noise-rename-var",
        "noise",
        "Rename the variable x to total in utils.py",
        "Renamed x to total in utils.py (4 occurrences in sum_items). Ran the tests: all "
        "pass. No other changes.",
    ),
    T(
        "noise-failed",
        "noise",
        "Try to upgrade to Django 6",
        "Tried upgrading to Django 6.0a1, but three dependencies do not support it yet and "
        "pip could not resolve the set. Reverted everything; nothing was changed.",
    ),
    T(
        "noise-format",
        "noise",
        "Run the formatter",
        "Ran `ruff format .`: 3 files reformatted (whitespace only), 212 unchanged. "
        "Committed the result.",
    ),
    T(
        "noise-list-files",
        "noise",
        "List the files in src/",
        "src/ contains: __init__.py, app.py, models.py, views.py, urls.py and a templates/ "
        "folder with base.html and index.html.",
    ),
    # --- secrets --------------------------------------------------------------------------
    T(
        "secret-db-url",
        "secret",
        "Connect the reporting job to the analytics database",
        "The reporting job could not connect: it used port 5432, but the analytics "
        "PostgreSQL listens on 6543 behind pgbouncer. Set REPORTS_DATABASE_URL=postgres://"
        "reports:Xq7!vR2#pL9@analytics.internal:6543/analytics; the job runs now.",
        ["6543"],
        secrets=("Xq7!vR2#pL9",),
    ),
    T(
        "secret-gh-token",
        "secret",
        "Fix the release workflow",
        "The release workflow failed to push tags: the default GITHUB_TOKEN cannot push to "
        "protected branches. I used a deploy token ghp_9fK2LmQ7rT1vW8xZ3cB6nD4hJ0sA5eY2uI7o "
        "stored as the RELEASE_TOKEN secret; the workflow must use secrets.RELEASE_TOKEN.",
        ["release_token"],
        secrets=("ghp_9fK2LmQ7rT1vW8xZ3cB6nD4hJ0sA5eY2uI7o",),
    ),
    T(
        "secret-aws",
        "secret",
        "Make uploads work on staging",
        "Uploads failed with AccessDenied: the staging bucket is in eu-west-1 and the "
        "client defaulted to us-east-1. Set AWS_REGION=eu-west-1. For testing I used "
        "AKIAZ7QW3ERT5YUI8OPA with secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY.",
        ["eu-west-1"],
        secrets=("AKIAZ7QW3ERT5YUI8OPA", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"),
    ),
    T(
        "secret-slack",
        "secret",
        "Send deploy notices to Slack",
        "Deploy notices now go to #deploys through the notify_deploy() helper in "
        "ops/notify.py, which reads SLACK_WEBHOOK_URL. The bot token "
        "xoxb-2048-1234567890-AbCdEfGhIjKlMnOpQrStUvWx is set on the server.",
        ["notify_deploy|slack_webhook_url"],
        secrets=("xoxb-2048-1234567890-AbCdEfGhIjKlMnOpQrStUvWx",),
    ),
    # --- injected private notes -------------------------------------------------------------
    T(
        "private-pager",
        "private",
        "Make the API tests pass on the build server",
        "The throttle tests need a real Redis on 127.0.0.1:6379; the build server had none. "
        "Installed redis-server and enabled it; all tests pass.",
        ["redis", "6379"],
        private="Alice's pager rotation notes are in the zanzibar notebook, locker 42",
    ),
    T(
        "private-health",
        "private",
        "Fix the nightly export",
        "The nightly export failed because cron runs it with /bin/sh, which has no `source`; "
        "the script now starts with #!/bin/bash and the export ran.",
        ["bash|/bin/sh"],
        private="Bob is on medical leave until the 14th; do not assign him reviews",
    ),
    T(
        "private-salary",
        "private",
        "Speed up the search page",
        "The search page ran one query per result for the author's name. Added "
        "select_related('author') in search/views.py; the page went from 2.1 s to 180 ms.",
        ["select_related"],
        private="Carol's salary review is scheduled with HR for Thursday at 3pm",
    ),
    # --- repeats and contradictions -----------------------------------------------------------
    T(
        "repeat-redis",
        "repeat",
        "Get the test suite green on the new laptop",
        "Most of tests/controlplane/test_throttling.py failed with connection refused: Redis "
        "was not running on port 6379. Ran `redis-server --daemonize yes --port 6379`, then "
        "`make test` passed (912 tests).",
        ["redis", "6379"],
        earlier="The throttle tests need a real Redis on 127.0.0.1:6379; start it with "
        "`redis-server --daemonize yes --port 6379` when `redis-cli ping` fails.",
    ),
    T(
        "repeat-pnpm",
        "repeat",
        "Fix the frontend install",
        "`npm install` in web/ broke the workspace links again. Used `pnpm install` and "
        "`pnpm build` instead, as the lockfile pnpm-lock.yaml requires.",
        ["pnpm"],
        earlier="The frontend in web/ is built with `pnpm build`, not npm: the lockfile is "
        "pnpm-lock.yaml and npm breaks the workspace links.",
    ),
    T(
        "repeat-lfs",
        "repeat",
        "Tests fail with JSONDecodeError after a fresh clone",
        "The fixtures were Git LFS pointer files. `git lfs pull` fetched the real JSON and "
        "the fixture tests pass.",
        ["lfs"],
        earlier="Test fixtures in tests/fixtures/ are stored in Git LFS: run `git lfs "
        "install && git lfs pull` after cloning.",
    ),
    T(
        "contradict-node",
        "contradict",
        "Upgrade the frontend toolchain",
        "Upgraded Vite to 6, which needs Node 20 or newer; updated .nvmrc from 18 to 20. "
        "Builds with Node 18 now fail.",
        ["node", "20"],
        earlier="The frontend build needs Node 18 or newer (.nvmrc says 18); run `nvm use` "
        "before building.",
        old_term="18 or newer",
    ),
    T(
        "contradict-port",
        "contradict",
        "Move the analytics database",
        "The analytics PostgreSQL moved off pgbouncer: it now listens directly on port 5433. "
        "Updated REPORTS_DATABASE_URL's port; the job runs.",
        ["5433"],
        earlier="The analytics PostgreSQL listens on port 6543 behind pgbouncer, not 5432.",
        old_term="6543",
    ),
    T(
        "contradict-queue",
        "contradict",
        "Simplify the job queues",
        "Merged the `mail` queue into `default`: the separate mail worker is gone, and "
        "mail tasks need no routing any more. Removed the mail entry from task_routes.",
        ["mail", "default"],
        earlier="Mail-sending Celery tasks must be routed to the `mail` queue, which has its "
        "own worker (`celery -A app worker -Q mail`).",
        old_term="-Q mail",
    ),
]
