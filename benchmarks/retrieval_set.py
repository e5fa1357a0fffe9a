"""The retrieval benchmark's labelled data: 24 topics, each with how its memories are written
and how tasks about it are asked, the paraphrase set (no content word shared with the topic's
memories, and a few in other languages), the details and fillers the texts are made with."""

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
