"""Labelled corpus for the redactor: synthetic secrets and look-alike negatives.

Every credential here is generated from its format's *structure* (prefix, alphabet,
length) with a seeded pseudo-random generator; none is a real credential.  The
corpus is deterministic, so recall/false-positive figures are reproducible.

``build_corpus()`` returns :class:`Sample` objects:

* positives carry the secret substrings that must not survive redaction;
* negatives (``secrets == ()``) must come out of ``redact`` byte-identical.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

B62 = string.ascii_letters + string.digits
B64 = B62 + "+/"
B64URL = B62 + "-_"
HEX = "0123456789abcdef"
UPPER32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
DIGITS = string.digits


@dataclass(frozen=True)
class Sample:
    """One corpus entry."""

    kind: str  # format / negative family, e.g. "github-token" or "neg:uuid"
    context: str  # env, json, yaml, code, curl, prose, log, ...
    text: str
    secrets: tuple[str, ...] = ()

    @property
    def positive(self) -> bool:
        return bool(self.secrets)


class _Gen:
    """Deterministic fake-token factory."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)

    def chars(self, alphabet: str, n: int) -> str:
        while True:
            out = "".join(self.rng.choice(alphabet) for _ in range(n))
            low = out.lower()
            # keep generated values away from the words the redactor treats as
            # placeholders, and make sure mixed alphabets really are mixed
            if any(w in low for w in ("xxxx", "your", "example", "here")):
                continue
            if alphabet in (B62, B64, B64URL) and n >= 12 and not any(c.isdigit() for c in out):
                continue
            return out

    def password(self) -> str:
        words = ["river", "Maple", "copper", "Falcon", "violet", "Tundra", "amber", "Quartz"]
        sym = self.rng.choice("!#%^*+=~")
        return (
            self.rng.choice(words)
            + self.chars(DIGITS, 2)
            + sym
            + self.rng.choice(words).upper()[:3]
            + self.chars(B62, 4)
        )

    def b64url_json(self, obj: dict[str, object]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# --------------------------------------------------------------------------------------
# Provider formats: (kind, env var name, factory)
# --------------------------------------------------------------------------------------


def _provider_formats(g: _Gen) -> list[tuple[str, str, Callable[[], str]]]:
    c = g.chars
    return [
        ("aws-access-key-id", "AWS_ACCESS_KEY_ID", lambda: "AKIA" + c(UPPER32, 16)),
        ("aws-access-key-id", "AWS_ACCESS_KEY_ID", lambda: "ASIA" + c(UPPER32, 16)),
        ("github-token", "GITHUB_TOKEN", lambda: "ghp_" + c(B62, 36)),
        ("github-token", "GH_OAUTH", lambda: "gho_" + c(B62, 36)),
        ("github-token", "GH_USER_TOKEN", lambda: "ghu_" + c(B62, 36)),
        ("github-token", "GH_APP_TOKEN", lambda: "ghs_" + c(B62, 36)),
        ("github-token", "GH_REFRESH", lambda: "ghr_" + c(B62, 36)),
        ("github-fine-grained-pat", "GH_PAT", lambda: f"github_pat_{c(B62, 22)}_{c(B62, 59)}"),
        ("gitlab-token", "GITLAB_TOKEN", lambda: "glpat-" + c(B62 + "_-", 20)),
        ("gitlab-token", "CI_DEPLOY", lambda: "gldt-" + c(B62 + "_-", 20)),
        ("gitlab-token", "RUNNER", lambda: "glrt-" + c(B62 + "_-", 20)),
        ("gitlab-token", "TRIGGER", lambda: "glptt-" + c(HEX, 40)),
        (
            "slack-token",
            "SLACK_BOT_TOKEN",
            lambda: f"xoxb-{c(DIGITS, 12)}-{c(DIGITS, 13)}-{c(B62, 24)}",
        ),
        (
            "slack-token",
            "SLACK_USER_TOKEN",
            lambda: f"xoxp-{c(DIGITS, 12)}-{c(DIGITS, 12)}-{c(DIGITS, 13)}-{c(HEX, 32)}",
        ),
        (
            "slack-token",
            "SLACK_APP_TOKEN",
            lambda: f"xapp-1-A{c(UPPER32, 10)}-{c(DIGITS, 13)}-{c(HEX, 64)}",
        ),
        (
            "openai-key",
            "OPENAI_API_KEY",
            lambda: "sk-" + c(B62, 20) + "T3BlbkFJ" + c(B62, 20),
        ),
        ("openai-key", "OPENAI_API_KEY", lambda: "sk-proj-" + c(B64URL, 156)),
        ("openai-key", "OPENAI_SVC", lambda: "sk-svcacct-" + c(B64URL, 120)),
        ("openai-key", "OPENAI_ADMIN", lambda: "sk-admin-" + c(B64URL, 120)),
        ("anthropic-key", "ANTHROPIC_API_KEY", lambda: "sk-ant-api03-" + c(B64URL, 93) + "AA"),
        ("anthropic-key", "ANTHROPIC_ADMIN", lambda: "sk-ant-admin01-" + c(B64URL, 93) + "AA"),
        ("google-api-key", "GOOGLE_API_KEY", lambda: "AIza" + c(B64URL, 35)),
        ("google-api-key", "GOOGLE_CLIENT", lambda: "GOCSPX-" + c(B64URL, 28)),
        ("stripe-key", "STRIPE_SECRET_KEY", lambda: "sk_live_" + c(B62, 24)),
        ("stripe-key", "STRIPE_TEST", lambda: "sk_test_" + c(B62, 99)),
        ("stripe-key", "STRIPE_RESTRICTED", lambda: "rk_live_" + c(B62, 24)),
        ("stripe-key", "STRIPE_RK_TEST", lambda: "rk_test_" + c(B62, 24)),
        ("sendgrid-key", "SENDGRID_API_KEY", lambda: f"SG.{c(B64URL, 22)}.{c(B64URL, 43)}"),
        ("twilio-key", "TWILIO_API_KEY", lambda: "SK" + c(HEX, 32)),
        ("npm-token", "NPM_TOKEN", lambda: "npm_" + c(B62, 36)),
        ("pypi-token", "PYPI_TOKEN", lambda: "pypi-AgEIcHlwaS5vcmc" + c(B64URL, 70)),
        ("huggingface-token", "HF_TOKEN", lambda: "hf_" + c(B62, 34)),
        ("digitalocean-token", "DIGITALOCEAN_TOKEN", lambda: "dop_v1_" + c(HEX, 64)),
        ("shopify-token", "SHOPIFY_TOKEN", lambda: "shpat_" + c(HEX, 32)),
        ("doppler-token", "DOPPLER_TOKEN", lambda: "dp.pt." + c(B62, 43)),
        ("vault-token", "VAULT_TOKEN", lambda: "hvs." + c(B64URL, 90)),
        ("age-secret-key", "SOPS_AGE_KEY", lambda: "AGE-SECRET-KEY-1" + c(BECH32, 58)),
        ("databricks-token", "DATABRICKS_TOKEN", lambda: "dapi" + c(HEX, 32)),
        ("mailgun-key", "MAILGUN_API_KEY", lambda: "key-" + c(HEX, 32)),
        (
            "telegram-bot-token",
            "TELEGRAM_BOT_TOKEN",
            lambda: f"{c('123456789', 1)}{c(DIGITS, 9)}:AA{c(B64URL, 33)}",
        ),
        ("misc-provider-token", "LINEAR_API_KEY", lambda: "lin_api_" + c(B62, 40)),
        ("misc-provider-token", "GROQ_API_KEY", lambda: "gsk_" + c(B62, 52)),
    ]


def _contexts(name: str, tok: str) -> list[tuple[str, str]]:
    """A token in the places agents see them: env, JSON, YAML, code, curl, prose, log."""
    lname = name.lower()
    return [
        ("env", f"export {name}={tok}\n"),
        ("json", json.dumps({"name": "ci", "env": {name: tok}}, indent=2)),
        ("yaml", f"services:\n  app:\n    environment:\n      {name}: {tok}\n"),
        ("code", f'client = Client({lname}="{tok}", timeout=30)\n'),
        ("curl", f'curl -s https://api.example.com/v1/me -H "X-Custom: {tok}"\n'),
        ("prose", f"I rotated the old value {tok} yesterday, it should be dead now."),
        ("log", f"2024-05-01 12:00:01 DEBUG uploading with {tok} (attempt 2)"),
    ]


def _positives(g: _Gen) -> list[Sample]:
    out: list[Sample] = []
    c = g.chars
    for kind, name, make in _provider_formats(g):
        for ctx, _ in _contexts(name, "T"):
            tok = make()
            text = dict(_contexts(name, tok))[ctx]
            out.append(Sample(kind, ctx, text, (tok,)))

    # AWS secret access keys only ever appear next to a keyword.
    for ctx, tmpl in [
        ("env", "AWS_SECRET_ACCESS_KEY={v}\n"),
        ("ini", "[default]\naws_access_key_id = AKIA{k}\naws_secret_access_key = {v}\n"),
        ("json", '{{"Credentials": {{"AccessKeyId": "ASIA{k}", "SecretAccessKey": "{v}"}}}}'),
        ("code", 'boto3.client("s3", aws_secret_access_key="{v}")'),
        ("yaml", "aws:\n  secret_access_key: {v}\n"),
    ]:
        v = c(B64, 40)
        k = c(UPPER32, 16)
        secrets = (v, "AKIA" + k) if "AKIA" in tmpl else (v,)
        if "ASIA" in tmpl:
            secrets = (v, "ASIA" + k)
        out.append(Sample("aws-secret-key", ctx, tmpl.format(v=v, k=k), secrets))

    # Webhook URLs
    for ctx, tmpl in [
        ("env", "SLACK_WEBHOOK_URL={u}\n"),
        ("json", '{{"webhook": "{u}"}}'),
        ("code", 'requests.post("{u}", json={{"text": "deploy done"}})'),
        ("prose", "Post the alert to {u} when the job fails."),
    ]:
        s_path = f"T{c(UPPER32, 9)}/B{c(UPPER32, 9)}/{c(B62, 24)}"
        u = f"https://hooks.slack.com/services/{s_path}"
        out.append(Sample("slack-webhook", ctx, tmpl.format(u=u), (s_path,)))
        d_tok = c(B64URL, 68)
        du = f"https://discord.com/api/webhooks/{c(DIGITS, 18)}/{d_tok}"
        out.append(Sample("discord-webhook", ctx, tmpl.format(u=du), (d_tok,)))

    # Azure storage connection strings
    for ctx, tmpl in [
        ("env", 'AZURE_STORAGE_CONNECTION_STRING="{cs}"\n'),
        ("json", '{{"ConnectionStrings": {{"Blob": "{cs}"}}}}'),
        ("code", 'BlobServiceClient.from_connection_string("{cs}")'),
    ]:
        key = c(B64, 86) + "=="
        cs = (
            f"DefaultEndpointsProtocol=https;AccountName=acct{c(DIGITS, 4)};"
            f"AccountKey={key};EndpointSuffix=core.windows.net"
        )
        out.append(Sample("azure-storage-key", ctx, tmpl.format(cs=cs), (key,)))
    sb_key = c(B64, 43) + "="
    out.append(
        Sample(
            "azure-storage-key",
            "env",
            "SERVICEBUS=Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName="
            f"RootManageSharedAccessKey;SharedAccessKey={sb_key}\n",
            (sb_key,),
        )
    )

    out += _config_file_samples(g)
    out += _pem_samples(g)
    out += _jwt_samples(g)
    out += _url_samples(g)
    out += _keyword_samples(g)
    out += _header_samples(g)
    return out


def _config_file_samples(g: _Gen) -> list[Sample]:
    """Whole files as agents print them: several secrets among ordinary settings."""
    c = g.chars
    out = []
    pw, sk, tok = g.password(), c(B62, 50), "ghp_" + c(B62, 36)
    out.append(
        Sample(
            "file:.env",
            "env",
            f"# local settings\nDEBUG=true\nDATABASE_URL=postgres://app:{pw}@localhost/app\n"
            f"SECRET_KEY=django-insecure-{sk}\nGITHUB_TOKEN={tok}\nALLOWED_HOSTS=*\n",
            (pw, sk, tok),
        )
    )
    pw = g.password()
    out.append(
        Sample(
            "file:docker-compose",
            "yaml",
            "services:\n  db:\n    image: postgres:16\n    environment:\n"
            f"      POSTGRES_USER: app\n      POSTGRES_PASSWORD: {pw}\n    ports:\n"
            '      - "5432:5432"\n',
            (pw,),
        )
    )
    a, b = g.password(), c(B62, 32)
    out.append(
        Sample(
            "file:k8s-secret",
            "yaml",
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\ntype: Opaque\nstringData:\n"
            f"  password: {a}\n  api-key: {b}\n",
            (a, b),
        )
    )
    t = "npm_" + c(B62, 36)
    out.append(
        Sample(
            "file:.npmrc",
            "ini",
            f"registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken={t}\n",
            (t,),
        )
    )
    t = "pypi-AgEIcHlwaS5vcmc" + c(B64URL, 80)
    out.append(
        Sample(
            "file:.pypirc",
            "ini",
            f"[pypi]\n  username = __token__\n  password = {t}\n",
            (t,),
        )
    )
    pw = g.password()
    out.append(
        Sample(
            "file:git-credential",
            "text",
            f"protocol=https\nhost=github.com\nusername=ada\npassword={pw}\n",
            (pw,),
        )
    )
    t = "ghp_" + c(B62, 36)
    out.append(Sample("file:.git-credentials", "text", f"https://ada:{t}@github.com\n", (t,)))
    pw = g.password()
    out.append(
        Sample(
            "libpq",
            "cli",
            f'psql "host=db.internal port=5432 dbname=app user=app password={pw} sslmode=require"',
            (pw,),
        )
    )
    pw = g.password()
    out.append(
        Sample(
            "jdbc",
            "properties",
            "spring.datasource.url=jdbc:postgresql://db:5432/app\n"
            f"spring.datasource.username=app\nspring.datasource.password={pw}\n",
            (pw,),
        )
    )
    pw = c(B62, 16)
    out.append(
        Sample(
            "jdbc",
            "url",
            f"jdbc:mysql://db:3306/shop?user=app&password={pw}&useSSL=true",
            (pw,),
        )
    )
    u = f"{c(HEX, 8)}-{c(HEX, 4)}-4{c(HEX, 3)}-b{c(HEX, 3)}-{c(HEX, 12)}"
    out.append(Sample("key-value:token", "env", f"HEROKU_API_KEY={u}\n", (u,)))
    t = c(B62, 40)
    out.append(
        Sample(
            "file:tfvars",
            "hcl",
            f'region        = "eu-west-1"\ncloudflare_api_token = "{t}"\n',
            (t,),
        )
    )
    v = base64.b64encode(g.password().encode()).decode()
    out.append(
        Sample(
            "file:k8s-secret",
            "yaml",
            f"kind: Secret\ndata:\n  password: {v}\n  username: YWRtaW4=\n",
            (v,),
        )
    )
    return out


def _pem_body(g: _Gen, lines: int) -> list[str]:
    return [g.chars(B64, 64) for _ in range(lines)] + [g.chars(B64, 20) + "=="]


def _pem_samples(g: _Gen) -> list[Sample]:
    out = []
    for label in ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"]:
        body = _pem_body(g, 8)
        block = f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----\n"
        secrets = (body[0], body[3], body[-1])
        out.append(Sample("private-key", "file", "$ cat id_key\n" + block, secrets))
        indented = "tls:\n  key: |\n  " + block.replace("\n", "\n  ")
        out.append(Sample("private-key", "yaml", indented, secrets))
        escaped = json.dumps(
            {"type": "service_account", "private_key_id": g.chars(HEX, 40), "private_key": block}
        )
        out.append(Sample("private-key", "json-escaped", escaped, secrets))
    enc = _pem_body(g, 6)
    out.append(
        Sample(
            "private-key",
            "file",
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,"
            + g.chars(HEX, 32).upper()
            + "\n\n"
            + "\n".join(enc)
            + "\n-----END RSA PRIVATE KEY-----",
            (enc[0], enc[-1]),
        )
    )
    pgp = _pem_body(g, 6)
    out.append(
        Sample(
            "private-key",
            "file",
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
            + "\n".join(pgp)
            + "\n-----END PGP PRIVATE KEY BLOCK-----\n",
            (pgp[0], pgp[-1]),
        )
    )
    trunc = _pem_body(g, 4)
    out.append(
        Sample(
            "private-key",
            "truncated",
            "$ head -5 key.pem\n-----BEGIN PRIVATE KEY-----\n" + "\n".join(trunc[:4]) + "\n$ ",
            (trunc[0], trunc[3]),
        )
    )
    return out


def _jwt(g: _Gen) -> str:
    header = g.b64url_json({"alg": "HS256", "typ": "JWT"})
    payload = g.b64url_json(
        {"sub": g.chars(DIGITS, 10), "name": "Ada", "iat": int(g.chars("123456789", 10))}
    )
    return f"{header}.{payload}.{g.chars(B64URL, 43)}"


def _jwt_samples(g: _Gen) -> list[Sample]:
    out = []
    for ctx, tmpl in [
        ("cookie", "Set-Cookie: session={t}; Path=/; HttpOnly"),
        ("json", '{{"id_token": "{t}", "expires_in": 3600}}'),
        ("prose", "The failing request carried {t} which had already expired."),
        ("code", 'jwt.decode("{t}", options={{"verify_signature": False}})'),
        ("log", "WARN auth middleware rejected {t}: signature mismatch"),
    ]:
        t = _jwt(g)
        out.append(Sample("jwt", ctx, tmpl.format(t=t), (t,)))
    return out


def _url_pw(g: _Gen) -> str:
    letters, digits = g.chars(string.ascii_letters, 4), g.chars(DIGITS, 3)
    return letters + digits + g.chars("!*-_~.", 1) + g.chars(B62, 6)


def _url_samples(g: _Gen) -> list[Sample]:
    out = []
    templates = [
        ("env", "DATABASE_URL={u}\n"),
        ("yaml", "database:\n  url: {u}\n"),
        ("code", 'engine = create_engine("{u}")'),
        ("prose", "Connect with {u} and run the migration."),
        ("log", "INFO connecting to {u} (pool=5)"),
    ]
    urls = [
        "postgres://app:{pw}@db.internal:5432/app",
        "postgresql://app:{pw}@10.0.0.5/app?sslmode=require",
        "mysql://root:{pw}@localhost:3306/shop",
        "mongodb+srv://svc:{pw}@cluster0.ab1cd.mongodb.net/prod?retryWrites=true",
        "redis://:{pw}@cache.internal:6379/0",
        "rediss://default:{pw}@cache.example.net:6380",
        "amqp://guest:{pw}@rabbit:5672/%2F",
        "https://deploy:{pw}@git.example.com/org/repo.git",
        "https://x-access-token:{pw}@github.com/org/repo.git",
    ]
    for i, u in enumerate(urls):
        for ctx, tmpl in templates[i % 2 :: 2] if i % 3 else templates:
            pw = _url_pw(g)
            out.append(Sample("url-credentials", ctx, tmpl.format(u=u.format(pw=pw)), (pw,)))
    for ctx, cmd in [
        ("curl", "curl -u deploy:{pw} https://ci.example.com/api/json"),
        ("curl", "curl -sS --user 'admin:{pw}' -X POST https://jenkins.local/job/x/build"),
        ("curl", "curl --user=bot:{pw} https://api.example.com"),
    ]:
        pw = _url_pw(g)
        out.append(Sample("curl-user", ctx, cmd.format(pw=pw), (pw,)))
    for ctx, tmpl in [
        ("netrc", "machine api.example.com login alice password {pw}\n"),
        ("netrc", "machine git.example.com\n  login bot\n  password {pw}\n"),
    ]:
        pw = _url_pw(g)
        out.append(Sample("netrc", ctx, tmpl.format(pw=pw), (pw,)))
    for ctx, tmpl in [
        ("url", "GET https://api.example.com/v2/items?api_key={v}&page=2"),
        ("url", "fetch('https://graph.example.com/me?fields=id&access_token={v}')"),
        ("url", "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&se=2030-01-01&sig={v}"),
        ("url", "https://bucket.s3.amazonaws.com/k?X-Amz-Expires=900&X-Amz-Signature={v}"),
        ("url", "https://maps.example.com/api?key={v}&q=paris"),
    ]:
        v = g.chars(B62, 32)
        out.append(Sample("query-secret", ctx, tmpl.format(v=v), (v,)))
    return out


# key=value forms (the minimum every build must catch); each key with several syntaxes.
_KV_KEYS_PASSWORD = [
    "password",
    "DB_PASSWORD",
    "passwd",
    "pwd",
    "MYSQL_ROOT_PASSWORD",
    "passphrase",
    "private_key_passphrase",
    "adminPassword",
    "db_pass",
]
_KV_KEYS_TOKEN = [
    "api_key",
    "API_KEY",
    "apiKey",
    "x-api-key",
    "secret",
    "client_secret",
    "clientSecret",
    "SECRET_KEY",
    "access_token",
    "refresh_token",
    "auth_token",
    "authToken",
    "token",
    "credentials",
    "credential",
    "webhook_secret",
    "signing_key",
    "encryption_key",
    "consumer_secret",
    "app_secret",
]
_KV_SYNTAX = [
    ("env", "{k}={v}\n"),
    ("env-quoted", 'export {k}="{v}"\n'),
    ("json", '{{"{k}": "{v}", "region": "eu-west-1"}}'),
    ("yaml", "settings:\n  {k}: {v}\n  debug: false\n"),
    ("yaml-quoted", "{k}: '{v}'\n"),
    ("code", "{k} = '{v}'\n"),
    ("code-kwarg", 'connect(host="db", {k}="{v}", port=5432)'),
    ("ini", "[auth]\n{k} = {v}\n"),
    ("toml", '{k} = "{v}"\n'),
    ("escaped-json", '"{{\\"{k}\\": \\"{v}\\"}}"'),
]


def _keyword_samples(g: _Gen) -> list[Sample]:
    out = []
    for i, k in enumerate(_KV_KEYS_PASSWORD):
        for ctx, tmpl in _KV_SYNTAX:
            if ctx in ("code", "code-kwarg") and not k.replace("_", "").isalnum():
                continue
            v = g.password() if i % 2 == 0 else g.chars(B62, 14)
            out.append(Sample("key-value:password", ctx, tmpl.format(k=k, v=v), (v,)))
    for i, k in enumerate(_KV_KEYS_TOKEN):
        for ctx, tmpl in _KV_SYNTAX:
            if ctx in ("code", "code-kwarg") and "-" in k:
                continue
            v = g.chars(B62, 32) if i % 3 else g.chars(HEX, 40)
            out.append(Sample("key-value:token", ctx, tmpl.format(k=k, v=v), (v,)))
    # Passphrases with spaces (quoted) and SQL forms
    pp = "correct horse battery " + g.chars(DIGITS, 4)
    out.append(Sample("key-value:password", "yaml", f'passphrase: "{pp}"\n', (pp,)))
    for ctx, tmpl in [
        ("sql", "CREATE USER app WITH PASSWORD '{v}';"),
        ("sql", "ALTER USER 'root'@'localhost' IDENTIFIED BY '{v}';"),
        ("cli", "mysqldump --password '{v}' shop > dump.sql"),
        ("cli", "vault login --token {v}"),
        ("cli", "gh auth login --with-token < /dev/null; tool --api-key {v} sync"),
        ("docker", "docker run -e POSTGRES_PASSWORD={v} postgres:16"),
        ("php", "$config['db_password'] = '{v}';"),
        ("js", "const apiKey = '{v}';"),
        ("go", 'cfg := Config{{APIKey: "{v}", Region: "us"}}'),
        ("ruby", "config.secret_key_base = '{v}'"),
    ]:
        v = g.password() if "PASSWORD" in tmpl or "password" in tmpl else g.chars(B62, 32)
        out.append(Sample("key-value", ctx, tmpl.format(v=v), (v,)))
    return out


def _header_samples(g: _Gen) -> list[Sample]:
    out = []
    for ctx, tmpl in [
        ("curl", 'curl -H "Authorization: Bearer {t}" https://api.example.com/v1/me'),
        ("http", "GET /v1/me HTTP/1.1\nHost: api.example.com\nAuthorization: Bearer {t}\n"),
        ("json", '{{"headers": {{"Authorization": "Bearer {t}"}}}}'),
        ("code", 'headers = {{"Authorization": "token {t}"}}'),
        ("http", "Proxy-Authorization: Bearer {t}"),
        ("log", "request headers={{'authorization': 'Bearer {t}', 'accept': '*/*'}}"),
        ("curl", 'curl -H "X-Api-Key: {t}" https://api.example.com'),
        ("curl", 'curl -H "X-Auth-Token: {t}" https://api.example.com'),
        ("curl", 'curl --header "PRIVATE-TOKEN: {t}" https://gitlab.example.com/api/v4/projects'),
        ("curl", 'curl -H "api-key: {t}" https://search.example.com'),
        ("http", "x-goog-api-key: {t}"),
        ("prose", "Then send it as Bearer {t} to the token endpoint."),
    ]:
        t = g.chars(B62 + "-_.", 40)
        out.append(Sample("authorization-header", ctx, tmpl.format(t=t), (t,)))
    for user in ["admin", "ci-bot", "deploy"]:
        b = base64.b64encode(f"{user}:{g.password()}".encode()).decode()
        out.append(
            Sample(
                "authorization-header",
                "curl",
                f'curl -H "Authorization: Basic {b}" https://registry.example.com/v2/',
                (b,),
            )
        )
        out.append(
            Sample(
                "key-value:token",
                "docker-config",
                json.dumps({"auths": {"registry.example.com": {"auth": b}}}, indent=2),
                (b,),
            )
        )
    return out


# --------------------------------------------------------------------------------------
# Negatives: look-alikes that must stay byte-identical
# --------------------------------------------------------------------------------------


def _negatives(g: _Gen) -> list[Sample]:
    c = g.chars
    texts: list[tuple[str, str]] = []

    def add(kind: str, *items: str) -> None:
        texts.extend((kind, t) for t in items)

    for _ in range(6):
        sha = c(HEX, 40)
        add(
            "sha",
            f"commit {sha}\nAuthor: Ada <ada@example.com>\nDate:   Tue May 7 10:00:00 2024\n",
            f'{{"sha": "{sha}", "node_id": "C_{c(B62, 20)}"}}',
            f"git checkout {sha[:12]} && git cherry-pick {sha}",
            f"HEAD is now at {sha[:7]} Fix flaky test",
            f"revision: {sha}",
        )
        uuid = f"{c(HEX, 8)}-{c(HEX, 4)}-4{c(HEX, 3)}-a{c(HEX, 3)}-{c(HEX, 12)}"
        add(
            "uuid",
            f'{{"id": "{uuid}", "status": "done"}}',
            f"request_id={uuid} duration_ms=41",
            f"trace_id: {uuid}",
            f"Created task {uuid}.",
        )
        dig = c(HEX, 64)
        add(
            "digest",
            f"sha256:{dig}",
            f"image: ghcr.io/org/app@sha256:{dig}",
            f"Digest: sha256:{dig}\nStatus: Downloaded newer image for python:3.12-slim",
            f'"integrity": "sha512-{c(B64, 86)}=="',
            f"  integrity sha1-{c(B64, 27)}=",
            f"{dig}  dist/app-1.0.0.tar.gz",
            f'etag: W/"{c(HEX, 32)}"',
            f'"checksum": "md5:{c(HEX, 32)}"',
        )
        add(
            "blob",
            f"data:image/png;base64,iVBORw0KGgo{c(B64, 120)}",
            f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{c(B64, 43)} ada@laptop",
            f"-----BEGIN CERTIFICATE-----\n{c(B64, 64)}\n{c(B64, 64)}\n-----END CERTIFICATE-----",
            f"-----BEGIN PUBLIC KEY-----\n{c(B64, 64)}\n-----END PUBLIC KEY-----",
        )

    placeholders = [
        "os.environ['{K}']",
        'os.environ["{K}"]',
        "os.environ.get('{K}')",
        'os.getenv("{K}")',
        "settings.{K}",
        "get_secret('{k}')",
        "config.{k}",
        "self.{k}",
        "env('{K}')",
        "${{{K}}}",
        "$" + "{K}",
        "{{{{ {k} }}}}",
        "${{{{ secrets.{K} }}}}",
        "<your-{k}>",
        "None",
        "null",
        "***",
        "********",
        "process.env.{K}",
        "vault_read('{k}')",
    ]
    keys = [("password", "DB_PASSWORD"), ("api_key", "API_KEY"), ("token", "GITHUB_TOKEN")]
    for k, K in keys:
        for p in placeholders:
            v = p.format(k=k, K=K)
            add(
                "placeholder",
                f"{k} = {v}",
                f"{K} = {v}" if v.startswith(("os.", "self.", "config.")) else f"{K}={v}",
                f"{k}: {v}",
            )
        add(
            "placeholder",
            f'"{k}": ""',
            f"{K}=",
            f'{k}: ""',
            f'{{"{k}": null}}',
            f"{k}: null",
            f'{k} = "<{k}>"',
            f"{K}=your-{k}-here",
            f'{k}="YOUR_{K}"',
            f"{k}: REPLACE_ME",
            f'{k} = "changeme"',
            f'"{k}": "{{{k}}}"',
            f'{k} = f"{{{k}}}"',
            f"{K}=%{K}%",
            f"{k}: !vault |",
            f"{k}: *default_{k}",
        )
    add(
        "placeholder",
        "Authorization: Bearer $TOKEN",
        "Authorization: Bearer ${GITHUB_TOKEN}",
        "Authorization: Bearer <token>",
        'curl -H "Authorization: Bearer $(gh auth token)" https://api.github.com',
        '"Authorization": f"Bearer {token}"',
        'headers["Authorization"] = "Bearer " + token',
        "Authorization: token {{ github_token }}",
        "Authorization: Basic <base64(user:pass)>",
        "postgres://user:${PGPASSWORD}@db:5432/app",
        "postgres://user:<password>@localhost/app",
        "redis://:${REDIS_PASSWORD}@cache:6379",
        "https://user:{{ token }}@git.example.com/repo.git",
        "AWS_ACCESS_KEY_ID=AKIAXXXXXXXXXXXXXXXX",
        "export OPENAI_API_KEY=sk-...",
        "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "ANTHROPIC_API_KEY=sk-ant-xxxxxxxx",
        "curl -u $USER:$PASS https://example.com",
        'curl -u "${USER}:${TOKEN}" https://api.example.com',
        "token: ${{ secrets.GITHUB_TOKEN }}",
        "password: {{ .Values.postgres.password }}",
        "  POSTGRES_PASSWORD: ${POSTGRES_PASSWORD:-postgres}",
        "PASSWORD=$(cat /run/secrets/db_password)",
        "--password-stdin",
        "echo $CR_PAT | docker login ghcr.io -u USERNAME --password-stdin",
    )

    add(
        "code",
        "def check_password(self, raw_password: str) -> bool:",
        "password = models.CharField(max_length=128)",
        "self.password = password",
        '{"password": password, "username": username}',
        "user.set_password(form.cleaned_data['password'])",
        "token = request.headers.get('Authorization', '').removeprefix('Bearer ')",
        "api_key: str | None = None",
        "password: SecretStr",
        "token: Optional[str] = None",
        "def refresh_token(self, refresh_token: str) -> Token:",
        "if not password:\n    raise ValueError('password required')",
        "access_token = create_access_token(identity=user.id)",
        "secret = secrets.token_hex(32)",
        "SECRET_KEY = env('DJANGO_SECRET_KEY')",
        "SECRET_KEY = os.environ['SECRET_KEY']",
        "AUTH_PASSWORD_VALIDATORS = [",
        'AUTH_USER_MODEL = "accounts.User"',
        "tokenizer = AutoTokenizer.from_pretrained(model_name)",
        "tokens = tokenizer.encode(text)",
        '"max_tokens": 4096,',
        "max_tokens=1024, temperature=0.2",
        '"usage": {"prompt_tokens": 1234, "completion_tokens": 567, "total_tokens": 1801}',
        "token_count = len(tokens)",
        '{"token_type": "bearer", "expires_in": 3600, "scope": "read"}',
        "const token = await getToken();",
        "let password = prompt('Password:');",
        "password_hash = make_password(password)",
        "secretName: db-credentials",
        "      secretKeyRef:\n        name: app-secrets\n        key: password",
        "  credentials: include,",
        "credentials = service_account.Credentials.from_service_account_file(path)",
        "for token in tokens:\n    print(token)",
        "if token is None:\n    return None",
        "CSRF_COOKIE_NAME = 'csrftoken'",
        "passport.authenticate('local')",
        "bypass_cache = True",
        "compass: north",
        "password_reset_timeout = 3600",
        "token_url = 'https://oauth2.example.com/token'",
        "auth: true",
        "auth_type: oauth2",
        "api_key_header = APIKeyHeader(name='X-API-Key')",
        '<input type="password" name="password" id="password">',
        "docker run -u 1000:1000 -v $PWD:/app image",
        "docker exec -u www-data:www-data app php artisan migrate",
        "sort -u names.txt",
        "git push -u origin main",
        "ls -la ~/.ssh/id_rsa",
        "chmod 600 ~/.netrc",
        "keyboard = Keyboard(layout='us')",
        "monkey: patched",
        "primary_key=True",
        "cache_key = f'user:{user_id}'",
        "sort_key: created_at",
        "public_key: ssh-ed25519",
    )
    add(
        "prose",
        "Store the token in your password manager, never in the repository.",
        "The password: must be at least 12 characters long.",
        "Use a Bearer token in the Authorization header.",
        "Authorization: required for all write endpoints.",
        "Rotate the API key every 90 days and revoke the old secret.",
        "The refresh token expires after 30 days; the access token after one hour.",
        "Set GITHUB_TOKEN as a repository secret in Settings > Secrets.",
        "We use JWTs signed with RS256; the private key lives in Vault.",
        "Credentials are read from ~/.aws/credentials by default.",
        "Note: password authentication was removed on August 13, 2021.",
        "I checked the secret: it is mounted at /var/run/secrets and readable.",
    )
    add(
        "url",
        "https://github.com/org/repo/pull/42",
        "git clone git@github.com:org/repo.git",
        "https://user@github.com/org/repo.git",
        "postgres://localhost:5432/app",
        "redis://localhost:6379/0",
        "http://127.0.0.1:8000/api/tasks/?page=2&page_size=50",
        "https://example.com/search?q=token+rotation&lang=en",
        "mongodb://mongo:27017/?replicaSet=rs0",
        "amqp://rabbit:5672/%2F",
        "See https://docs.example.com/auth#tokens for details.",
        "https://accounts.example.com/o/oauth2/auth?client_id=abc.apps.example.com&scope=email",
        "ssh://git@git.example.com:2222/org/repo.git",
    )
    add(
        "traceback",
        'Traceback (most recent call last):\n  File "/app/auth/tokens.py", line 42, in '
        "refresh_token\n    token = self._client.refresh(refresh_token)\n"
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
        "https://api.example.com/oauth/token",
        "KeyError: 'api_key'",
        "django.core.exceptions.ImproperlyConfigured: Set the SECRET_KEY environment variable",
        "psycopg.OperationalError: connection failed: FATAL:  password authentication failed "
        'for user "app"',
        "jwt.exceptions.ExpiredSignatureError: Signature has expired",
        "AttributeError: 'NoneType' object has no attribute 'token'",
    )
    add(
        "test-output",
        "tests/test_auth.py::test_password_reset PASSED                        [ 12%]",
        "FAILED tests/test_auth.py::test_token_refresh - AssertionError: assert 401 == 200",
        "E       AssertionError: assert 'bearer' == 'Bearer'",
        "====== 3 passed, 1 skipped in 0.42s ======",
        "test_api_key_missing (tests.test_api.KeyTests) ... ok",
        "ok  \tgithub.com/org/app/auth\t0.012s",
        "PASS src/auth/token.test.ts (5.1 s)",
    )
    add(
        "misc",
        "color: #3fa9f5; background: #0b0b0bff;",
        "version: 2.14.3-rc.1+build.5",
        "2024-05-01T12:00:01.123456Z INFO task finished in 12.3s",
        "-rw-r--r--  1 ada staff  4096 May  1 12:00 secrets.yaml",
        "diff --git a/app/auth.py b/app/auth.py\n--- a/app/auth.py\n+++ b/app/auth.py\n"
        "@@ -10,7 +10,7 @@ def login(request):\n-    token = issue(user)\n"
        "+    token = issue(user, ttl=3600)",
        "The Asia-Pacific region (ap-southeast-1) is cheaper.",
        "scikit-learn==1.5.0  sk-learn alias",
        "key-value store",
        "Hashes: sha256=" + c(HEX, 64),
        "machine learning login flow with password reset",
    )
    add(
        "file",
        "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n    env:\n"
        "      DATABASE_URL: postgres://postgres:${{ secrets.PG_PASSWORD }}@localhost/test\n"
        "      OPENAI_API_KEY: ${{ secrets.OPENAI_API_KEY }}\n    steps:\n"
        "      - uses: actions/checkout@v4\n      - run: pytest -q\n",
        "services:\n  db:\n    image: postgres:16\n    environment:\n"
        "      POSTGRES_PASSWORD: ${POSTGRES_PASSWORD}\n"
        "      POSTGRES_USER: ${POSTGRES_USER:-app}\n",
        'SECRET_KEY = env("SECRET_KEY")\nDEBUG = env.bool("DEBUG", default=False)\n'
        'DATABASES = {"default": env.db("DATABASE_URL")}\n'
        'EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")\n',
        "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n"
        "        name: db\n        key: password\n",
        f"go.opentelemetry.io/otel v1.24.0 h1:{c(B64, 43)}=\n"
        f"go.opentelemetry.io/otel v1.24.0/go.mod h1:{c(B64, 43)}=\n",
        f'[[package]]\nname = "requests"\nversion = "2.32.3"\nfiles = [\n'
        f'    {{file = "requests-2.32.3.tar.gz", hash = "sha256:{c(HEX, 64)}"}},\n]\n',
        f'"node_modules/lodash": {{\n  "version": "4.17.21",\n  "resolved": '
        f'"https://registry.npmjs.org/lodash/-/lodash-4.17.21.tgz",\n  "integrity": '
        f'"sha512-{c(B64, 86)}=="\n}}',
        f"arn:aws:iam::{c(DIGITS, 12)}:role/deploy-role\n"
        f"arn:aws:secretsmanager:eu-west-1:{c(DIGITS, 12)}:secret:prod/db-AbCdEf",
        "  # aws_secret_access_key is read from the environment\n  region = eu-west-1\n",
        "$ gh auth status\n  Logged in to github.com account ada (keyring)\n"
        "  - Token: gho_************************************\n  - Token scopes: 'repo'\n",
    )
    return [Sample("neg:" + kind, "negative", text) for kind, text in texts]


# --------------------------------------------------------------------------------------
# The syntax part: every minimum form whatever the value length, every assignment syntax,
# newer provider formats; each with look-alike negatives in the same syntax.
# --------------------------------------------------------------------------------------


def _new_provider_formats(g: _Gen) -> list[tuple[str, str, Callable[[], str]]]:
    c = g.chars
    upper36 = string.ascii_uppercase + DIGITS
    return [
        ("aws-bedrock-key", "AWS_BEARER_TOKEN_BEDROCK", lambda: "ABSK" + c(B64, 132)),
        ("azure-ad-client-secret", "AZURE_CLIENT_SECRET", lambda: c(B62, 3) + "8Q~" + c(B62, 34)),
        (
            "sourcegraph-token",
            "SRC_ACCESS_TOKEN",
            lambda: f"sgp_{c(HEX, 16)}_{c(HEX, 40)}",
        ),
        ("facebook-access-token", "FB_ACCESS_TOKEN", lambda: "EAAC" + c(B62, 160)),
        (
            "onepassword-secret-key",
            "OP_SECRET_KEY",
            lambda: "A3-" + "-".join(c(upper36, n) for n in (6, 6, 5, 5, 5, 5)),
        ),
        (
            "onepassword-service-account-token",
            "OP_SERVICE_ACCOUNT_TOKEN",
            lambda: "ops_eyJ" + c(B64, 300),
        ),
        ("heroku-key", "HEROKU_API_KEY", lambda: "HRKU-AA" + c(B62 + "_-", 58)),
        ("newrelic-key", "NEW_RELIC_API_KEY", lambda: "NRAK-" + c(upper36, 27)),
        ("postman-key", "POSTMAN_API_KEY", lambda: f"PMAK-{c(HEX, 24)}-{c(HEX, 34)}"),
        ("pulumi-token", "PULUMI_ACCESS_TOKEN", lambda: "pul-" + c(HEX, 40)),
        ("grafana-token", "GRAFANA_SA_TOKEN", lambda: f"glsa_{c(B62, 32)}_{c(HEX, 8)}"),
        ("sentry-token", "SENTRY_AUTH_TOKEN", lambda: "sntrys_" + c(B64, 160)),
        ("notion-token", "NOTION_TOKEN", lambda: "ntn_" + c(B62, 46)),
        ("figma-token", "FIGMA_TOKEN", lambda: "figd_" + c(B62 + "_-", 40)),
        ("supabase-token", "SUPABASE_ACCESS_TOKEN", lambda: "sbp_" + c(HEX, 40)),
        (
            "tailscale-key",
            "TS_AUTHKEY",
            lambda: f"tskey-auth-{c(B62, 12)}-{c(B62, 32)}",
        ),
        ("atlassian-token", "JIRA_API_TOKEN", lambda: "ATATT3" + c(B62 + "_-", 186)),
        ("docker-hub-token", "DOCKERHUB_TOKEN", lambda: "dckr_pat_" + c(B62 + "_-", 27)),
        ("alibaba-key", "ALIBABA_ACCESS_KEY_ID", lambda: "LTAI" + c(B62, 20)),
        ("planetscale-token", "PLANETSCALE_TOKEN", lambda: "pscale_tkn_" + c(B62, 43)),
        ("package-registry-token", "GEM_HOST_API_KEY", lambda: "rubygems_" + c(HEX, 48)),
        ("misc-provider-token", "PREFECT_API_KEY", lambda: "pnu_" + c(B62, 36)),
        ("misc-provider-token", "OPENSHIFT_TOKEN", lambda: "sha256~" + c(B64URL, 43)),
        ("github-token", "GH_SHORT", lambda: "ghp_" + c(B62, 10)),
        ("github-token", "GH_LONG", lambda: "ghs_" + c(B62, 850)),
        ("openai-key", "OPENAI_SHORT", lambda: "sk-" + c(B62, 9)),
        ("slack-token", "SLACK_SHORT", lambda: "xoxb-" + c(B62, 6)),
    ]


_SYNTAX_PASSWORD_KEYS = ["password", "DB_PASSWORD", "adminPass", "smtp_passwd", "passphrase"]
_SYNTAX_TOKEN_KEYS = ["api_token", "API_KEY", "clientSecret", "accessToken", "credentials"]


def _camel(key: str) -> str:
    parts = key.lower().split("_")
    return parts[0] + "".join(p.title() for p in parts[1:])


# (context, template): {K} key as written, {Kc} camelCase, {KU} UPPER_SNAKE, {v} the value.
_SYNTAXES = [
    ("shell", "export {KU}={v}\n"),
    ("shell", 'export {KU}="{v}"\n'),
    ("shell", "{KU}='{v}' ./deploy.sh --prod\n"),
    ("shell", '$env:{KU} = "{v}"\n'),
    ("shell", "set -gx {KU} {v}\n"),
    ("shell", "setenv {KU} {v}\n"),
    ("env", "# .env\nDEBUG=false\n{KU}={v}\nLOG_LEVEL=info\n"),
    ("yaml", "app:\n  name: shop\n  {K}: {v}\n  port: 8080\n"),
    ("yaml", 'smtp:\n  {K}: "{v}"\n'),
    ("json", '{{"service": "billing", "{K}": "{v}", "retries": 3}}'),
    ("json-escaped", '"{{\\"{K}\\": \\"{v}\\"}}"'),
    ("toml", '[database]\nhost = "db"\n{K} = "{v}"\n'),
    ("ini", "[server]\nhost = mail.internal\n{K} = {v}\n"),
    ("xml", "<settings>\n  <{Kc}>{v}</{Kc}>\n</settings>"),
    (
        "xml",
        '<configuration><appSettings><add key="{Kc}" value="{v}" /></appSettings></configuration>',
    ),
    ("xml", '<bean id="ds"><property name="{Kc}" value="{v}"/></bean>'),
    ("xml", '<dataSource url="jdbc:postgresql://db/app" user="app" {Kc}="{v}" />'),
    ("go", 'var {Kc} string = "{v}"\n'),
    ("go", '{Kc} := "{v}"\n'),
    ("java", 'private static final String {KU} = "{v}";\n'),
    ("java", 'System.setProperty("{KU}", "{v}");\n'),
    ("csharp", 'const string {Kc} = "{v}";\n'),
    ("csharp", 'var {Kc} = @"{v}";\n'),
    ("php", "${Kc} = '{v}';\n"),
    ("php", '${Kc} .= "{v}";\n'),
    ("php", "define('{KU}', '{v}');\n"),
    ("php", "$config = ['{K}' => '{v}'];\n"),
    ("ruby", 'config.{K} = "{v}"\n'),
    ("ruby", "ENV['{KU}'] = '{v}'\n"),
    ("ruby", "client = Api.new(:{K} => '{v}')\n"),
    ("js", 'const {Kc} = "{v}";\n'),
    ("js", "module.exports = {{ {Kc}: '{v}' }};\n"),
    ("ts", 'const {Kc}: string = "{v}";\n'),
    ("kotlin", 'val {Kc}: String = "{v}"\n'),
    ("python", '{K} = "{v}"\n'),
    ("python", 'os.environ["{KU}"] = "{v}"\n'),
    ("python", 'os.environ.setdefault("{KU}", "{v}")\n'),
    ("makefile", "{KU} ?= {v}\n"),
    ("makefile", "{KU} ::= {v}\n"),
    ("makefile", "{KU} :::= {v}\n"),
    ("makefile", "{KU} := {v}\n"),
    ("dockerfile", "ENV {KU} {v}\n"),
    ("hcl", '{K} = "{v}"\n'),
]

_CLI_SYNTAXES = [
    "mysql -h db -u root -p{v} shop",
    "mysqldump -uapp -p'{v}' --single-transaction shop > dump.sql",
    "sshpass -p {v} ssh deploy@10.0.0.7",
    "docker login -u ci -p {v} registry.example.com",
    "podman login --username ci --password {v} quay.io",
    "./manage.py createsuperuser --password={v}",
    "terraform apply -var api_token={v}",
    "some-cli --api-key {v} --region eu",
    "vault login --auth-token={v}",
    "redis-cli -h cache -a {v} ping",
    "curl -u ci:{v} https://ci.example.com/api",
    "openssl pkcs12 -export -in c.pem -passout pass:{v} -out c.p12",
]


def _syntax_values(g: _Gen) -> list[Callable[[], str]]:
    c = g.chars
    return [
        g.password,
        lambda: c(string.ascii_lowercase, 6) + c(DIGITS, 1),  # hunter2-like, short
        lambda: c(B62, 24),
        lambda: "Sup3r" + c(B62, 3) + "Example" + c(DIGITS, 2) + "!",  # contains "example"
        lambda: "xxxxxxxx" + c(B62, 8) + c(DIGITS, 2),  # starts with xxxx
        lambda: c(B64URL, 600),  # longer than any old bound
        lambda: c(DIGITS, 8),
    ]


def _fill(tmpl: str, key: str, value: str) -> str:
    upper = key.upper() if "_" in key or key.islower() else _snake(key).upper()
    return (
        tmpl.replace("{{", "{")
        .replace("}}", "}")
        .replace("{KU}", upper)
        .replace("{Kc}", _camel(upper))
        .replace("{K}", key)
        .replace("{v}", value)
    )


def _snake(key: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in key).lstrip("_")


def _syntax_positives(g: _Gen) -> list[Sample]:
    out = []
    for kind, name, make in _new_provider_formats(g):
        for ctx, _ in _contexts(name, "T"):
            tok = make()
            out.append(Sample(kind, ctx, dict(_contexts(name, tok))[ctx], (tok,)))
    values = _syntax_values(g)
    keys = _SYNTAX_PASSWORD_KEYS + _SYNTAX_TOKEN_KEYS
    for i, (ctx, tmpl) in enumerate(_SYNTAXES):
        for j in range(3):
            key = keys[(i + j * 3) % len(keys)]
            value = values[(i + j) % len(values)]()
            if ctx in ("json-escaped",) or "'" in tmpl:
                value = value.replace("'", "")
            out.append(Sample("syntax:" + ctx, ctx, _fill(tmpl, key, value), (value,)))
    for i, tmpl in enumerate(_CLI_SYNTAXES):
        for j in range(2):
            value = values[(i + j) % len(values)]()
            out.append(Sample("syntax:cli", "cli", tmpl.replace("{v}", value), (value,)))
    # minimum forms with short values
    for tmpl in [
        "token={v}",
        'api_key: "{v}"',
        "secret: {v}",
        "Authorization: Bearer {v}",
        "Authorization: token {v}",
        "<password>{v}</password>",
        "export GITHUB_TOKEN={v}",
        '"password": "{v}"',
        "credentials={v}",
    ]:
        for make in values[:2] + values[6:]:
            value = make()
            out.append(Sample("minimum-form", "short", tmpl.replace("{v}", value), (value,)))
    # Kubernetes Secrets: every data/stringData value, whatever the key
    for _ in range(4):
        a, b, d = g.chars(B64, 44) + "=", g.chars(B64, 24), g.password()
        out.append(
            Sample(
                "kubernetes-secret",
                "k8s",
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\ntype: Opaque\n"
                f"data:\n  database-url: {a}\n  tls.key: {b}\nstringData:\n  smtp: {d}\n",
                (a, b, d),
            )
        )
        out.append(
            Sample(
                "kubernetes-secret",
                "k8s",
                f"apiVersion: v1\ndata:\n  .dockerconfigjson: {a}\nkind: Secret\nmetadata:\n"
                "  name: regcred\ntype: kubernetes.io/dockerconfigjson\n",
                (a,),
            )
        )
        out.append(
            Sample(
                "kubernetes-secret",
                "k8s-json",
                json.dumps({"apiVersion": "v1", "kind": "Secret", "data": {"ca.crt": a, "x": b}}),
                (a, b),
            )
        )
    # .NET / NuGet config
    for _ in range(3):
        pw, tok = g.password().replace(";", ""), g.chars(B62, 32)
        out.append(
            Sample(
                "dotnet",
                "dotnet",
                "<packageSourceCredentials><feed>\n"
                '  <add key="Username" value="ci" />\n'
                f'  <add key="ClearTextPassword" value="{pw}" />\n'
                "</feed></packageSourceCredentials>",
                (pw,),
            )
        )
        out.append(
            Sample(
                "dotnet",
                "dotnet",
                json.dumps(
                    {
                        "ConnectionStrings": {
                            "Default": f"Server=tcp:db,1433;Database=app;User ID=app;Password={pw};"
                        },
                        "Stripe": {"ApiKey": tok},
                    },
                    indent=2,
                ),
                (pw, tok),
            )
        )
        out.append(
            Sample(
                "dotnet",
                "dotnet",
                f"Data Source=.;Initial Catalog=shop;User Id=sa;Pwd={pw};TrustServerCertificate=1",
                (pw,),
            )
        )
    c = g.chars
    for ctx, tmpl in [
        ("env", "BUNDLE_ENTERPRISE__CONTRIBSYS__COM={creds}\n"),
        ("yaml", 'BUNDLE_GEMS__CONTRIBSYS__COM: "{creds}"\n'),
    ]:
        creds = f"{c(HEX, 8)}:{c(HEX, 8)}"
        out.append(Sample("sidekiq-credentials", ctx, tmpl.format(creds=creds), (creds,)))
    hook = f"{c(HEX, 8)}-1234-4abc-8def-{c(HEX, 12)}@{c(HEX, 8)}/IncomingWebhook/{c(HEX, 32)}"
    out.append(
        Sample(
            "teams-webhook",
            "env",
            f"TEAMS_WEBHOOK=https://acme.webhook.office.com/webhookb2/{hook}\n",
            (hook,),
        )
    )
    return out


def _syntax_negatives(g: _Gen) -> list[Sample]:
    c = g.chars
    refs = [
        "${SECRET}",
        "$SECRET",
        "<your-token>",
        "null",
        "",
        "***",
        "xxxxxxxx",
        "{{ secret }}",
        "${{ secrets.TOKEN }}",
        "%SECRET%",
    ]
    texts: list[tuple[str, str]] = []
    keys = _SYNTAX_PASSWORD_KEYS + _SYNTAX_TOKEN_KEYS
    for i, (ctx, tmpl) in enumerate(_SYNTAXES):
        if ctx in ("json-escaped", "xml") and i % 2:
            continue
        ref = refs[i % len(refs)]
        if ref == "" and ctx in ("shell", "dockerfile", "makefile", "ini", "yaml"):
            ref = "$SECRET"
        texts.append(("syntax:" + ctx, _fill(tmpl, keys[i % len(keys)], ref)))
    code_refs = [
        ("go", '{Kc} := os.Getenv("{KU}")\n'),
        ("go", "var {Kc} string\n"),
        ("java", 'String {Kc} = System.getenv("{KU}");\n'),
        ("java", 'String {Kc} = System.getProperty("{KU}");\n'),
        ("csharp", 'var {Kc} = Environment.GetEnvironmentVariable("{KU}");\n'),
        ("php", "${Kc} = getenv('{KU}');\n"),
        ("php", "define('{KU}', getenv('{KU}'));\n"),
        ("ruby", '{K}: ENV["{KU}"],\n'),
        ("ruby", 'config.{K} = ENV.fetch("{KU}")\n'),
        ("js", "const {Kc} = process.env.{KU};\n"),
        ("js", "{Kc}: config.get('{K}'),\n"),
        ("python", '{K} = os.environ["{KU}"]\n'),
        ("python", 'os.environ.setdefault("{KU}", "")\n'),
        ("makefile", "{KU} ?= $(shell cat .secrets/{K})\n"),
        ("makefile", "{KU} ?= ${{{KU}}}\n"),
        ("xml", "<{Kc}>${{env.{KU}}}</{Kc}>"),
        ("xml", '<add key="{Kc}" value="%{KU}%" />'),
        ("hcl", "{K} = var.{K}\n"),
        ("yaml", "{K}: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n"),
        ("toml", '{K} = ""\n'),
    ]
    for i, (ctx, tmpl) in enumerate(code_refs):
        for key in (keys[i % len(keys)], keys[(i + 5) % len(keys)]):
            texts.append(("syntax:" + ctx, _fill(tmpl, key, "")))
    sha, uuid = c(HEX, 40), f"{c(HEX, 8)}-{c(HEX, 4)}-4{c(HEX, 3)}-a{c(HEX, 3)}-{c(HEX, 12)}"
    texts += [
        ("cli", "mysql -h db -u root -p shop"),
        ("cli", "docker run -p 8080:80 -p 5432:5432 app"),
        ("cli", "ssh -p 2222 deploy@10.0.0.7"),
        ("cli", "mkdir -p build/dist && cp -a src build"),
        ("cli", "git log -p --stat HEAD~3"),
        ("cli", "pip install -U pip && ls -a"),
        ("cli", "./manage.py createsuperuser --no-password"),
        ("cli", "docker login --password-stdin < token.txt"),
        ("cli", 'sshpass -p "$SSHPASS" ssh deploy@host'),
        ("cli", "gh auth login --with-token < token.txt"),
        ("cli", "app --token-file /run/secrets/token --password-file=/run/secrets/pw"),
        (
            "k8s",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"
            "data:\n  LOG_LEVEL: debug\n  REGION: eu-west-1\n",
        ),
        (
            "k8s",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n"
            "  template:\n    spec:\n      containers:\n        - name: app\n          env:\n"
            "            - name: DB_PASSWORD\n              valueFrom:\n"
            "                secretKeyRef:\n"
            "                  name: db\n                  key: password\n",
        ),
        ("k8s", "kind: Secret\nstringData:\n  password: ${DB_PASSWORD}\n  token: <token>\n"),
        ("dotnet", "Server=db;Database=app;Integrated Security=true;TrustServerCertificate=1"),
        ("dotnet", '<add key="ClearTextPassword" value="" />'),
        ("dotnet", '<add key="Username" value="ci" />'),
        ("xml", '<label for="password">Password</label>\n<input type="password" name="password">'),
        ("xml", "<title>Reset your password</title>"),
        ("xml", "<token>${GITHUB_TOKEN}</token>"),
        ("key-position", f"commit: {sha}\nrequest_id: {uuid}\nimage_digest: sha256:{c(HEX, 64)}"),
        ("key-position", f'{{"id": "{uuid}", "sha": "{sha}", "tokens_used": 1234}}'),
        ("key-position", f"DJANGO_SETTINGS_MODULE=app.settings\nGIT_SHA={sha}"),
        ("prose", "Pass the token with --token or set GITHUB_TOKEN; the password flag is -p."),
        ("prose", "The secret: it lives in Vault, not in the repository."),
        ("prose", "A 1Password secret key starts with A3- and has six groups."),
        ("prose", "Facebook page tokens start with EAA; Sourcegraph ones with sgp_."),
        ("code", 'migrations = [("auth", "0012_alter_user_first_name_max_length")]'),
        ("code", 'SESSION_KEY = "_auth_user_id"'),
        ("code", 'choices = [("password", "Password"), ("token", "Token")]'),
        ("code", "if password_changed and token_valid:\n    rotate()"),
        ("code", "token_count: int = 0\nmax_tokens = 4096"),
    ]
    return [Sample("neg:" + kind, "negative", text) for kind, text in texts]


def _prose_password_samples(g: _Gen) -> list[Sample]:
    """Passwords stated in sentences, and sentences about passwords that hold none."""
    out = []
    for template in (
        "The staging database password is: {v}",
        "my password is {v}.",
        "Log in as admin (password is {v}) and rotate it.",
        "The old passphrase was {v} before the rotation.",
        "FYI the pwd is: {v}",
    ):
        for _ in range(4):
            value = g.password() if "is:" in template else g.chars(B62, 14)
            out.append(Sample("prose-password", "prose", template.format(v=value), (value,)))
    negatives = (
        "The password is required for every login.",
        "The password is too short: use at least 12 characters.",
        "The password is 8 characters long at minimum.",
        "The password is stored in 1Password under 'staging'.",
        "The password is sha256-hashed before it is stored.",
        "The password is: ${DB_PASSWORD} (from the environment).",
        "The password's hash is compared in constant time.",
        "The password was rotated yesterday by the on-call engineer.",
        "The passphrase is optional when the key is in the agent.",
        "Remember: the pwd is not the same as the PIN.",
    )
    return out + [Sample("neg:prose-password", "negative", text) for text in negatives]


def build_corpus(seed: str = "automemory-redactor-corpus-v1") -> list[Sample]:
    """The full labelled corpus (positives then negatives), deterministic for ``seed``.

    Each part has its own generator, so adding samples to one part leaves the others
    byte-identical.
    """
    from tests.automemory.redactor.corpus_disguised import build_disguised_corpus

    g = _Gen(seed)
    g_syntax = _Gen(seed + SYNTAX_SEED_SUFFIX)
    prose = _prose_password_samples(_Gen(seed + "-prose"))
    disguised = build_disguised_corpus(seed)
    return (
        _positives(g)
        + _syntax_positives(g_syntax)
        + [s for s in prose if s.positive]
        + [s for s in disguised if s.positive]
        + _negatives(g)
        + _syntax_negatives(g_syntax)
        + [s for s in prose if not s.positive]
        + [s for s in disguised if not s.positive]
    )


# The syntax part's seed suffix: a generator of its own, so the other parts' samples do not
# depend on it.
SYNTAX_SEED_SUFFIX = "-syntax"


def build_syntax_corpus(seed: str = "automemory-redactor-corpus-v1") -> list[Sample]:
    """Only the syntax part: the minimum forms with short values, every assignment syntax,
    newer provider formats, and their look-alike negatives; deterministic for ``seed``."""
    g_syntax = _Gen(seed + SYNTAX_SEED_SUFFIX)
    return _syntax_positives(g_syntax) + _syntax_negatives(g_syntax)
