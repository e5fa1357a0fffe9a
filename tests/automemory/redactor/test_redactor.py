"""Targeted behaviour of automemory.services.redactor: the minimum forms, every value length,
every assignment syntax, the provider formats, what must stay unchanged.

All credentials below are synthetic: fixed filler built from each format's structure.
"""

from __future__ import annotations

import json

import pytest

from automemory.services.redactor import REDACTED, RULES, find_secrets, redact, secret_kinds

R = REDACTED
T32 = "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"  # 32 mixed base62 chars
HEX40 = "0123456789abcdef0123456789abcdef01234567"


def _b(n: int, seed: str = "Zq9") -> str:
    """Deterministic base62-ish filler of length n."""
    out = (seed + "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY") * (n // 30 + 2)
    return out[:n]


# --- the minimum: secret-named key=value pairs, GitHub and Slack tokens ------------------

MINIMUM_FORMS = [
    ("API_KEY=" + T32, "API_KEY=" + R),
    ("api_key: " + T32, "api_key: " + R),
    ('"api_key": "' + T32 + '"', '"api_key": "' + R + '"'),
    ("api_key = '" + T32 + "'", "api_key = '" + R + "'"),
    ("apiKey=" + T32, "apiKey=" + R),
    ("password=hunter2", "password=" + R),
    ("password: hunter2", "password: " + R),
    ('"password": "hunter2"', '"password": "' + R + '"'),
    ("password = 'hunter2'", "password = '" + R + "'"),
    ("DB_PASSWORD=Sup3r$ecret!", "DB_PASSWORD=" + R),
    ("passwd=letmein1", "passwd=" + R),
    ("pwd: letmein1", "pwd: " + R),
    ('passphrase: "correct horse battery staple"', 'passphrase: "' + R + '"'),
    ("private_key_passphrase = 'k3y-pass'", "private_key_passphrase = '" + R + "'"),
    ("secret=" + T32, "secret=" + R),
    ("client_secret: " + T32, "client_secret: " + R),
    ('"clientSecret": "' + T32 + '"', '"clientSecret": "' + R + '"'),
    ("SECRET_KEY = '" + T32 + "'", "SECRET_KEY = '" + R + "'"),
    ("token=" + T32, "token=" + R),
    ("access_token: " + T32, "access_token: " + R),
    ('"refresh_token": "' + T32 + '"', '"refresh_token": "' + R + '"'),
    ("auth_token = '" + T32 + "'", "auth_token = '" + R + "'"),
    ("credentials=" + T32, "credentials=" + R),
    ("credential: " + T32, "credential: " + R),
    ("Authorization: Bearer " + T32, "Authorization: Bearer " + R),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic " + R),
    ("Authorization: token " + T32, "Authorization: token " + R),
    ('{"Authorization": "Bearer ' + T32 + '"}', '{"Authorization": "Bearer ' + R + '"}'),
    ("X-Api-Key: " + T32, "X-Api-Key: " + R),
    ('curl -H "x-api-key: ' + T32 + '" https://h', 'curl -H "x-api-key: ' + R + '" https://h'),
    ("PRIVATE-TOKEN: " + T32, "PRIVATE-TOKEN: " + R),
    ("key sk-" + _b(48) + " leaked", "key " + R + " leaked"),
    ("ghp_" + _b(36), R),
    ("gho_" + _b(36), R),
    ("xoxb-123456789012-1234567890123-" + _b(24), R),
    ("xoxp-123456789012-123456789012-1234567890123-" + HEX40[:32], R),
]


@pytest.mark.parametrize(("text", "expected"), MINIMUM_FORMS)
def test_the_minimum_forms(text: str, expected: str) -> None:
    assert redact(text) == expected


# Every minimum form whatever the length of the value, each with the
# placeholder twin that must stay.
SHORT_MINIMUM_FORMS = [
    ("token=hunter2", "token=" + R, "token=${TOKEN}"),
    ('api_key: "mykey"', 'api_key: "' + R + '"', 'api_key: "<your-key>"'),
    ("secret: 12345678", "secret: " + R, "secret: null"),
    ("Authorization: Bearer abc", "Authorization: Bearer " + R, "Authorization: Bearer $TOKEN"),
    (
        "Authorization: token abc123",
        "Authorization: token " + R,
        "Authorization: token {{ github_token }}",
    ),
    ("key sk-abc123 leaked", "key " + R + " leaked", "key sk-... leaked"),
    ("xoxb-abc", R, "xoxb-your-token"),
    ("gho_Ab3x", R, "gho_****"),
    ("ghp_abc123", R, "ghp_xxxxxxxx"),
    ("<password>hunter22</password>", "<password>" + R + "</password>", "<password></password>"),
    ("export GITHUB_TOKEN=mytok3n", "export GITHUB_TOKEN=" + R, "export GITHUB_TOKEN=$GH_TOKEN"),
    ("DB_PASSWORD=Sup3rExampleS3cret!", "DB_PASSWORD=" + R, "DB_PASSWORD=example"),
    ("token: xxxxxxxxRealTok3n99", "token: " + R, "token: xxxxxxxx"),
    ("password: p4", "password: " + R, "password: ***"),
    ("credentials: s3cr3t", "credentials: " + R, "credentials: os.environ['CREDS']"),
    ('client_secret = "x1"', 'client_secret = "' + R + '"', 'client_secret = ""'),
]


@pytest.mark.parametrize(("text", "expected", "twin"), SHORT_MINIMUM_FORMS)
def test_the_minimum_forms_whatever_the_value_length(text: str, expected: str, twin: str) -> None:
    assert redact(text) == expected
    assert redact(twin) == twin


# Assignment syntaxes of every language and format the redactor covers.
ASSIGNMENT_SYNTAXES = [
    "<apiToken>{v}</apiToken>",
    '<add key="ClearTextPassword" value="{v}" />',
    'var xToken string = "{v}"',
    '$xToken .= "{v}";',
    'System.setProperty("X_TOKEN", "{v}");',
    "X_TOKEN ?= {v}",
    "X_TOKEN ::= {v}",
    "X_TOKEN :::= {v}",
    "X_TOKEN := {v}",
    'private static final String API_TOKEN = "{v}";',
    'const string ApiToken = "{v}";',
    'let api_token: &str = "{v}";',
    "config.api_token = '{v}'",
    "$env:API_TOKEN = '{v}'",
    "set API_TOKEN={v}",
    "setenv API_TOKEN {v}",
    "ENV API_TOKEN {v}",
    'token = "{v}"  # TOML',
    "[auth]\ntoken = {v}",
    "mysql -uroot -p{v} shop",
    "sshpass -p '{v}' ssh ci@host",
    "some-cli --api-key={v}",
    "curl -u ci:{v} https://ci.example.com",
]


@pytest.mark.parametrize("template", ASSIGNMENT_SYNTAXES)
def test_assignment_syntaxes(template: str) -> None:
    value = "Zq9aB3dE5fG7hJ9k"
    text = template.format(v=value)
    assert redact(text) == template.format(v=R)


def test_kubernetes_secret_data_values_go_whatever_the_key() -> None:
    text = (
        "apiVersion: v1\ndata:\n  config.json: eyJhdXRocyI6e319\n  username: YWRtaW4=\n"
        "kind: Secret\nmetadata:\n  name: registry\n  namespace: ci\ntype: Opaque\n"
    )
    out = redact(text)
    assert "eyJhdXRocyI6e319" not in out and "YWRtaW4=" not in out
    assert "  name: registry\n  namespace: ci\n" in out
    config_map = text.replace("kind: Secret", "kind: ConfigMap")
    assert redact(config_map) == config_map


@pytest.mark.parametrize("length", [40, 512, 850, 5000])
def test_a_token_of_any_length_is_redacted_whole(length: int) -> None:
    token = "ghp_" + _b(length)
    assert redact(f"GITHUB_TOKEN={token}\nnext line") == f"GITHUB_TOKEN={R}\nnext line"
    value = _b(length, "k7Q")
    assert redact(f'"api_token": "{value}"') == f'"api_token": "{R}"'
    assert redact(f"password={value}") == f"password={R}"


PLACEHOLDERS = [
    'api_key = os.environ["API_KEY"]',
    "api_key = os.environ['API_KEY']",
    "token = os.environ.get('TOKEN')",
    'password = os.getenv("DB_PASSWORD")',
    "SECRET_KEY = settings.SECRET_KEY",
    "token = get_token()",
    "password = make_password(raw)",
    "API_KEY=${API_KEY}",
    "password: ${DB_PASSWORD}",
    "password: {{ db_password }}",
    'token: "{{ .Values.token }}"',
    "token: ${{ secrets.GITHUB_TOKEN }}",
    'api_key = "<your-key>"',
    "api_key=<your-api-key>",
    "password=None",
    "password: null",
    '"token": null',
    'password=""',
    "password=",
    "password: ''",
    "password: ***",
    '"password": "********"',
    "api_key=your-api-key-here",
    "API_KEY=$API_KEY",
    "PASSWORD=$(cat /run/secrets/db)",
    "TOKEN=%TOKEN%",
    "Authorization: Bearer $TOKEN",
    "Authorization: Bearer ${TOKEN}",
    "Authorization: Bearer <token>",
    '"Authorization": f"Bearer {token}"',
    "postgres://app:${PGPASSWORD}@db/app",
    "AWS_ACCESS_KEY_ID=AKIAXXXXXXXXXXXXXXXX",
    "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "OPENAI_API_KEY=sk-...",
]


@pytest.mark.parametrize("text", PLACEHOLDERS)
def test_placeholders_and_references_stay(text: str) -> None:
    assert redact(text) == text


LOOKALIKES = [
    "commit " + HEX40,
    "sha256:" + HEX40 + HEX40[:24],
    "image: ghcr.io/org/app@sha256:" + HEX40 + HEX40[:24],
    '"integrity": "sha512-' + _b(86) + '=="',
    '{"id": "3f2a9c1d-8e7b-4a5f-9e3d-2c1b0a9f8e7d"}',
    "max_tokens=4096",
    '"usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}',
    "tokenizer = AutoTokenizer.from_pretrained(name)",
    "def check_password(self, raw_password: str) -> bool:",
    "password = models.CharField(max_length=128)",
    "self.token = token",
    "Rotate the token before it expires; never commit a password.",
    "The password: must be at least 12 characters.",
    "https://github.com/org/repo/pull/7",
    "git clone git@github.com:org/repo.git",
    "redis://localhost:6379/0",
    'File "/app/auth.py", line 3, in refresh_token',
    "FAILED tests/test_auth.py::test_token_refresh - assert 401 == 200",
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-AbCdEf",
    "docker run -u 1000:1000 app",
]


@pytest.mark.parametrize("text", LOOKALIKES)
def test_lookalikes_stay(text: str) -> None:
    assert redact(text) == text


# --- providers and structures -----------------------------------------------------------

PROVIDER_TOKENS = [
    "AKIA" + "ABCDEFGHIJKLMNQP",
    "ASIA" + "QRSTUVWXYZ234567",
    "ghu_" + _b(36),
    "ghs_" + _b(36),
    "ghr_" + _b(36),
    "github_pat_" + _b(22) + "_" + _b(59, "k7Q"),
    "glpat-" + _b(20),
    "gldt-" + _b(20),
    "xapp-1-A0123456789-1234567890123-" + HEX40,
    "sk-proj-" + _b(120),
    "sk-svcacct-" + _b(100),
    "sk-admin-" + _b(100),
    "sk-ant-api03-" + _b(93) + "AA",
    "AIza" + _b(35),
    "sk_live_" + _b(24),
    "sk_test_" + _b(24),
    "rk_live_" + _b(24),
    "rk_test_" + _b(24),
    "SG." + _b(22) + "." + _b(43),
    "SK" + HEX40[:32],
    "npm_" + _b(36),
    "pypi-AgEIcHlwaS5vcmc" + _b(70),
    "hf_" + _b(34),
    "dop_v1_" + HEX40 + HEX40[:24],
    "shpat_" + HEX40[:32],
    "dp.pt." + _b(43),
    "hvs." + _b(90),
    "AGE-SECRET-KEY-1" + ("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2)[:58],
    "dapi" + HEX40[:32],
    "key-" + HEX40[:32],
    "1234567890:AA" + _b(33),
]


# Provider formats that well-known scanners cover.
PROVIDER_TOKENS += [
    "sgp_" + HEX40[:16] + "_" + HEX40,  # Sourcegraph
    "sgp_" + HEX40,
    "EAAC" + _b(160),  # Facebook
    "A3-QSWWYB-798JRY-LJVD4-23DC2-86TVM-H43EB",  # 1Password secret key
    "ops_eyJ" + _b(300),  # 1Password service account
    "HRKU-AA" + _b(58),  # Heroku
    "glsa_" + _b(32) + "_" + HEX40[:8],  # Grafana
    "ABSK" + _b(120),  # Amazon Bedrock
    "dckr_pat_" + _b(27),  # Docker Hub
    "ATATT3" + _b(186),  # Atlassian
    "ghp_" + _b(850),  # any length
]


def test_sidekiq_enterprise_credentials() -> None:
    text = "BUNDLE_ENTERPRISE__CONTRIBSYS__COM: cafe1234:deadbeef"
    assert redact(text) == "BUNDLE_ENTERPRISE__CONTRIBSYS__COM: " + R


@pytest.mark.parametrize("token", PROVIDER_TOKENS, ids=lambda t: t[:10])
def test_provider_tokens_in_prose(token: str) -> None:
    text = f"the deploy used {token} until yesterday"
    assert redact(text) == f"the deploy used {R} until yesterday"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgres://user:" + "pA55w0rd" + "@host/db", "postgres://user:" + R + "@host/db"),
        ("mysql://root:pA55w0rd@127.0.0.1:3306/x", "mysql://root:" + R + "@127.0.0.1:3306/x"),
        (
            "mongodb+srv://svc:pA55w0rd@c0.ab1.mongodb.net/db",
            "mongodb+srv://svc:" + R + "@c0.ab1.mongodb.net/db",
        ),
        ("redis://:pA55w0rd@cache:6379/0", "redis://:" + R + "@cache:6379/0"),
        ("amqp://guest:pA55w0rd@rabbit:5672/", "amqp://guest:" + R + "@rabbit:5672/"),
        (
            "https://bot:pA55w0rd@git.example.com/r.git",
            "https://bot:" + R + "@git.example.com/r.git",
        ),
        ("curl -u alice:pA55w0rd https://h", "curl -u alice:" + R + " https://h"),
        ("curl --user 'alice:pA55w0rd' https://h", "curl --user 'alice:" + R + "' https://h"),
        ("machine h login alice password pA55w0rd", "machine h login alice password " + R),
        ("GET /x?api_key=" + T32 + "&page=2", "GET /x?api_key=" + R + "&page=2"),
        ("GET /x?access_token=" + T32, "GET /x?access_token=" + R),
        ("https://h/f?sv=2022&sig=" + T32, "https://h/f?sv=2022&sig=" + R),
        (
            "https://hooks.slack.com/services/T0123ABCD/B0123ABCD/" + _b(24),
            "https://hooks.slack.com/services/" + R,
        ),
        (
            "https://discord.com/api/webhooks/123456789012345678/" + _b(68),
            "https://discord.com/api/webhooks/123456789012345678/" + R,
        ),
        (
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=" + _b(86) + "==;E=x",
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=" + R + ";E=x",
        ),
    ],
)
def test_structures(text: str, expected: str) -> None:
    assert redact(text) == expected


def _pem(label: str = "RSA PRIVATE KEY") -> tuple[str, list[str]]:
    body = [_b(64, s) for s in ("MII", "Qx7", "r2D")]
    return f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----", body


@pytest.mark.parametrize("label", ["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY"])
def test_pem_block(label: str) -> None:
    block, _body = _pem(label)
    out = redact(f"key file:\n{block}\ndone")
    assert out == f"key file:\n{R}\ndone"


def test_pem_inside_json_with_escaped_newlines() -> None:
    block, body = _pem("PRIVATE KEY")
    doc = json.dumps({"type": "service_account", "private_key": block + "\n", "x": 1})
    out = redact(doc)
    assert all(line not in out for line in body)
    assert json.loads(out)["x"] == 1  # still valid JSON
    assert '"private_key": "[REDACTED]' in out


def test_public_key_and_certificate_stay() -> None:
    text = "-----BEGIN CERTIFICATE-----\n" + _b(64) + "\n-----END CERTIFICATE-----"
    assert redact(text) == text


def test_jwt() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + _b(43)
    assert redact(f"cookie: session={jwt}; Path=/") == f"cookie: session={R}; Path=/"


def test_aws_secret_access_key() -> None:
    secret = _b(40).replace("Y", "/")
    text = f"aws_secret_access_key = {secret}\nregion = eu-west-1"
    assert redact(text) == f"aws_secret_access_key = {R}\nregion = eu-west-1"


def test_escaped_json_keeps_escapes() -> None:
    text = '"{\\"password\\": \\"hunter2\\"}"'
    assert redact(text) == '"{\\"password\\": \\"' + R + '\\"}"'


def test_several_secrets_and_surrounding_text_kept() -> None:
    text = (
        "DEBUG=true\nDATABASE_URL=postgres://app:pA55w0rd@db/app\n"
        f"GITHUB_TOKEN=ghp_{_b(36)}\nALLOWED_HOSTS=*\n"
    )
    assert redact(text) == (
        f"DEBUG=true\nDATABASE_URL=postgres://app:{R}@db/app\nGITHUB_TOKEN={R}\nALLOWED_HOSTS=*\n"
    )


# --- API --------------------------------------------------------------------------------


def test_api_basics() -> None:
    assert REDACTED == "[REDACTED]"
    assert redact("") == ""
    assert redact("nothing to see here") == "nothing to see here"


def test_redact_is_idempotent() -> None:
    text = f"token={T32} and ghp_{_b(36)} and postgres://u:pA55w0rd@h/d"
    once = redact(text)
    assert redact(once) == once


def test_find_secrets_spans() -> None:
    text = f"export GITHUB_TOKEN=ghp_{_b(36)}"
    [(name, start, end)] = find_secrets(text)
    assert text[start:end] == f"ghp_{_b(36)}"
    assert name == "github-token"  # the specific rule names the merged finding
    raw = {n for n, _s, _e in find_secrets(text, merge=False)}
    assert raw == {"github-token", "secret-assignment"}


def test_secret_kinds_names_labels_in_order_without_values() -> None:
    text = f"password=hunter22\nGITHUB_TOKEN=ghp_{_b(36)}\npassword: s3cret!\n"
    kinds = secret_kinds(text)
    assert kinds == ["password assignment", "GitHub token"]
    assert not any("hunter22" in k or "ghp_" in k for k in kinds)
    assert secret_kinds("nothing secret here") == []
    assert secret_kinds("") == []


def test_non_ascii_text_keeps_positions() -> None:
    # "İ".lower() is two characters: positions must still line up.
    text = "İİİ naïve café — token=" + T32 + " ✓"
    assert redact(text) == "İİİ naïve café — token=" + R + " ✓"


def test_rules_table_is_documentable() -> None:
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    assert names == [rule.id for rule in RULES]
