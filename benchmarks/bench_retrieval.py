"""Benchmark: which memories a new task gets (`recent` vs `relevant`), and what it costs.

Prints, from one run on one database:
- recall@5: a synthetic project holds 240 memories over 24 topics (10 each, written from
  per-topic templates with varying details, created in shuffled order over 120 days); 100 new
  tasks, each about one topic and worded differently from its memories (other phrasings and
  synonyms: a task about deploys says "ship to production", "roll out", "release"). A task
  scores 1 when at least one memory of its topic is among the project memories injected.
  `recent` should stay near 5 / 24 topics; `relevant` should reach 0.9 or more.
  The same for a paraphrase set (`PARAPHRASES`: 48 English tasks that share no content word
  with their topic's memories, checked by the run through the full-text index itself, and 8
  in German, French, Spanish and Portuguese), and each set ranked by keywords alone (the
  embedding model off) and hybrid (keywords and meaning fused). Hybrid must beat keywords on
  the paraphrases and keep the keyword set's recall;
- the embedding pass's cost: the 240 memories embedded in batches, per memory;
- the injection's time (median of repeated runs) and queries, for both rankings, with 10,
  2,000 and 20,000 memories in the project, and the ratio of the time at 20,000 to 10.
  Queries are counted as data statements plus transaction control (BEGIN/COMMIT, which
  SQLite issues as statements); the target is 6 data statements or fewer.

    .venv/bin/python benchmarks/bench_retrieval.py                  # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_retrieval.py --postgres postgres://postgres@127.0.0.1:5432/postgres

With --postgres a throwaway database is created on the server named and dropped at the end;
`--save` writes the output to docs/figures/bench_retrieval.<database>.txt.
"""

import contextlib
import random
import re
import statistics
import time
from datetime import timedelta

import harness

SIZES = (10, 2_000, 20_000)
MEMORIES_PER_TOPIC = 10
TASKS = 100
REPEATS = 21
SEED = 11
TRANSACTION_CONTROL = re.compile(r"\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b", re.I)

# Each topic: how its memories are written (templates filled with a detail), and how tasks
# about it are asked (other words for the same thing, never a memory's sentence).
TOPICS: dict[str, dict[str, list[str]]] = {
    "deploy": {
        "memory": [
            "Deploys run through the release pipeline: tag the commit, run make release, and the "
            "rollout to production starts for {d}.",
            "Production deploys need the on-call approval in {d} before the release is rolled out.",
            "The deploy script pushes the release image to the registry and restarts the {d} "
            "pods in production.",
        ],
        "task": [
            "Ship the new version to production",
            "Roll out the fix to prod today",
            "How do I release this branch?",
            "Deploy the hotfix for {d}",
            "Prepare a production release of the API",
        ],
    },
    "database_migrations": {
        "memory": [
            "Schema migrations are generated with makemigrations and reviewed for table locks in "
            "{d}.",
            "Never edit an applied migration; add a new migration and squash old ones in {d} "
            "later.",
            "Data migrations backfill rows in batches of 1000 to avoid locking the {d} table "
            "schema.",
        ],
        "task": [
            "Add a column to the orders table with a schema migration",
            "Write a migration that backfills the {d} field",
            "Squash the old migrations of the billing app",
            "Change the database schema for user profiles",
            "Rename a model field and migrate existing rows",
        ],
    },
    "login": {
        "memory": [
            "Login sessions use the sid cookie; the auth middleware checks the session on {d}.",
            "Password login is rate limited per account: five sign in attempts per minute on {d}.",
            "SSO login goes through the OAuth callback at /auth/callback; users sign in with {d}.",
        ],
        "task": [
            "Users cannot sign in after the password reset",
            "Fix the login redirect loop on {d}",
            "Add single sign-on with OAuth for the admin",
            "Sessions expire too early: users get logged out",
            "Investigate failed login attempts",
        ],
    },
    "billing": {
        "memory": [
            "Invoices are generated on the first of the month by the billing job for {d}.",
            "Billing amounts are stored in cents; invoice totals are rounded with the banker's "
            "rule ({d}).",
            "Stripe payment webhooks update the subscription and invoice status through the "
            "billing handler ({d}).",
        ],
        "task": [
            "Customers were charged twice on their invoice",
            "Refund a subscription payment through Stripe",
            "The monthly invoice total is off by one cent",
            "Add a new pricing plan to billing",
            "Payment webhook fails for {d}",
        ],
    },
    "css": {
        "memory": [
            "Styles live in static/css; the stylesheet is built with sass for {d}.",
            "Use the design tokens for colors in CSS instead of raw hex values in {d}.",
            "CSS classes follow BEM naming; the layout styles avoid ids in {d}.",
        ],
        "task": [
            "The button colors look wrong in dark mode",
            "Fix the stylesheet for the sidebar layout",
            "Make the header responsive on small screens with CSS",
            "Update the sass variables for the new brand colors",
            "Align the form fields on {d}, the styles are off",
        ],
    },
    "alerts": {
        "memory": [
            "Alerts go to the on-call channel through the alertmanager route for {d}.",
            "A paging alert needs a runbook link; warning alerts only post to {d}.",
            "Alert thresholds live in monitoring/rules; latency alerts page at p99 for {d}.",
        ],
        "task": [
            "We got paged at night for no reason, tune the alert",
            "Add a monitoring rule for high latency on {d}",
            "The on-call rotation did not receive the alert",
            "Write a runbook for the disk full alert",
            "Silence noisy warnings from alertmanager",
        ],
    },
    "search": {
        "memory": [
            "The search endpoint paginates results twenty per page; relevance ranking uses {d}.",
            "Search indexing runs nightly; a full reindex of {d} takes about an hour.",
            "Search queries are tokenised with the english analyzer in {d}.",
        ],
        "task": [
            "Search results are missing recent products",
            "Speed up the search query ranking",
            "Reindex the catalogue for full-text search",
            "Pagination of search results shows duplicates",
            "Improve the relevance of searches for {d}",
        ],
    },
    "queue": {
        "memory": [
            "Background jobs run on the celery queue; each worker handles {d} jobs.",
            "Retry failed background jobs with exponential backoff, at most five retries ({d}).",
            "The job queue is redis-backed; purge the queue only from the {d} console.",
        ],
        "task": [
            "Background jobs are stuck in celery",
            "Failed jobs retry forever, cap the retries",
            "The worker queue is backing up, add workers",
            "Move the email sending to a background job",
            "Redis queue memory keeps growing on {d}",
        ],
    },
    "email": {
        "memory": [
            "Transactional email goes through the SMTP relay; mail templates live in {d}.",
            "Email templates are MJML compiled to HTML; preview the mails at {d}.",
            "Bounced emails are recorded by the webhook and suppress further mail to {d}.",
        ],
        "task": [
            "Welcome emails are not delivered to new users",
            "Change the template of the password reset mail",
            "Mails bounce for addresses at {d}",
            "Switch the SMTP provider for outgoing mail",
            "Add an unsubscribe link to the newsletter email",
        ],
    },
    "tests": {
        "memory": [
            "Tests run with pytest; the test suite uses factories in tests/factories for {d}.",
            "Flaky tests are quarantined with the flaky marker and tracked in {d}.",
            "Integration tests start a real server on localhost for {d}.",
        ],
        "task": [
            "The test suite is flaky, find the unstable test",
            "Write pytest cases for the {d} module",
            "Add integration tests against the real server",
            "Speed up the slow tests in the suite",
            "Fix the failing unit test after the refactor",
        ],
    },
    "ci": {
        "memory": [
            "CI runs on GitHub Actions; the CI workflow file is .github/workflows/{d}.yml.",
            "The CI cache key includes the lock file; bust the workflow cache by editing {d}.",
            "CI must pass lint, types and tests in the workflow before merge to {d}.",
        ],
        "task": [
            "The GitHub Actions workflow takes too long",
            "CI pipeline fails on the lint step",
            "Cache dependencies in the CI workflow",
            "Add a type check job to CI for {d}",
            "Make the build workflow run on pull requests",
        ],
    },
    "docker": {
        "memory": [
            "The Docker image is multi-stage; the final image stage is distroless for {d}.",
            "docker compose up starts postgres, redis and {d} containers for local work.",
            "Pin base images by digest in the Dockerfile of the {d} container.",
        ],
        "task": [
            "The container image is too large, slim it down",
            "docker compose fails to start the database locally",
            "Update the base image in the Dockerfile",
            "Put the {d} service in a Docker container",
            "Rebuild the docker image with the new dependencies",
        ],
    },
    "caching": {
        "memory": [
            "Page fragments are cached in redis for five minutes under the cache key {d}.",
            "Invalidate the cache on save through the post_save signal for {d}.",
            "The CDN caches static assets for a year; cached filenames carry a hash ({d}).",
        ],
        "task": [
            "Stale data shows after an update, the cache is not invalidated",
            "Add caching to the slow dashboard endpoint",
            "Purge the CDN cache for the new logo",
            "Redis cache hit rate dropped for {d}",
            "Cache the expensive report query",
        ],
    },
    "logging": {
        "memory": [
            "Logs are structured JSON shipped to Loki; use the logger of {d}.",
            "Never log tokens or passwords; the log filter redacts {d}.",
            "Log levels: INFO in production, DEBUG only locally for the {d} logs.",
        ],
        "task": [
            "Our logs are too noisy, lower the log verbosity",
            "Add structured logging to the {d} service",
            "A password ended up in the logs, redact it",
            "Ship the application logs to Loki",
            "Missing log lines for failed requests",
        ],
    },
    "permissions": {
        "memory": [
            "Permissions are role based: owner, member, viewer; permission checks live in {d}.",
            "Viewers can read but never write; non-members get 404 on {d} (access control).",
            "Object permissions and access checks are done in the service layer, not in {d} views.",
        ],
        "task": [
            "A viewer was able to edit a project, fix access control",
            "Add a new role for auditors with read access",
            "Non-members can see private projects, check permissions",
            "Restrict who can delete {d} with a permission",
            "Review the access checks in the API",
        ],
    },
    "api_versioning": {
        "memory": [
            "The public API is versioned in the URL (/v2/); API v1 is frozen since {d}.",
            "Breaking API changes need a new API version and a deprecation notice ({d}).",
            "The OpenAPI schema of each API version is generated by drf-spectacular at {d}.",
        ],
        "task": [
            "Add a v3 API endpoint without breaking old clients",
            "Deprecate the old v1 routes of the API",
            "The OpenAPI schema is missing the new endpoint",
            "Clients broke after the API change to {d}",
            "Document the REST API versions",
        ],
    },
    "i18n": {
        "memory": [
            "Translations are gettext .po files compiled with compilemessages for {d}.",
            "Dates are formatted per locale; never hard-code month names in a translation ({d}).",
            "New UI strings must be marked for translation in {d}.",
        ],
        "task": [
            "Translate the checkout page into German",
            "Some strings are not translated in the French UI",
            "Dates show in English for users with a Spanish locale",
            "Add a new language translation to the {d} site",
            "Extract the strings for translation again",
        ],
    },
    "backups": {
        "memory": [
            "Database backups run nightly with pg_dump to the {d} bucket; restore from the "
            "latest dump.",
            "Backup restore drills happen monthly; the last restore took {d} minutes.",
            "Backups are encrypted snapshots kept for 30 days in {d}.",
        ],
        "task": [
            "Restore yesterday's database snapshot to staging",
            "Check that the nightly backup succeeded",
            "How long do we keep the database backups?",
            "Encrypt the offsite backup copies for {d}",
            "Test restoring the data from a snapshot",
        ],
    },
    "performance": {
        "memory": [
            "Slow queries are found with the query log; add database indexes for {d}.",
            "Use select_related to avoid N+1 queries that slow down the list views of {d}.",
            "Profile slow endpoints with py-spy before optimising {d}.",
        ],
        "task": [
            "The orders page is slow, profile it",
            "Too many SQL queries on the list view",
            "Add a database index for the slow report",
            "Latency of {d} doubled since last week, profile the queries",
            "Optimise the slowest endpoint",
        ],
    },
    "feature_flags": {
        "memory": [
            "Feature flags live in the flags table; toggle a feature flag in the admin for {d}.",
            "Remove a feature flag two weeks after its full rollout ({d}).",
            "Feature flags are evaluated per user with a percentage rollout in {d}.",
        ],
        "task": [
            "Turn on the new checkout for 10% of users with a feature flag",
            "Clean up stale feature flags",
            "Gate the beta dashboard behind a flag",
            "The feature flag for {d} does not work",
            "Enable the redesign flag for internal users only",
        ],
    },
    "dependencies": {
        "memory": [
            "Python dependencies are pinned in the lock file; update a package with uv lock ({d}).",
            "Renovate opens dependency upgrade PRs weekly for {d}.",
            "Security advisories for dependencies are checked by pip-audit in {d}.",
        ],
        "task": [
            "Upgrade the Django package to the latest version",
            "A vulnerable package was reported, upgrade it",
            "Update the locked dependencies",
            "Renovate PRs pile up, merge the safe dependency upgrades",
            "Pin the version of the {d} package",
        ],
    },
    "secrets": {
        "memory": [
            "Secrets come from the vault and are injected as environment variables ({d}).",
            "Rotate the API signing key every 90 days; the secret key id lives in {d}.",
            "Never commit .env files with secrets; the pre-commit hook blocks {d}.",
        ],
        "task": [
            "Rotate the leaked credentials and secrets",
            "Move the API keys out of the settings file into the vault",
            "Someone committed a .env with a secret, clean it up",
            "Read the database password from vault",
            "Renew the signing secret for {d}",
        ],
    },
    "frontend_build": {
        "memory": [
            "The frontend bundle is built with vite; the build entry point is {d}.",
            "JavaScript bundles are split per route to keep each bundle under {d} kB.",
            "npm run build writes the frontend assets to dist/ for {d}.",
        ],
        "task": [
            "The JS bundle got huge, split it",
            "Vite build fails after the upgrade",
            "Hot reload stopped working in the frontend",
            "Add a new page entry to the bundle config",
            "Minify the frontend build for {d}",
        ],
    },
    "rate_limiting": {
        "memory": [
            "The API is throttled per token: 100 requests per minute, the rate limit for {d}.",
            "Rate limit counters live in redis with a sliding window for {d}.",
            "Throttled requests get 429 with a Retry-After header ({d}).",
        ],
        "task": [
            "Clients get 429 Too Many Requests",
            "Raise the rate limit for partner tokens",
            "Throttle the login endpoint harder",
            "Our throttling lets bursts through on {d}",
            "Add a Retry-After header to throttled responses",
        ],
    },
}
# Tasks worded apart from their topic's memories: no content word (after stemming) in common
# with any memory of the topic, nor with the details a memory may name; the run checks it.
# The last ones are in other languages.
PARAPHRASES: list[tuple[str, str]] = [
    ("deploy", "Put the latest build live for all customers"),
    ("deploy", "Get yesterday's bugfix onto the servers people use"),
    ("database_migrations", "Alter the orders model so it gains a nullable currency column"),
    ("database_migrations", "Rename a field in Postgres without downtime"),
    ("login", "People are bounced back to the welcome screen after entering their credentials"),
    ("login", "Two-factor codes are refused when someone tries to get into their profile"),
    ("billing", "A customer paid twice for the same order; give the money back"),
    ("billing", "The charge on the yearly plan is wrong by a few pennies"),
    ("css", "The buttons look washed out when the theme is dark"),
    ("css", "Make the top bar fit on phone screens"),
    ("alerts", "We were woken up at 3 am by a notification about nothing"),
    ("alerts", "Nobody got told when the disk filled up last night"),
    ("search", "Typing a product name into the lookup box finds nothing new"),
    ("search", "Items people look for show up in the wrong order"),
    ("queue", "Asynchronous tasks pile up and never finish"),
    ("queue", "Send the welcome mail outside the web request"),
    ("email", "New signups never receive their confirmation message"),
    ("email", "Customers' inboxes reject what we send them"),
    ("tests", "One check in our automated verification passes only sometimes"),
    ("tests", "Cover the payment module with assertions"),
    ("ci", "Every pull request waits forty minutes for the automated checks"),
    ("ci", "The build robot rejects my branch because of formatting"),
    ("docker", "Our shipped artifact is 2 GB, shrink it"),
    ("docker", "Bring up the whole stack on a laptop with one command"),
    ("caching", "People keep seeing the old price after we edit it"),
    ("caching", "Keep the expensive totals in memory so we stop recomputing them"),
    ("logging", "The output of the app is far too chatty"),
    ("logging", "A user's secret showed up in the diagnostic output"),
    ("permissions", "A guest collaborator managed to delete a project"),
    ("permissions", "Outsiders can open private workspaces"),
    ("api_versioning", "Old client apps crashed after we renamed a response field"),
    ("api_versioning", "Retire the first edition of our HTTP interface gracefully"),
    ("i18n", "Offer the whole shop in German and Italian"),
    ("i18n", "Weekday labels appear in English for visitors from Madrid"),
    ("backups", "Yesterday's safety copy of the Postgres data is missing"),
    ("backups", "How do we get customer records back after an accidental wipe?"),
    ("performance", "The orders page takes eight seconds to open"),
    ("performance", "Find out why the API became sluggish"),
    ("feature_flags", "Show the redesigned cart to a tenth of customers first"),
    ("feature_flags", "Let only staff try the beta screen"),
    ("dependencies", "Move the project to the newest Django release"),
    ("dependencies", "A third-party library we import has a known vulnerability"),
    ("secrets", "A password leaked in a public repository; replace it"),
    ("secrets", "Stop hard-coding credentials in the settings module"),
    ("frontend_build", "The browser downloads 4 MB of script on first visit"),
    ("frontend_build", "Hot reload stopped refreshing the page on save"),
    ("rate_limiting", "Integrators are told to slow down too often"),
    ("rate_limiting", "One client floods us with calls; cap how often it may call"),
    ("backups", "Die nächtliche Sicherung der Datenbank ist fehlgeschlagen"),
    ("login", "Les utilisateurs ne peuvent plus se connecter après avoir changé leur mot de passe"),
    ("billing", "Los clientes recibieron dos cobros en la misma factura"),
    ("queue", "Die Warteschlange für Hintergrundaufgaben wächst ständig"),
    ("i18n", "Traduire l'interface du site en allemand"),
    ("email", "Los correos de bienvenida no llegan a los nuevos usuarios"),
    ("alerts", "Wir wurden nachts ohne Grund alarmiert"),
    ("performance", "A página de pedidos está muito lenta"),
]
DETAILS = [
    "checkout",
    "the admin",
    "mobile",
    "reports",
    "eu-west",
    "staging",
    "the dashboard",
    "partners",
    "exports",
    "the catalogue",
    "invoices",
    "search",
]
TASK_FILLERS = [
    "{t}.",
    "Please {lt}.",
    "{t}; the customer is waiting.",
    "Could you look at this: {lt}?",
    "{t} before Friday.",
]


def memory_text(rng: random.Random, topic: str, index: int) -> str:
    template = TOPICS[topic]["memory"][index % len(TOPICS[topic]["memory"])]
    return template.format(d=rng.choice(DETAILS)) + f" (note {index})"


def task_text(rng: random.Random, topic: str, index: int) -> str:
    template = TOPICS[topic]["task"][index % len(TOPICS[topic]["task"])]
    text = template.format(d=rng.choice(DETAILS))
    filler = rng.choice(TASK_FILLERS)
    return filler.format(t=text, lt=text[0].lower() + text[1:])


def main() -> None:
    args = harness.parser(__doc__).parse_args()
    with harness.run(args):
        bench_recall()
        bench_cost()


class Scene:
    """A user and a project with auto memory on, the user's settings set per run."""

    def __init__(self, name: str):
        from automemory.models import AutoMemorySettings
        from controlplane.models import IdentityMemory

        self.user = harness.user_create(name, use_memories=True, generate_memories=False)
        self.project = harness.project_create(self.user, name)
        self.settings = AutoMemorySettings.objects.get(user=self.user)
        for i in range(5):  # the user's own preferences, not about any topic
            IdentityMemory.objects.create(
                scope="user", user=self.user, content=f"I prefer small reviewable commits ({i})."
            )

    def rank_by(self, ranking: str) -> None:
        self.settings.injection_ranking = ranking
        self.settings.save(update_fields=["injection_ranking"])

    def planned_ids(self, prompt: str) -> list[int]:
        """The memories a new task with this prompt would receive (injection's plan, nothing
        written: the measured tasks leave no usage counts behind to sway the next)."""
        from automemory.services.injector import injection_plan, user_preferences

        plan = injection_plan(
            user_id=self.user.pk,
            project_id=self.project.pk,
            prompt=prompt,
            goal=None,
            preferences=user_preferences(user_id=self.user.pk),
        )
        return plan.memory_ids

    def inject(self, prompt: str):
        from automemory.services.injector import inject_memories
        from controlplane.models import Task

        task = Task.objects.create(project=self.project, user=self.user, prompt=prompt)
        return inject_memories(task=task, prompt=prompt, goal=None)


def bench_recall() -> None:
    from django.utils import timezone
    from freezegun import freeze_time

    from automemory import ranking
    from controlplane.models import IdentityMemory

    rng = random.Random(SEED)
    scene = Scene("recall")
    rows = [(topic, i) for topic in TOPICS for i in range(MEMORIES_PER_TOPIC)]
    rng.shuffle(rows)
    topic_of: dict[int, str] = {}
    start = timezone.now() - timedelta(days=120)
    for position, (topic, i) in enumerate(rows):
        with freeze_time(start + timedelta(hours=12 * position)):
            created = IdentityMemory.objects.create(
                scope="project", project=scene.project, content=memory_text(rng, topic, i)
            )
        topic_of[created.pk] = topic
    embedding_cost(len(rows))
    topics = list(TOPICS)
    keyword_tasks = [
        (topics[n % len(topics)], task_text(rng, topics[n % len(topics)], n)) for n in range(TASKS)
    ]
    english = [(topic, text) for topic, text in PARAPHRASES if _is_english(text)]
    other = [(topic, text) for topic, text in PARAPHRASES if not _is_english(text)]
    shared = sum(
        any(
            topic_of.get(m.pk) == topic
            for m in ranking.memories_matching(
                text=text, scope="project", project_id=scene.project.pk, limit=len(rows)
            )
        )
        for topic, text in english
    )
    print(
        f"recall@5: {len(rows)} project memories over {len(topics)} topics "
        f"(chance with 5 random memories ~ {5 / len(topics):.2f}); paraphrases sharing a "
        f"word with their topic's memories (full-text match): {shared} of {len(english)}"
    )
    sets = {
        f"keyword set ({len(keyword_tasks)})": keyword_tasks,
        f"paraphrases ({len(english)})": english,
        f"other languages ({len(other)})": other,
    }
    print(f"  {'ranking':<22}" + "".join(f"{name:>24}" for name in sets))
    for label, ranking_name, model in (
        ("recent", "recent", ""),
        ("relevant, keywords", "relevant", ""),
        ("relevant, hybrid", "relevant", None),
    ):
        scene.rank_by(ranking_name)
        with embedding_model(model):
            recalls = [
                sum(
                    any(topic_of.get(pk) == topic for pk in scene.planned_ids(prompt))
                    for topic, prompt in tasks
                )
                / len(tasks)
                for tasks in sets.values()
            ]
        print(f"  {label:<22}" + "".join(f"{recall:>24.2f}" for recall in recalls))


def _is_english(text: str) -> bool:
    return text.isascii() and not any(
        word in text.split() for word in ("Die", "Les", "Los", "Traduire", "Wir", "A página")
    )


@contextlib.contextmanager
def embedding_model(name: str | None):
    """Rank with the embedding model `name` ("" = off: keywords alone; None = the default)."""
    from django.conf import settings

    if name is None:
        yield
        return
    settings.AUTOMEMORY_EMBEDDING_MODEL = name
    try:
        yield
    finally:
        del settings.AUTOMEMORY_EMBEDDING_MODEL


def embedding_cost(count: int) -> None:
    """Embed every pending memory as the sweeper does, and print what it cost."""
    from automemory import conf
    from automemory.services.vectors import embeddings_refresh

    done = embeddings_refresh(limit=100_000)
    assert done.unavailable is None and done.embedded >= count, done
    print(
        f"embedding pass: {done.embedded} memories in {done.seconds:.2f} s, batches of "
        f"{conf.get('EMBEDDING_BATCH_SIZE')}: {1000 * done.seconds / done.embedded:.1f} ms per "
        "memory (model time and the vectors' writes)"
    )


def vectors_fill(project_id: int) -> None:
    """Give every pending memory of the project a vector fast: each distinct text without
    its `(note N)` suffix is embedded once and its vector written for all that share it
    (the suffix moves a vector by a hair; this is for the cost runs, not recall)."""
    from django.db import connection, transaction

    from automemory.services import embeddings, vectors

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.memory_id, m.content FROM {vectors.TABLE} e"
            " JOIN identity_memories m ON m.id = e.memory_id"
            " WHERE e.pending AND m.project_id = %s",
            [project_id],
        )
        rows = cursor.fetchall()
    bases = sorted({_without_note(content) for _, content in rows})
    by_base = dict(zip(bases, embeddings.passage_vectors(bases), strict=True))
    vendor = connection.vendor
    bits = ", embedding_bits = vec_quantize_binary(%s)" if vendor == "sqlite" else ""
    cast = "" if vendor == "sqlite" else "::vector"
    sql = (
        f"UPDATE {vectors.TABLE} SET embedding = %s{cast}{bits}, model = %s, pending = FALSE"
        " WHERE memory_id = %s"
    )
    model = embeddings.model_name()
    params = []
    for memory_id, content in rows:
        value = vectors.vector_param(by_base[_without_note(content)], vendor)
        params.append([value, value, model, memory_id] if bits else [value, model, memory_id])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _without_note(content: str) -> str:
    return re.sub(r" \(note \d+\)$", "", content)


def iter_calls(calls: list):
    """One call after another, each time the result is called (a fresh text each time)."""
    pending = iter(calls)
    return lambda: next(pending)()


def bench_cost() -> None:
    from django.db import connection

    from automemory.services import embeddings
    from controlplane.models import IdentityMemory

    rng = random.Random(SEED + 1)
    topics = list(TOPICS)
    prompts = [task_text(rng, topics[n % len(topics)], n) for n in range(REPEATS)]
    query_embedding = harness.timed(
        iter_calls([lambda text=text: embeddings.query_vector(text) for text in prompts]),
        repeats=REPEATS,
        warmup=0,
    )
    print(
        f"a task text's vector (embedded once per text and process, then kept): "
        f"{query_embedding.median_ms:.1f} / {query_embedding.best_ms:.1f} ms median / best"
    )
    print(
        f"injection cost over {REPEATS} runs, the texts' vectors kept: ms median / best; "
        "queries: data statements + transaction control (most in one run)"
    )
    results: dict[str, dict[int, tuple[float, float, int, int]]] = {"recent": {}, "relevant": {}}
    for size in SIZES:
        scene = Scene(f"cost-{size}")
        IdentityMemory.objects.bulk_create(
            [
                IdentityMemory(
                    scope="project",
                    project=scene.project,
                    content=memory_text(rng, topics[i % len(topics)], i),
                )
                for i in range(size)
            ],
            batch_size=2000,
        )
        vectors_fill(scene.project.pk)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        for ranking in results:
            scene.rank_by(ranking)
            scene.inject(prompts[0])  # warm the statement and page caches
            results[ranking][size] = measure(scene, prompts)
    for ranking, by_size in results.items():
        for size, (median, best, data, control) in by_size.items():
            print(
                f"  {ranking:>8} {size:>7,} memories: {median:7.2f} / {best:7.2f} ms, "
                f"{data} + {control} queries"
            )
        (median_few, best_few, *_), (median_many, best_many, *_) = (
            by_size[SIZES[0]],
            by_size[SIZES[-1]],
        )
        print(
            f"  {ranking:>8} time at {SIZES[-1]:,} / at {SIZES[0]:,}: "
            f"median x{median_many / median_few:.2f}, best x{best_many / best_few:.2f}"
        )


def measure(scene: Scene, prompts: list[str]) -> tuple[float, float, int, int]:
    from automemory.services.injector import inject_memories
    from controlplane.models import Task

    timings, data, control = [], [], []
    for prompt in prompts:
        task = Task.objects.create(project=scene.project, user=scene.user, prompt=prompt)
        with harness.captured() as capture:
            start = time.perf_counter()
            result = inject_memories(task=task, prompt=prompt, goal=None)
            timings.append((time.perf_counter() - start) * 1000)
        assert len(result.memory_ids) == 10, result.memory_ids
        statements = capture.statements
        transaction_control = sum(bool(TRANSACTION_CONTROL.match(sql)) for sql in statements)
        data.append(len(statements) - transaction_control)
        control.append(transaction_control)
    return statistics.median(timings), min(timings), max(data), max(control)


if __name__ == "__main__":
    main()
