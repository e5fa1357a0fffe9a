"""Secrets on command lines and in prose: ``--password X``, ``mysql -pX``, ``curl -u
user:password``, ``setenv``/``ENV``/``git config`` commands, "the password is: X".

A flag or a command says what the next word is, so no key = value syntax is needed; each
rule knows the commands whose flag really takes a secret (``psql -p`` is a port).
"""

from __future__ import annotations

import re

from automemory.services.redactor.base import (
    Rule,
    fake,
    in_url_path,
    is_placeholder,
    line_before,
    looks_random,
    rx,
)
from automemory.services.redactor.rules.keyvalue import (
    _IDENT_RE,
    _is_name,
    _is_not_secret_key,
    _is_path_or_url,
)

_P = fake("b62", 32)


_FLAG_RE = rx(
    r"""(?<![\w-])--(?!no-)
    (?P<flag>(?:[a-z0-9]{1,20}[-_]){0,4}
        (?:password|passwd|pass|passphrase|token|secret|api-key|apikey|api_key|access-key
          |secret-key|client-secret|auth-token|access-token))
    (?:[ \t]{1,4}|=)
    (?:["'](?P<secret_q>[^"'\n]++)["']|(?P<secret>(?![-<>])[^\s"';|&<>]++))""",
    re.IGNORECASE,
)


_PROSE_WORDS = (" and", " or", " the", " with", " via", " use", " a", " your")


def _flag_ok(m: re.Match[str], value: str, text: str) -> bool:
    if _is_not_secret_key(m.group("flag")) or _is_name(value, setter=False) or value == "\\":
        return False  # --change-token X, --password smb-server-password
    if "_" in value and _IDENT_RE.fullmatch(value) and value.isupper():
        return False  # --access-token ACCESS_TOKEN
    if value.isalpha() and value.islower():
        rest = text[m.end() : m.end() + 40].lstrip(" \t")
        before = text[max(0, m.start() - 8) : m.start()].rstrip().lower()
        if len(value) <= 4 or rest[:1].isalpha() or before.endswith(_PROSE_WORDS):
            return False  # prose: "set it with --token or …", "the --password option"
    return not is_placeholder(value)


_SHORT_FLAG_RE = rx(
    r"""[ \t](?:-pass(?:in|out)?[ \t]{1,4}pass:|-(?P<flag>p|a)(?P<sp>[ \t]{1,4}|=)?)
    (?:["'](?P<secret_q>[^"'\n]++)["']|(?P<secret>(?!-)[^\s"';|&]++))"""
)
_LOGIN_COMMANDS = ("docker", "podman", "nerdctl", "helm", "oc ", "cf ")


def _short_flag_ok(m: re.Match[str], value: str, text: str) -> bool:
    """``-p`` is a password only after some commands: ``mysql -pX``, ``sshpass -p X``,
    ``docker login -p X``, ``redis-cli -a X``, ``openssl -passin pass:X``."""
    if value.startswith("-") or is_placeholder(value):
        return False
    flag = m.group("flag")
    if flag is None:
        return True  # openssl pass:X
    before = line_before(text, m.start(), 200)
    if flag == "a":
        return "redis-cli" in before
    if "mysql" in before or "mariadb" in before:
        return m.group("sp") is None  # mysql -p db_name prompts; -pSECRET is the password
    if before.rstrip().endswith("sshpass") or "mongo" in before:
        return True  # sshpass -p X ssh -p 2222 host: only the first -p is the password
    return "login" in before and any(cmd in before for cmd in _LOGIN_COMMANDS)


_CURL_USER_RE = rx(
    r"""[ \t](?:-u|--user)(?:[ \t]{1,4}|=)
    (?:"(?P<u_in_dq>[^\s:"]{0,128}+):(?P<secret_in_dq>[^"\n]{0,256}+)"
      |'(?P<u_in_sq>[^\s:']{0,128}+):(?P<secret_in_sq>[^'\n]{0,256}+)'
      |(?:"(?P<u_dq>[^\s:"]{1,128}+)"|'(?P<u_sq>[^\s:']{1,128}+)'|(?P<u>[^\s:'"]{1,128}+)):
        (?:"(?P<secret_dq>[^"\n]{1,256}+)"|'(?P<secret_sq>[^'\n]{1,256}+)'|(?P<secret>[^\s'"]++)))"""
)
_BRACKET_PLACEHOLDER_RE = re.compile(r"\[[A-Za-z_ -]{1,40}\]")


def _curl_context(text: str, start: int) -> bool:
    """``curl`` earlier on the line, or on lines joined to it by a trailing backslash."""
    before = line_before(text, start, 1000)
    lo = start - len(before)
    for _ in range(6):
        if "curl" in before or "CURL" in before:
            return True
        if lo < 2 or not text[max(0, lo - 3) : lo - 1].rstrip(" \t\r").endswith("\\"):
            return False
        before = line_before(text, lo - 1, 1000)
        lo -= len(before) + 1
    return False


def _curl_spans(m: re.Match[str], text: str, memo: dict[str, object]) -> list[tuple[int, int]]:
    """The password of ``curl -u user:password``; with an empty password (``-u KEY:``) the
    user part, which is then the API key (Stripe, Mailgun)."""
    user = next(g for g in ("u_in_dq", "u_in_sq", "u_dq", "u_sq", "u") if m.start(g) != -1)
    secret = next(g for g in m.re.groupindex if g.startswith("secret") and m.start(g) != -1)
    value, user_value = m.group(secret), m.group(user)
    if user_value.startswith(("<", "[", "$", "{{")) or not _curl_context(text, m.start()):
        return []  # <user:password>, [USER]:…, $1:$2, {{ .Values.user }}
    if not value:
        if len(user_value) < 8 or is_placeholder(user_value):
            return []
        return [m.span(user)]
    braced_random = value[:1] == "{" and value[-1:] == "}" and looks_random(value[1:-1])
    if (is_placeholder(value) and not braced_random) or _BRACKET_PLACEHOLDER_RE.fullmatch(value):
        return []  # $2, ${password}, {token}, [PASSWORD]; "{ZqL5kVrX1n8tA2}" is a value
    return [m.span(secret)]


# setenv KEY value (csh), set -gx KEY value (fish), ENV KEY value (Dockerfile),
# git config [--global] user.password value, npm/yarn/pip config set key value
_ENV_COMMAND_RE = rx(
    r"""(?:setenv|set[ \t]{1,4}-[A-Za-z]{1,4}|ENV|ARG
        |config(?:[ \t]{1,4}--?[a-z]{1,12}+){0,3}(?:[ \t]{1,4}set)?)[ \t]{1,4}
    (?P<key>[A-Za-z_/@][A-Za-z0-9_.:/@-]{0,120}+)[ \t]{1,4}
    (?:"(?P<secret_dq>[^"\n]*+)"|'(?P<secret_sq>[^'\n]*+)'|(?P<secret>[^\s"'`;&|]++))"""
)
_ENV_KEY_RE = re.compile(
    r"(?i).*(?:passw(?:or)?d|passphrase|pass|pwd|secret|token|credentials?|"
    r"(?:api|access|secret|private|client)_?key)(?:_[0-9]+)?"
)


def _env_command_ok(m: re.Match[str], value: str, text: str) -> bool:
    if not _ENV_KEY_RE.fullmatch(m.group("key")):
        return False
    return not is_placeholder(value) and not _is_path_or_url(value)


RULES: tuple[Rule, ...] = (
    Rule(
        "cli-flag",
        "password or token flag",
        "--password VALUE, --password=VALUE, --api-key, --token, --client-secret, ... flags",
        ("--",),
        _FLAG_RE,
        _flag_ok,
        (
            "mysql --user=app --password=«hunter22» app",
            "gh auth login --with-token --token «" + _P + "»",
            "vault login --client-secret '«s3cret!»'",
            "vault login --auth-token=«" + fake("hex", 36) + "»",
            "helm repo add r https://r --username u --password «pA55»",
        ),
        (
            "echo $CR_PAT | docker login ghcr.io -u USERNAME --password-stdin",
            "docker login --password $PASSWORD",
            "--password-file /run/secrets/pw",
            "app --bypass cache",
            "psql --no-password db",
            "gh auth login --with-token < token.txt",
            "Pass the token with --token or set GITHUB_TOKEN.",
            "# but --password suffers from the same problem",
            "can be provided via the --username and --password options",
            "aws secretsmanager get-secret-value --secret-id MyTestSecret",
            "aws waf update-ip-set --change-token 12cs345-67cd-890b-1cd2-c3a4567d89f1",
            "aws acm request-certificate --idempotency-token 91adc45q",
            "aws wafv2 delete-ip-set --lock-token 46851772-db6f-459d-9385-49428812e357",
            "aws cognito-idp delete-user --access-token ACCESS_TOKEN",
            "aws datasync update-location-smb --password smb-file-server-password",
        ),
    ),
    Rule(
        "cli-short-password",
        "password after -p",
        "-p/-a passwords of commands that take them: mysql -pSECRET (attached), sshpass -p, "
        "docker/podman/helm login -p, mongosh -p, redis-cli -a, openssl -passin pass:",
        (" -p", " -a", "\t-p"),
        _SHORT_FLAG_RE,
        _short_flag_ok,
        (
            "mysql -u root -p«hunter22» shop",
            "mysqldump -uroot -p«s3cret!» --all-databases",
            "sshpass -p «hunter22» ssh ci@host",
            "docker login -u ci -p «" + _P + "» registry.example.com",
            "redis-cli -h cache -a «s3cret» ping",
            "openssl rsa -in k.pem -passin pass:«hunter22»",
        ),
        (
            "mysql -u root -p shop",
            "docker run -p 8080:80 nginx",
            "mkdir -p build/dist",
            "ls -a ~/.ssh",
            "ssh -p 2222 host",
            "sshpass -p $SSHPASS ssh host",
            "sshpass -e ssh -p 2222 deploy@host",
        ),
    ),
    Rule(
        "curl-user",
        "curl user password",
        "curl -u user:password / --user user:password",
        (" -u", " --user", "\t-u", "\t--user"),
        _CURL_USER_RE,
        None,
        (
            "curl -u alice:«pA55w0rd» https://h",
            "curl --user 'alice:«pA55w0rd»' https://h",
            'curl -s -v --user "j.smith:«dB2yF6@qL9vZm1P#4J»" "https://api.h/me"',
            "curl --user kevin:'«pRf7vG2h1L8nQkW9»' -iX PATCH https://h",
            'curl -X POST --user "{acd3c08b-74e8}":"«{ZqL5kVrX1n8tA2}»" https://h',
            'curl -u ":«d2LkV78zLx!t»" https://localhost:9200',
            'curl https://api.stripe.com/v1/charges -u "«' + _P + '»:"',
            "curl -k -X POST https://h/rest \\\n  -H 'Accept: text/plain' \\\n"
            "  -u developer:«yqDVtkqPECriaLRi»",
            "curl --cacert ca.crt -u elastic:«P@ssw0rd$1» https://localhost:9200",
        ),
        (
            "curl -u $USER:$PASS https://example.com",
            "docker run -u 1000:1000 app",
            'curl -sL --user "$1:$2" "$3" > "$4"',
            "curl -u <user:password> https://test.com/endpoint",
            "curl --user neo4j:[PASSWORD] http://[IP]:7474/db/data/",
            'curl -u "${{ secrets.API_USER }}:${{ secrets.API_PASSWORD }}" https://h',
            'curl -u "{{ .Values.user }}:{{ .Values.password }}" https://h',
            'curl -u "${username}":"${password}" https://h',
            'curl -u "myusername" http://localhost:15130/api/check_user/',
            "ssh -u deploy:staging host",
            "echo ok \\\n  -u developer:yqDVtkqPECriaLRi",
        ),
        spans=_curl_spans,
    ),
    Rule(
        "env-command",
        "secret in an env command",
        "setenv KEY value (csh), set -gx KEY value (fish), ENV/ARG KEY value (Dockerfile), "
        "git config user.password value, npm/yarn/pip config set key value",
        ("setenv", "set -", "env ", "arg ", "config "),
        _ENV_COMMAND_RE,
        _env_command_ok,
        (
            "setenv DB_PASSWORD «hunter22»",
            "set -gx GITHUB_TOKEN «mytok3n»",
            "ENV API_TOKEN «" + _P + "»",
            "git config --global user.password «hunter22»",
            "npm config set //registry.npmjs.org/:_authToken «" + _P + "»",
        ),
        (
            "ENV DB_PASSWORD_FILE /run/secrets/db",
            "set -gx API_TOKEN $TOKEN",
            "setenv PATH /bin",
            "git config --global user.name Ada",
            "npm config set registry https://registry.npmjs.org/",
        ),
    ),
)


# --- Passwords stated in prose -----------------------------------------------------------------

_PROSE_PASSWORD_RE = rx(
    r"""(?:pass(?:word|wd|phrase)|pwd)(?:[ \t]{1,4}(?:is|was)|'s)
    (?P<colon>[ \t]{0,4}[:=])?[ \t]{1,4}["'`]?
    (?P<secret>[^\s"'`,;(\[<][^\s"'`,;]{0,255}?)(?=[.!?)\]]{0,4}(?:\s|$|["'`,;]))""",
    re.IGNORECASE,
)
_PROSE_NOT_SECRET_SUFFIXES = ("-hashed", "-encoded", "-encrypted", "-protected", "-based")


def _prose_password_ok(m: re.Match[str], value: str, text: str) -> bool:
    """A stated password: any real value after ``is:``, a token-shaped one after ``is``."""
    if is_placeholder(value):
        return False
    if m.group("colon"):
        return True
    low = value.lower()
    if "1password" in low or low.endswith(_PROSE_NOT_SECRET_SUFFIXES):
        return False  # the password manager, "sha256-hashed"
    return looks_random(value)


_PROSE_SECRET_RE = rx(
    r"""(?<![A-Za-z0-9_.-])(?:pass(?:word|wd|phrase)|pwd|secret(?:[ \t]key)?|token|api[ \t]key
        |access[ \t]key|credentials?)
    (?:[ \t]{1,4}(?:is|was|of|for[ \t]{1,4}[A-Za-z0-9_.-]{1,40}[ \t]{1,4}is))?
    [ \t]{1,4}["'`]?
    (?P<secret>[A-Za-z0-9!#%&*+^@~][^\s"'`,;]{9,255}?)(?=[.!?)\]]{0,4}(?:\s|$|["'`,;]))""",
    re.IGNORECASE,
)


def _prose_secret_ok(m: re.Match[str], value: str, text: str) -> bool:
    """A secret word followed by a value of a generated secret's shape, with or without a
    verb: "with secret wJalr…", "use the password hunter2hunter2", "the token is …"."""
    if is_placeholder(value) or "://" in value or in_url_path(text, *m.span("secret")):
        return False
    low = value.lower()
    if "1password" in low or low.endswith(_PROSE_NOT_SECRET_SUFFIXES):
        return False
    return looks_random(value.rstrip(".!?"))


PROSE_RULES: tuple[Rule, ...] = (
    Rule(
        "prose-password",
        "password stated in prose",
        "'the password is: X' (any real value after the colon), 'my password is X' when X "
        "has the shape of a generated secret (letters and digits, 8+ characters)",
        (
            "password is",
            "password was",
            "password's",
            "passwd is",
            "passwd was",
            "passphrase is",
            "passphrase was",
            "pwd is",
            "pwd was",
        ),
        _PROSE_PASSWORD_RE,
        _prose_password_ok,
        (
            "my password is: «hunter2»",
            "The password is «Hunter2Secret9».",
            "db password was «s3cr3tPassw0rd» before the rotation",
            "the passphrase is: «correct-horse-battery»",
            "Log in as admin (password is «Tr0ub4dor3xyz»)",
            "PASSWORD IS: «Q7r2K5m3»",
            "the old passphrase was «fU3GzJjC7RJvBP» before the rotation",
            "FYI the pwd was: «river42!MAP»",
        ),
        (
            "the password is required",
            "the password is too short",
            "the password is 8 characters long",
            "the password is stored in 1Password",
            "the password is sha256-hashed before storage",
            "the password is: ${DB_PASSWORD}",
            "the password is: <your-password>",
            "the password's hash is compared in constant time",
            "password is not set in CI",
            "the password was rotated yesterday",
        ),
    ),
    Rule(
        "prose-secret",
        "secret stated in prose",
        "a secret word (password, secret, token, API key, access key, credentials) followed "
        "by a value of a generated secret's shape (letters and digits, 10+ characters), "
        "with or without 'is': 'with secret X', 'use the password X', 'the token for prod is X'",
        (
            *("password ", "passwd ", "passphrase ", "pwd ", "secret ", "secret key "),
            *("token ", "api key ", "access key ", "credential ", "credentials "),
        ),
        _PROSE_SECRET_RE,
        _prose_secret_ok,
        (
            "The AWS key id works with secret «wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY» here",
            "use the password «hunter2hunter2» for staging",
            "the secret is «Zx9kQ2mW8vR4tY7uP1sL3nB6cV5xE0aG», rotate it",
            "the token for prod is «" + fake("b62", 32, 4) + "».",
            "Set the API key «" + fake("b62", 40, 5) + "» in the dashboard",
            "credentials «svc_deploy:" + fake("b62", 20, 6) + "» (do not share)",
        ),
        (
            "the token bucket refills every second",
            "use the password manager for staging",
            "the secret key rotation runs nightly",
            "the token endpoint /oauth2/token returns JSON",
            "the access key id is printed by aws configure",
            "credentials are read from ~/.aws/credentials",
            "the token is ${GITHUB_TOKEN}",
            "the api key is <your-api-key>",
            "the password is sha256-hashed before storage",
            "the secret lives in https://vault.example.com/v1/secret/data/app",
            "a token of 128 bits",
            "Token refresh happens in auth/session2fa.py",
        ),
    ),
)
