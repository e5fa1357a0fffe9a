"""Secrets recognised by the structure around them: PEM blocks, JWTs, URLs with a password,
HTTP headers, .netrc, SQL, query strings, connection strings and Kubernetes Secrets."""

from __future__ import annotations

import bisect
import re
from typing import cast

from automemory.services.redactor.base import (
    Rule,
    fake,
    is_placeholder,
    looks_random,
    not_placeholder,
    random_not_placeholder,
    rest_continues,
    rx,
    words,
)

_AUTH_SCHEMES = frozenset(
    words(
        "bearer basic token bot apikey api-key key digest negotiate ntlm sso-key jwt oauth "
        "otoken hmac sharedkey dsn"
    )
)


_SNAKE_RE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def _validate_auth(m: re.Match[str], value: str, text: str) -> bool:
    if is_placeholder(value) or text[m.start() - 1 : m.start()].isalpha():
        return False  # EndpointAuthorization: a name that ends in the word, not the header
    if m.group("scheme") is None:
        if text[m.end() : m.end() + 1] in ("(", ".") or _SNAKE_RE.fullmatch(value):
            return False  # a call or a variable: base64.decodebytes(x), v4auth_header
        return value.lower() not in _AUTH_SCHEMES and looks_random(value)
    # After a scheme any value counts ("Bearer abc"), except a word that starts prose.
    return not (value.isalpha() and value.islower() and rest_continues(text, m.end()))


def _validate_netrc(m: re.Match[str], value: str, text: str) -> bool:
    lo = max(0, m.start() - 300)  # entries may span lines: look back for machine/default
    near = any(text.find(w, lo, m.start()) != -1 for w in ("machine", "default"))
    return near and not is_placeholder(value)


def _sql_ok(m: re.Match[str], value: str, text: str) -> bool:
    """Only in a statement about a user or role: "a library identified by 'name'" is prose."""
    before = text[max(0, m.start() - 200) : m.start()].lower()
    return ("user" in before or "role" in before) and not is_placeholder(value)


def _aws_secret_ok(m: re.Match[str], value: str, text: str) -> bool:
    # a real-shaped value that merely ends in EXAMPLEKEY is a key (the docs' one included)
    return not is_placeholder(value)


# --- Kubernetes Secret manifests -----------------------------------------------------------

_K8S_WINDOW = 4000
_KIND_BEFORE_RE = re.compile(r"""kind["']?[ \t]*:[ \t]*["']?$""")
_YAML_ENTRY_RE = re.compile(r"[ \t]+[\"']?[A-Za-z0-9_.-]+[\"']?:[ \t]*(?P<v>[^\n]*)")
_JSON_ENTRY_RE = re.compile(r'"[A-Za-z0-9_.-]+"[ \t]*:[ \t]*"(?P<v>[^"\\\n]*)"')


def _positions(text: str, literal: str) -> list[int]:
    out, i = [], text.find(literal)
    while i != -1:
        out.append(i)
        i = text.find(literal, i + 1)
    return out


def _positions_of_secret_kind(text: str) -> list[int]:
    """Where ``kind: Secret`` (YAML) or ``"kind": "Secret"`` (JSON) is written."""
    return sorted(
        i
        for word in ("Secret", "secret")
        for i in _positions(text, word)
        if _KIND_BEFORE_RE.search(text, max(0, i - 16), i) and not text[i + 6 : i + 7].isalnum()
    )


def _secret_kind_near(text: str, start: int, memo: dict[str, object]) -> bool:
    """``kind: Secret`` in the same YAML document (no ``---`` between), near ``start``.

    The positions of every ``kind: Secret`` and ``---`` are found once per scan (kept in
    ``memo``), so many ``data:`` blocks cost a bisect each.
    """
    found = memo.get("k8s")
    if found is None:
        kinds = _positions_of_secret_kind(text)
        found = memo["k8s"] = (kinds, _positions(text, "\n---") if kinds else [])
    kinds, seps = cast(tuple[list[int], list[int]], found)
    j = bisect.bisect_right(seps, start)  # the document holding start: seps[j - 1] .. seps[j]
    lo = max(start - _K8S_WINDOW, seps[j - 1] if j else 0)
    hi = min(start + _K8S_WINDOW, seps[j] if j < len(seps) else len(text))
    i = bisect.bisect_left(kinds, lo)
    return i < len(kinds) and kinds[i] <= hi


def _k8s_spans(m: re.Match[str], text: str, memo: dict[str, object]) -> list[tuple[int, int]]:
    """The value of every entry of a Secret's data/stringData block."""
    if m.group("json") is not None:
        block, start = m.group("jblock"), m.start("jblock")
        if not block or not _secret_kind_near(text, m.start(), memo):
            return []
        spans = []
        for em in _JSON_ENTRY_RE.finditer(block):
            v = em.group("v")
            if v and not is_placeholder(v):
                spans.append((start + em.start("v"), start + em.end("v")))
        return spans
    block, start = m.group("block"), m.start("block")
    if not block or not _secret_kind_near(text, m.start(), memo):
        return []
    return _yaml_block_spans(block, start)


def _yaml_block_spans(block: str, start: int) -> list[tuple[int, int]]:
    """Values of the entries at the block's first indentation, block scalars included."""
    spans: list[tuple[int, int]] = []
    indent = -1
    in_scalar = False  # inside the lines of a `key: |` / `key: >` block scalar
    offset = 0
    for line in block.split("\n"):
        line_start = start + offset
        offset += len(line) + 1
        body = line.lstrip(" \t")
        lead = len(line) - len(body)
        if not body.strip() or body.startswith("#"):
            continue
        if in_scalar and lead > indent:
            spans.append((line_start + lead, line_start + len(line.rstrip())))
            continue
        in_scalar = False
        em = _YAML_ENTRY_RE.match(line)
        if em is None or (indent != -1 and lead != indent):
            break  # the block ends at a line that is not one of its entries
        indent = lead
        raw = em.group("v")
        v = raw.strip().strip("\"'")
        if v[:1] in ("|", ">") and len(v) <= 3:
            in_scalar = True
        elif v and not is_placeholder(v):
            vs = line_start + em.start("v") + raw.find(v)
            spans.append((vs, vs + len(v)))
    return spans


RULES: tuple[Rule, ...] = (
    Rule(
        "private-key",
        "private key",
        "PEM private-key block (RSA, EC, DSA, OPENSSH, PGP, PKCS#8, encrypted), also "
        "JSON-escaped with literal \\n; an unterminated block is redacted up to its end",
        ("-----begin",),
        rx(
            r"""(?P<secret>-----BEGIN[ A-Z0-9]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----
            (?:[A-Za-z0-9+/=\s\\:,.]|-(?!----)){16,}+
            (?:-----END[ A-Z0-9]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----)?)"""
        ),
        None,
        (
            "key:\n«-----BEGIN RSA PRIVATE KEY-----\n"
            + fake("b64", 64)
            + "\n"
            + fake("b64", 64, 1)
            + "\n-----END RSA PRIVATE KEY-----»\ndone",
        ),
        ("-----BEGIN CERTIFICATE-----\n" + fake("b64", 64) + "\n-----END CERTIFICATE-----",),
    ),
    Rule(
        "jwt",
        "JSON Web Token",
        "JSON Web Token (eyJ header . eyJ payload . signature), any length",
        ("eyj",),
        rx(
            r"""(?<![A-Za-z0-9_-])(?P<secret>eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+
            \.[A-Za-z0-9_-]*+)"""
        ),
        None,
        (
            "Set-Cookie: session=«eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
            + fake("b62", 43)
            + "»; Path=/",
        ),
        ("eyJ is how base64 JSON starts", "eyJhbGciOiJIUzI1NiJ9 alone is a header"),
        in_token_runs=True,
    ),
    Rule(
        "url-credentials",
        "password in a URL",
        "password in a URL's user-info: scheme://user:password@host (postgres, mysql, "
        "mongodb+srv, redis, amqp, https, ...)",
        ("://",),
        rx(
            r"""://(?P<user>[^\s:/?#@'"`<>]{0,128}+):
            (?P<secret>[^\s/@'"`<>]{1,}+(?:@[^\s/@'"`<>]{1,}+){0,3})@
            (?=[A-Za-z0-9\[])"""
        ),
        not_placeholder,
        (
            "DATABASE_URL=postgres://app:«pA55w0rd»@db/app",
            "redis://:«s3cret»@cache:6379/0",
            "https://x-access-token:«ghs_" + fake("b62", 36) + "»@github.com/o/r.git",
        ),
        (
            "postgres://user:${PGPASSWORD}@db:5432/app",
            "postgres://user:<password>@localhost/app",
            "git clone git@github.com:org/repo.git",
            "redis://localhost:6379/0",
        ),
    ),
    Rule(
        "authorization-header",
        "Authorization header",
        "Authorization / Proxy-Authorization header value (Bearer, Basic, token, ... of any "
        "length after a scheme; a raw value must look generated)",
        ("authorization",),
        rx(
            r"""authorization\\?["']?\]?[ \t]{0,5}[:=][ \t]{0,5}\\?["']?[ \t]{0,3}
            (?:(?P<scheme>bearer|basic|token|bot|apikey|api-key|key|sso-key|jwt|oauth|otoken)
            [ \t]{1,5})?
            (?P<secret>[A-Za-z0-9._~+/=:-]++)""",
            re.IGNORECASE,
        ),
        _validate_auth,
        (
            "Authorization: Bearer «abc»",
            "Authorization: token «abc123»",
            'curl -H "Authorization: Basic «dXNlcjpwYXNzd29yZA==»" https://h',
            '{"Authorization": "Bearer «' + fake("b62", 40) + '»"}',
        ),
        (
            "Authorization: Bearer $TOKEN",
            "Authorization: Bearer <token>",
            '"Authorization": f"Bearer {token}"',
            'headers["Authorization"] = "Bearer " + token',
            "Authorization: required for all write endpoints.",
            "Authorization: Bearer token",
            "headers = {'x-amz-date': timestamp, 'Authorization': v4auth_header}",
            "authorization = base64.decodebytes(authorization)",
            '"AWS::Redshift::EndpointAuthorization": "e72be424d109da1d",',
        ),
    ),
    Rule(
        "bearer-token",
        "bearer token",
        "Bearer <token> outside an Authorization header (16+ generated-looking characters)",
        ("bearer",),
        rx(r"bearer[ \t]{1,5}(?P<secret>[A-Za-z0-9._~+/-]{16,}+=*)", re.IGNORECASE),
        random_not_placeholder,
        ("Then send it as Bearer «" + fake("b62", 40) + "» to the endpoint.",),
        ("Use a Bearer token in the Authorization header.", "bearer_token_expiry_seconds"),
    ),
    Rule(
        "netrc",
        ".netrc password",
        ".netrc entries: login NAME password SECRET",
        ("login",),
        rx(r"""login[ \t]{1,10}[^\s]{1,256}+\s{1,20}+password[ \t]{1,10}(?P<secret>[^\s]++)"""),
        _validate_netrc,
        (
            "machine api.example.com login alice password «pA55w0rd»",
            "machine git.example.com\n  login bot\n  password «s3cr3t!»\n",
        ),
        ("machine learning login flow with password reset",),
    ),
    Rule(
        "sql-password",
        "SQL password",
        "SQL: IDENTIFIED BY 'x', WITH PASSWORD 'x', PASSWORD 'x'",
        ("identified", "password"),
        rx(
            r"""(?:identified[ \t]{1,5}by|password)[ \t]{1,5}'(?P<secret>[^'\n]{1,}+)'""",
            re.IGNORECASE,
        ),
        _sql_ok,
        (
            "CREATE USER app IDENTIFIED BY '«s3cret-Pw»';",
            "ALTER ROLE app WITH PASSWORD '«hunter22»';",
        ),
        (
            "ALTER ROLE app WITH PASSWORD '';",
            "CREATE USER app IDENTIFIED BY '${PW}';",
            "Load a dynamic library identified by 'name'.",
        ),
    ),
    Rule(
        "query-secret",
        "secret in a URL query",
        "secrets in URL query strings: ?sig=, ?signature=, ?X-Amz-Signature=, ?key=",
        ("sig=", "signature=", "key=", "x-amz-signature=", "x-goog-signature=", "code_verifier="),
        rx(
            r"""(?<=[?&;])(?:sig|signature|x-amz-signature|x-goog-signature|key|code_verifier)
            =(?P<secret>[^\s&#"'<>]{8,}+)""",
            re.IGNORECASE,
        ),
        random_not_placeholder,
        ("https://h/f?sv=2022&sig=«" + fake("b62", 32) + "»",),
        ("https://example.com/search?q=token+rotation&key=name",),
    ),
    Rule(
        "azure-storage-key",
        "Azure connection string key",
        "Azure storage / Service Bus / Event Hub connection strings: AccountKey=, SharedAccessKey=",
        ("accountkey=", "sharedaccesskey="),
        rx(r"""(?:AccountKey|SharedAccessKey)=(?P<secret>[A-Za-z0-9+/]{20,}+={0,2})""", re.I),
        not_placeholder,
        (
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=«"
            + fake("b64", 86)
            + "==»;E=x",
        ),
        ("SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=<key>",),
        in_token_runs=True,
    ),
    Rule(
        "connection-string-password",
        "connection string password",
        "Password= / Pwd= inside a ;-separated connection string (ADO.NET, ODBC, JDBC "
        "SQL Server), the whole value up to the next ; even with spaces",
        ("password=", "pwd="),
        rx(
            r""";[ \t]?(?:password|pwd)[ \t]{0,2}=[ \t]{0,2}
            (?P<secret>[^;"'\n{}]{1,256}+)(?=;|"|'|$)""",
            re.I,
        ),
        not_placeholder,
        (
            "Server=db;Database=shop;User Id=sa;Password=«My Pass 12»;Encrypt=True",
            '"Default": "Driver={ODBC Driver 18};Server=db;Uid=app; Pwd=«s3cret pw»"',
        ),
        (
            "Server=db;Database=shop;Integrated Security=true;Password=;",
            "Server=db;User Id=sa;Password=${DB_PASSWORD};",
        ),
        backoff=2,
        backoff_chars="; \t",
    ),
    Rule(
        "aws-secret-key",
        "AWS secret access key",
        "AWS secret access key (40 base64 chars) next to an aws…secret keyword",
        ("aws",),
        rx(
            r"""aws[A-Za-z0-9_.-]{0,30}?(?:secret|sk)[A-Za-z0-9_.-]{0,30}+\\?["']?
            [ \t]{0,4}(?:=|:|=>)[ \t]{0,4}\\?["']?(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])""",
            re.IGNORECASE,
        ),
        _aws_secret_ok,
        (
            "aws_secret_access_key = «" + fake("b64", 40) + "»",
            "aws_secret_access_key=«wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY»",
            '"AwsSecretKey": "«' + fake("b64", 40, 3) + '»"',
        ),
        (
            "# aws_secret_access_key is read from the environment",
            "aws_secret_access_key = ${{ secrets.AWS_SECRET_ACCESS_KEY }}",
            "aws_secret_access_key=$AWS_SECRET_ACCESS_KEY",
        ),
    ),
    Rule(
        "kubernetes-secret",
        "Kubernetes Secret value",
        "every value under data: / stringData: of a Kubernetes Secret (YAML or JSON, as "
        "kubectl get secret -o yaml|json prints it), whatever the key is called",
        ("data:", 'data":'),
        rx(
            r"""(?:(?<![A-Za-z0-9_])|(?<=string))[dD]ata
            (?:(?P<yaml>:[ \t]*\r?\n
                (?P<block>(?:[ \t]++[^\n]*+\n?){1,2000}))
            |(?P<json>"[ \t]*:[ \t]*\{(?P<jblock>[^{}]{0,20000}+)\}))""",
        ),
        None,
        (
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\ndata:\n"
            "  config.json: «" + fake("b64", 60) + "=»\n  db-url: «" + fake("b64", 40, 1) + "»\n",
            "apiVersion: v1\ndata:\n  tls.key: «"
            + fake("b64", 64)
            + "»\nkind: Secret\nmetadata:\n  name: tls\n",
            "apiVersion: v1\ndata:\n  .dockercfg: |\n    «"
            + fake("b64", 76)
            + "»\n    «"
            + fake("b64", 40, 3)
            + "»\n  other: «"
            + fake("b64", 16, 1)
            + "»\nkind: secret\n",
            '{"apiVersion": "v1", "kind": "Secret", "data": {"token": "«'
            + fake("b64", 32)
            + '»", "ca.crt": "«'
            + fake("b64", 48, 2)
            + '»"}}',
        ),
        (
            "apiVersion: v1\nkind: ExternalSecret\nspec:\n  data:\n    - secretKey: api-key\n"
            "      remoteRef:\n        key: my-secret\n",
            "apiVersion: v1\nkind: ConfigMap\ndata:\n  log_level: debug\n  region: eu-west-1\n",
            "kind: Secret\nstringData:\n  password: ${DB_PASSWORD}\n",
        ),
        spans=_k8s_spans,
    ),
)
