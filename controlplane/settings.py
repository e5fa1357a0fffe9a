"""Settings for the control plane, read from the environment (django-environ).

Every value can be set by an environment variable or a `.env` file beside `manage.py`.
`DATABASE_URL` defaults to a SQLite file under `var/` in the checkout.
"""

import ipaddress
import re
import shlex
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

from controlplane.private_files import private_dir, private_sqlite_files

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEVELOPMENT_SECRET_KEY = "dev-insecure-0f3c1f2e-change-me-in-production"

# Off unless set: `make run` and the test settings (tests/settings.py) set what they need.
DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default=DEVELOPMENT_SECRET_KEY)
if not DEBUG and SECRET_KEY == DEVELOPMENT_SECRET_KEY:
    raise ImproperlyConfigured("Set SECRET_KEY: the development key must not run with DEBUG=False.")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])

# --- HTTPS (docs/deploy.md) -----------------------------------------------------------------
# Off by default, so the app also serves plain HTTP behind a TLS-terminating proxy; a
# deployment turns them on. SECURE_PROXY_SSL_HEADER=true trusts the proxy's X-Forwarded-Proto.
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
# Paths (regexes, no leading slash) a load balancer or Prometheus may reach over plain HTTP.
SECURE_REDIRECT_EXEMPT = env.list(
    "SECURE_REDIRECT_EXEMPT", default=[r"^healthz$", r"^readyz$", r"^metrics$"]
)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=False)
if env.bool("SECURE_PROXY_SSL_HEADER", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    "csp",
    "controlplane",
    "automemory",
    "worker",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "controlplane.middleware.malformed_session_cookie_middleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "controlplane.middleware.permissions_policy_middleware",
    # A sign-in POST for a slowed-down username: 429 before the view (controlplane.sign_in).
    "controlplane.sign_in.SignInSlowdownMiddleware",
    # Last: answers a locked-out sign-in (the admin's and the console's) with 429.
    "axes.middleware.AxesMiddleware",
]

# Content security policy (django-csp; docs/security.md): every response, the console, the
# admin and the API docs included, may run scripts only from this site's own files (no
# inline script, no eval), load styles, images, fonts and data only from it, never be framed
# and post forms only to it. CSP_REPORT_URI, when set, receives the browser's reports.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
        **({"report-uri": [env.str("CSP_REPORT_URI")]} if env.str("CSP_REPORT_URI", "") else {}),
    }
}
# What the browser may use on these pages: none of the powerful features (the app uses none).
PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "publickey-credentials-get",
        "screen-wake-lock",
        "serial",
        "usb",
        "xr-spatial-tracking",
    )
)

# Password sign-ins (the admin and the console) go through django-axes first: failed ones
# count per (username, client address); AXES_FAILURE_LIMIT of them lock that pair for
# AXES_COOLOFF_MINUTES (a failure while locked restarts the wait), even with the right
# password, so a guesser locks out only itself, never the owner signing in from elsewhere.
# A username guessed from many addresses is slowed down instead: past SIGN_IN_SLOWDOWN_AFTER
# failures (any addresses, within an hour) each attempt waits 1 s, 2 s, 4 s ... up to
# SIGN_IN_SLOWDOWN_MAX_SECONDS before its password is checked, except from an address the
# user signed in from within SIGN_IN_KNOWN_ADDRESS_DAYS (controlplane.services.sign_in_locks).
# The counters live in the `default` cache (CACHE_URL), so every process sees them.
# Staff unlock with `manage.py unlock_sign_in` or the users admin (docs/security.md).
AUTHENTICATION_BACKENDS = [
    "controlplane.sign_in.SignInGate",  # django-axes' backend, noting what it let through
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "axes.handlers.cache.AxesCacheHandler"
AXES_CACHE = "default"
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=10)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
SIGN_IN_SLOWDOWN_AFTER = env.int("SIGN_IN_SLOWDOWN_AFTER", default=2 * AXES_FAILURE_LIMIT)
SIGN_IN_SLOWDOWN_MAX_SECONDS = env.int("SIGN_IN_SLOWDOWN_MAX_SECONDS", default=900)
SIGN_IN_KNOWN_ADDRESS_DAYS = env.int("SIGN_IN_KNOWN_ADDRESS_DAYS", default=30)
# A success does not reset the counters: an attacker signing in to an account of their own
# would otherwise clear their address's count between guesses at others. They expire.
AXES_RESET_ON_SUCCESS = False
AXES_ENABLE_ADMIN = False  # nothing in its tables with the cache handler; see the users admin
AXES_VERBOSE = False

ROOT_URLCONF = "controlplane.urls"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "controlplane.wsgi.application"

# var/ (0700) and a SQLite database with its -wal and -shm files (0600) are private to the
# user the app runs as (controlplane/private_files.py, docs/deploy.md "File modes").
private_dir(VAR_DIR)
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'controlplane.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The SQLite of pysqlite3-binary, where available: Python's own may be built without
    # loadable extensions, and auto memory loads sqlite-vec (its memory vectors) into every
    # connection. Swapped before Django's SQLite backend is imported.
    try:
        import pysqlite3.dbapi2
    except ImportError:
        pass
    else:
        sys.modules["sqlite3"] = sys.modules["pysqlite3"]
        sys.modules["sqlite3.dbapi2"] = pysqlite3.dbapi2
    if str(DATABASES["default"]["NAME"]) not in ("", ":memory:"):
        private_sqlite_files(Path(DATABASES["default"]["NAME"]))
    # A server and several workers share one file: WAL lets readers run beside a writer,
    # IMMEDIATE transactions take the write lock up front instead of failing on upgrade,
    # and the busy timeout makes a writer wait for the lock instead of erroring at once.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": env.int("SQLITE_BUSY_TIMEOUT_SECONDS", default=30),
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# The memory console signs people in with a session (the API uses tokens).
LOGIN_URL = "console:sign-in"
LOGIN_REDIRECT_URL = "console:home"

STATIC_URL = "static/"
STATIC_ROOT = env.str("STATIC_ROOT", default=str(BASE_DIR / "staticfiles"))
# whitenoise serves STATIC_ROOT with DEBUG off too: compressed files with hashed names, so they
# are cached for good. The manifest comes from `collectstatic` (run_main and deployments run
# it; with DEBUG on, names are not hashed and the apps' own files are served without it).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Request bodies larger than this are refused with 400 before they are parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=1024 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        # Last: counts requests nothing authenticated against their address (`anon` rate).
        "controlplane.api.throttling.AnonymousRateAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": env.int("API_PAGE_SIZE", default=50),
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.exceptions.api_exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # --- Throttling (controlplane/api/throttling.py, docs/api.md) ---
    "DEFAULT_THROTTLE_CLASSES": [
        "controlplane.api.throttling.UserThrottle",
        "controlplane.api.throttling.RunThrottle",
        "controlplane.api.throttling.RunForceThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env.str("API_THROTTLE_USER", default="600/min"),
        "anon": env.str("API_THROTTLE_ANON", default="60/min"),
        "failed_auth": env.str("API_THROTTLE_FAILED_AUTH", default="30/min"),
        "run": env.str("API_THROTTLE_RUN", default="30/hour"),
        "run_force": env.str("API_THROTTLE_RUN_FORCE", default="5/hour"),
        # The memory tool (MCP), per running task; each call also counts as its user's.
        "memory_tool": env.str("API_THROTTLE_MEMORY_TOOL", default="120/min"),
    },
    # Proxies in front of the API whose X-Forwarded-For is trusted for the client address
    # (0: REMOTE_ADDR only; behind one TLS proxy: 1).
    "NUM_PROXIES": env.int("API_NUM_PROXIES", default=0),
}

# Throttle counters live in this cache; several API processes need a shared one, e.g.
# CACHE_URL=redis://127.0.0.1:6379/0 (the default, locmem, is per process).
CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}
if CACHES["default"]["BACKEND"].endswith(".RedisCache"):
    # A Redis that hangs costs a request this long at most; throttling then fails open.
    _cache_timeout = env.float("CACHE_TIMEOUT_SECONDS", default=0.5)
    _cache_options = CACHES["default"].setdefault("OPTIONS", {})
    _cache_options.setdefault("socket_connect_timeout", _cache_timeout)
    _cache_options.setdefault("socket_timeout", _cache_timeout)
# django-axes warns (axes.W001) at every command that a per-process or a file cache cannot
# share its sign-in counters; `check --deploy` says so instead (controlplane.W001), so that
# `make run` (a file cache its processes share on one machine) and the JSON logs stay quiet.
SILENCED_SYSTEM_CHECKS = ["axes.W001"]
# django-axes reads the client address as the API's throttles do: REMOTE_ADDR, or behind
# API_NUM_PROXIES trusted proxies the address they put in X-Forwarded-For.
if REST_FRAMEWORK["NUM_PROXIES"]:
    AXES_IPWARE_PROXY_COUNT = REST_FRAMEWORK["NUM_PROXIES"]
    AXES_IPWARE_META_PRECEDENCE_ORDER = ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR")
for _scope, _rate in REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"].items():
    # N/s, N/min, N/hour, N/day (DRF reads the period's first letter); empty: not throttled.
    if _rate and not re.fullmatch(r"[0-9]+/[smhd][a-z]*", _rate):
        raise ImproperlyConfigured(f"Throttle rate {_scope}: {_rate!r} is not like 60/min.")

SPECTACULAR_SETTINGS = {
    "TITLE": "Control plane API",
    "DESCRIPTION": "Coding-agent tasks in projects, with auto memory. People see and manage "
    "what is remembered in the [memory console](/console/) (sign in with your password).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "TaskStatusEnum": "controlplane.models.TaskStatus",
        "MemoryStatusEnum": "controlplane.models.MemoryStatus",
        "TaskKindEnum": "controlplane.models.TaskKind",
        "UsageKindEnum": "controlplane.models.UsageKind",
    },
}

# --- Host control plane -------------------------------------------------------------------
# Monthly USD limit for users without a quota row (a row with a NULL limit is unlimited).
CONTROLPLANE_DEFAULT_MONTHLY_LIMIT_USD = Decimal(
    env.str("CONTROLPLANE_DEFAULT_MONTHLY_LIMIT_USD", default="10")
)

# --- Worker ---------------------------------------------------------------------------------
WORKER_EXECUTOR = env.str("WORKER_EXECUTOR", default="echo")
WORKER_COMMAND = env.str("WORKER_COMMAND", default="")
WORKER_COMMAND_TIMEOUT_SECONDS = env.float("WORKER_COMMAND_TIMEOUT_SECONDS", default=600)
# The agent's world (worker/sandbox.py, docs/security.md): each task's room (work, home,
# tmp) under WORKER_TASK_ROOT; the sandbox agents run in (auto: bubblewrap where it works);
# the folders shown to every agent besides its room; the names of the worker's environment
# an agent also gets (PATH, the locale, HOME and TMPDIR in its room are given anyway).
WORKER_TASK_ROOT = env.str("WORKER_TASK_ROOT", default=str(VAR_DIR / "tasks"))
WORKER_SANDBOX = env.str("WORKER_SANDBOX", default="auto")
WORKER_SANDBOX_BINARY = env.str("WORKER_SANDBOX_BINARY", default="bwrap")
WORKER_SANDBOX_READ_ONLY = env.list("WORKER_SANDBOX_READ_ONLY", default=[])
WORKER_SANDBOX_WRITABLE = env.list("WORKER_SANDBOX_WRITABLE", default=[])
WORKER_AGENT_ENV = env.list("WORKER_AGENT_ENV", default=[])
# The agent's network (worker/egress.py): `isolated` (a network of its own that reaches only
# the memory tools and the host:port entries of WORKER_AGENT_EGRESS, by default the OpenAI
# API the codex CLI talks to) or `host` (the worker host's network, everything it reaches).
WORKER_SANDBOX_NETWORK = env.str("WORKER_SANDBOX_NETWORK", default="isolated")
WORKER_AGENT_EGRESS = env.list("WORKER_AGENT_EGRESS", default=["api.openai.com:443"])
# The memory tools (MCP server `memory`, docs/memory-tools.md): every agent run gets the
# server and its turn's task key; the command line that serves it over stdio (the relay,
# a single file that needs nothing of the project: no settings, no database).
WORKER_MEMORY_TOOLS = env.bool("WORKER_MEMORY_TOOLS", default=True)
WORKER_MEMORY_MCP_COMMAND = env.str(
    "WORKER_MEMORY_MCP_COMMAND",
    default=shlex.join([sys.executable, str(BASE_DIR / "automemory" / "memory_relay.py")]),
)
# The control plane's API as the worker's agents reach it: the memory tools are its
# `/memory-tools/...` endpoints (the stdio server above relays to them).
WORKER_MEMORY_API_URL = env.str("WORKER_MEMORY_API_URL", default="http://127.0.0.1:8000")
# How long the `codex` executor lets the CLI wait for the memory server before the first
# model request (it starts in a second or two; a server not up by then is left out).
WORKER_MEMORY_MCP_STARTUP_SECONDS = env.float("WORKER_MEMORY_MCP_STARTUP_SECONDS", default=20.0)
WORKER_POLL_INTERVAL_SECONDS = env.float("WORKER_POLL_INTERVAL_SECONDS", default=2.0)
WORKER_HEARTBEAT_SECONDS = env.float("WORKER_HEARTBEAT_SECONDS", default=10.0)
# A running task whose heartbeat is older than this is re-queued as a checkpoint resume.
WORKER_STALE_AFTER_SECONDS = env.float("WORKER_STALE_AFTER_SECONDS", default=60.0)
# A turn whose agent finished while the database was unreachable keeps its result in memory
# and retries the finish (with its ledger row) with back-off for up to this long, as long as
# the worker still holds the task (docs/operations.md, Faults). 0: no retry.
WORKER_FINISH_RETRY_SECONDS = env.float("WORKER_FINISH_RETRY_SECONDS", default=120.0)
# Between tasks, a worker recomputes the signature of its code this often; when it differs
# (a deploy replaced the code), the worker exits 75 to be restarted (docs/worker.md). 0: never.
WORKER_CODE_CHECK_SECONDS = env.float("WORKER_CODE_CHECK_SECONDS", default=30.0)
WORKER_CODEX_BINARY = env.str("WORKER_CODEX_BINARY", default="codex")
WORKER_CODEX_SANDBOX = env.str("WORKER_CODEX_SANDBOX", default="workspace-write")
WORKER_CODEX_MODEL = env.str("WORKER_CODEX_MODEL", default="")
WORKER_CODEX_TIMEOUT_SECONDS = env.float("WORKER_CODEX_TIMEOUT_SECONDS", default=1800)
# How `exec resume` usage is read when the CLI's session file is not readable:
# cumulative (codex 0.171.0 reports the thread's total), per_turn or auto (docs/codex.md).
WORKER_CODEX_RESUME_USAGE = env.str("WORKER_CODEX_RESUME_USAGE", default="cumulative")
# USD per 1M tokens by model name; "default" prices a model missing from the table. Cached
# input and cache writes are parts of input_tokens in codex's usage, billed at the
# cached_input and cache_write rates (each defaulting to input); reasoning tokens are part
# of output_tokens. Override with a JSON object in WORKER_CODEX_PRICES.
WORKER_CODEX_PRICES = env.json(
    "WORKER_CODEX_PRICES",
    default={
        "default": {"input": "1.25", "cached_input": "0.125", "output": "10.00"},
        "gpt-5": {"input": "1.25", "cached_input": "0.125", "output": "10.00"},
        "gpt-5-codex": {"input": "1.25", "cached_input": "0.125", "output": "10.00"},
        "gpt-5-mini": {"input": "0.25", "cached_input": "0.025", "output": "2.00"},
    },
)
# A round runs at most this many tasks before the end-of-round hook (the memory sweep).
WORKER_ROUND_MAX_TASKS = env.int("WORKER_ROUND_MAX_TASKS", default=20)

# Stored codex sessions (docs/codex.md, "Threads on any worker"): after every codex run the
# thread's rollout files are stored centrally, and restored by a worker that resumes the thread
# without them. `database` (default) keeps them in the database; an S3 URL,
# s3://BUCKET[/PREFIX][?endpoint_url=URL&region_name=R&addressing_style=path], keeps them in
# object storage through django-storages (credentials: the usual AWS_* variables or role).
WORKER_CODEX_SESSION_STORAGE = env.str("WORKER_CODEX_SESSION_STORAGE", default="database")
# A thread whose session files (uncompressed) are larger is recorded without its bytes: its
# resume on another worker then fails, saying so.
WORKER_CODEX_SESSION_MAX_BYTES = env.int("WORKER_CODEX_SESSION_MAX_BYTES", default=256 * 2**20)
# How long a store the database refused is retried before the run's finish goes ahead.
WORKER_CODEX_SESSION_STORE_RETRY_SECONDS = env.float(
    "WORKER_CODEX_SESSION_STORE_RETRY_SECONDS", default=60.0
)


def object_storage_settings(url: str) -> dict:
    """STORAGES entry for an `s3://bucket/prefix?option=value` URL (django-storages' S3)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ImproperlyConfigured(
            f"WORKER_CODEX_SESSION_STORAGE must be 'database' or s3://BUCKET[/PREFIX], not {url!r}"
        )
    options = {"bucket_name": parts.netloc, "location": parts.path.strip("/")}
    allowed = {"endpoint_url", "region_name", "addressing_style", "signature_version"}
    for name, value in parse_qsl(parts.query):
        if name not in allowed:
            raise ImproperlyConfigured(
                f"WORKER_CODEX_SESSION_STORAGE: unknown option {name!r} "
                f"(known: {', '.join(sorted(allowed))})"
            )
        options[name] = value
    options.update(file_overwrite=True, default_acl=None, querystring_auth=False)
    return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}


if WORKER_CODEX_SESSION_STORAGE != "database":
    STORAGES["codex_sessions"] = object_storage_settings(WORKER_CODEX_SESSION_STORAGE)

# --- Repositories (docs/repositories.md) ----------------------------------------------------
# A project's repository may be a file:// URL only inside these folders (empty: none may).
REPOSITORY_FILE_ROOTS = env.list("REPOSITORY_FILE_ROOTS", default=[])
# Fernet keys (urlsafe base64 of 32 bytes) that encrypt repository credentials: the first
# encrypts, every one decrypts, so a new key goes first and `manage.py
# repository_credentials_rotate` re-encrypts with it. Empty: one key derived from SECRET_KEY.
REPOSITORY_CREDENTIAL_KEYS = env.list("REPOSITORY_CREDENTIAL_KEYS", default=[])
# Each worker host keeps one bare mirror per repository here, and each task's private git
# folder (the objects of its turns); the worktrees are the task roots' `work` folders.
WORKER_REPO_CACHE = env.str("WORKER_REPO_CACHE", default=str(VAR_DIR / "repo-cache"))
WORKER_GIT_BINARY = env.str("WORKER_GIT_BINARY", default="git")
# Names of the worker's environment git also gets (proxies, a CA bundle); git otherwise runs
# with PATH and the locale only.
WORKER_GIT_ENV = env.list("WORKER_GIT_ENV", default=[])
# A fetch (or push) that takes longer fails the task, naming the remote.
WORKER_REPO_FETCH_TIMEOUT_SECONDS = env.float("WORKER_REPO_FETCH_TIMEOUT_SECONDS", default=300)
# Disk bounds: a mirror larger than this (checked while it is fetched) and a worktree larger
# than this (its tree checked before checkout, the folder after each turn) fail the task.
WORKER_REPO_MIRROR_MAX_BYTES = env.int("WORKER_REPO_MIRROR_MAX_BYTES", default=5 * 2**30)
WORKER_WORKTREE_MAX_BYTES = env.int("WORKER_WORKTREE_MAX_BYTES", default=2 * 2**30)
# Hours a finished task's worktree is kept on its host for debugging (0: removed at once).
WORKER_WORKTREE_KEEP_HOURS = env.float("WORKER_WORKTREE_KEEP_HOURS", default=0)
# After a turn that changed files the task's branch is pushed to the remote (true) when the
# credential allows it; otherwise, or with false, it is stored as a git bundle where codex
# sessions are stored (WORKER_CODEX_SESSION_STORAGE), up to WORKER_TASK_BUNDLE_MAX_BYTES.
WORKER_TASK_BRANCH_PUSH = env.bool("WORKER_TASK_BRANCH_PUSH", default=True)
WORKER_TASK_BUNDLE_MAX_BYTES = env.int("WORKER_TASK_BUNDLE_MAX_BYTES", default=256 * 2**20)
# The diff a task shows (`GET /tasks/{id}/diff`, the console) is cut at this many bytes.
WORKER_TASK_DIFF_MAX_BYTES = env.int("WORKER_TASK_DIFF_MAX_BYTES", default=2**20)

# --- Health and metrics (docs/operations.md) ------------------------------------------------
# /healthz and /readyz are always on. /metrics answers 404 unless METRICS_ENABLED; then only
# clients in METRICS_ALLOWED_IPS (addresses or networks; empty: any) carrying
# `Authorization: Bearer <METRICS_BEARER_TOKEN>` (when set) may read it. Several processes
# add up their counters through PROMETHEUS_MULTIPROC_DIR (an environment variable only).
METRICS_ENABLED = env.bool("METRICS_ENABLED", default=False)
METRICS_BEARER_TOKEN = env.str("METRICS_BEARER_TOKEN", default="")
METRICS_ALLOWED_IPS = env.list("METRICS_ALLOWED_IPS", default=["127.0.0.1", "::1"])
try:
    [ipaddress.ip_network(entry, strict=False) for entry in METRICS_ALLOWED_IPS if entry]
except ValueError as exc:
    raise ImproperlyConfigured(f"METRICS_ALLOWED_IPS: {exc}") from None
MIDDLEWARE.insert(0, "controlplane.metrics.request_metrics_middleware")
# A worker's own metrics endpoint (`run_worker`), under the same rules: 0 (default) is off.
WORKER_METRICS_PORT = env.int("WORKER_METRICS_PORT", default=0)
WORKER_METRICS_ADDR = env.str("WORKER_METRICS_ADDR", default="0.0.0.0")

# --- Auto memory (app defaults live in automemory/conf.py; override with AUTOMEMORY_*) -------
# The model side is set from the environment when the variable is present (else the app
# default): the price table as a JSON object of model -> {input, output[, cached_input]} USD
# per 1M tokens with a "default" entry, the per-call timeout and SDK retries, and the most
# model calls one sweep makes, how the server takes a schema (auto, json_schema,
# json_object_schema, grammar) and the temperature. `manage.py check` refuses a malformed
# price table, schema mode or temperature. The memory model's endpoint and key are
# AUTOMEMORY_OPENAI_BASE_URL / AUTOMEMORY_OPENAI_API_KEY, apart from the SDK's OPENAI_*
# (which the agents' allow-listed environment never carries either).
_AUTOMEMORY_MODEL_ENV = {
    "AUTOMEMORY_OPENAI_BASE_URL": env.str,
    "AUTOMEMORY_OPENAI_API_KEY": env.str,
    "AUTOMEMORY_MODEL_SCHEMA_MODE": env.str,
    "AUTOMEMORY_MODEL_TEMPERATURE": env.float,
    "AUTOMEMORY_MODEL_PRICES": env.json,
    "AUTOMEMORY_MODEL_TIMEOUT_SECONDS": env.float,
    "AUTOMEMORY_MODEL_MAX_RETRIES": env.int,
    "AUTOMEMORY_MODEL_CALLS_PER_SWEEP": env.int,
    # The sweep lease must outlast a task's model calls: set with the timeout it follows.
    "AUTOMEMORY_SWEEP_LEASE_SECONDS": env.int,
}
for _name, _read in _AUTOMEMORY_MODEL_ENV.items():
    if env.str(_name, default="") != "":
        try:
            globals()[_name] = _read(_name)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{_name}={env.str(_name)!r} is not valid: {exc}") from None

# --- Logging (controlplane/logging.py) ------------------------------------------------------
# plain (default) or json: one JSON object a line. Lines logged by a worker carry its id, and
# the task's id while it handles one.
LOG_FORMAT = env.str("LOG_FORMAT", default="plain").lower()
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be plain or json, not {LOG_FORMAT!r}.")
# A worker logs that a task is still running every this many seconds (0: never).
WORKER_PROGRESS_LOG_SECONDS = env.float("WORKER_PROGRESS_LOG_SECONDS", default=60.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "log_context": {"()": "controlplane.logging.LogContextFilter"},
        "access_line": {"()": "controlplane.logging.AccessLineFilter"},
    },
    "formatters": {
        "plain": {"()": "controlplane.logging.PlainFormatter"},
        "json": {"()": "controlplane.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["log_context"],
        },
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        # Django's own console handler on "django" wrote each 4xx (django.request) a second
        # time beside the root's: records propagate to the root handler only. runserver's
        # access lines (django.server) use the same handler, without the 4xx/5xx that
        # django.request has logged already.
        "django": {"handlers": [], "propagate": True},
        "django.server": {"handlers": ["console"], "filters": ["access_line"], "propagate": False},
        "django.db.backends": {"level": "WARNING"},
    },
}
