"""Secret redaction for everything auto memory stores or logs (SPEC section 6).

``redact(text)`` replaces credentials with ``[REDACTED]`` and keeps the text around
them, so ``API_KEY=sk-...`` becomes ``API_KEY=[REDACTED]``.

How it stays fast and safe on any input:

* Every rule has *anchors*: short lowercase literals (``"ghp_"``, ``"://"``,
  ``"token"``).  The text is lowercased once and each anchor is located with
  ``str.find`` (C speed).  A rule's regex is only ever *matched at* an anchor
  position (``pattern.match(text, pos)``), never searched across the text, so
  ordinary text costs one ``lower()`` plus a few ``find`` passes.
* Every quantifier is bounded and possessive (``{8,512}+``, Python 3.11+), and
  token rules start with a negative look-behind on their own alphabet, so an
  anchor inside a run that was already rejected fails on its first character.
  After a match, scanning for that rule resumes at the match end.  Together this
  keeps the work linear in the input size, whatever the input.
* Rules are a plain table (:data:`RULES`) so docs and tests can list them.

The ``key = value`` rule is deliberately conservative about *values*: references
and placeholders (``os.environ[...]``, ``settings.X``, calls, ``${VAR}``,
``{{ var }}``, ``<your-key>``, ``None``, ``null``, ``***``, empty) are kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["REDACTED", "RULES", "Rule", "find_secrets", "redact", "secret_kinds"]

REDACTED = "[REDACTED]"

# A secret value is one match group of the rule's regex: "secret" if the regex has
# it, else the whole match.
Validator = Callable[[re.Match[str], str], bool]


@dataclass(frozen=True)
class Rule:
    """One detection rule.

    ``anchors`` are lowercase literals; the regex is tried only where one occurs,
    and it must match starting exactly at that occurrence.
    """

    name: str
    description: str
    anchors: tuple[str, ...]
    pattern: re.Pattern[str]
    validate: Validator | None = None


# --------------------------------------------------------------------------------------
# Value classification helpers (placeholders, references, token shape)
# --------------------------------------------------------------------------------------


def _words(spec: str) -> list[str]:
    return spec.split()


_PLACEHOLDER_WORDS = frozenset(
    _words(
        """
    none null nil undefined true false yes no on off empty blank default unset
    redacted [redacted] <redacted> hidden masked removed omitted filtered
    secret secrets password passwd pwd pass passphrase token tokens key apikey api_key
    credential credentials auth changeme change_me change-me example sample dummy fake
    placeholder string str bytes int integer number bool boolean object dict list array
    any required optional todo tbd n/a na env environment value text field type
    bearer basic oauth oauth2 jwt self cls return
    """
    )
)

_PLACEHOLDER_FRAGMENTS = (
    "your",
    "placeholder",
    "example",
    "changeme",
    "change_me",
    "replace",
    "insert",
    "xxxx",
    "****",
    "...",
    "…",
    "<",
    ">",
    "{{",
    "}}",
    "${",
    "$(",
    "_here",
    "-here",
    " here",
    "redacted",
)

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")
_DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,100}(?:\.[A-Za-z_][A-Za-z0-9_]{0,100}){1,10}")
_WORD_PIECE_RE = re.compile(r"[A-Z]?[a-z]{1,100}|[A-Z]{1,100}(?![a-z])")


def _is_placeholder(value: str) -> bool:
    """True for references/placeholders that must be kept (``${X}``, ``<key>``, ``***``)."""
    v = value.strip()
    if not v:
        return True
    low = v.lower()
    if low in _PLACEHOLDER_WORDS:
        return True
    if v[0] in "$%{<[!&*":
        return True
    if not v.strip("*xX.-_#?•…~ "):
        return True
    return any(frag in low for frag in _PLACEHOLDER_FRAGMENTS)


def _looks_random(value: str) -> bool:
    """True if a value has the shape of a generated token rather than a word or name."""
    if len(value) < 8 or " " in value:
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if has_digit:
        return has_alpha or len(value) >= 16
    if not has_alpha:
        return False
    # Letters only (maybe with separators): words and CamelCase split into long pieces,
    # random base62/base64 into short ones.
    if value.islower() or value.isupper():
        return len(value) >= 32 and not any(c in "-_. " for c in value)
    pieces = _WORD_PIECE_RE.findall(value)
    letters = sum(len(p) for p in pieces)
    return bool(pieces) and letters / len(pieces) < 3.0


def _is_path_or_url(value: str) -> bool:
    return value.startswith(("/", "~/", "./", "../", "http://", "https://", "file:"))


def _key_name(text: str, core_start: int) -> str:
    """The identifier that ends with the keyword starting at ``core_start``."""
    i = core_start
    lo = max(0, core_start - 64)
    while i > lo and (text[i - 1].isalnum() or text[i - 1] in "_.-"):
        i -= 1
    return text[i:core_start]


def _rest_continues(text: str, end: int) -> bool:
    """True if more than a comment follows the value on its line (prose or an expression)."""
    i = end
    n = min(len(text), end + 64)
    while i < n and text[i] in " \t":
        i += 1
    return i < len(text) and text[i] not in "\r\n#"


# --------------------------------------------------------------------------------------
# Rule 1: key = value (the SPEC minimum)
# --------------------------------------------------------------------------------------

# Words that, written before "key" (api_key, secretKey, x-api-key), make it a secret key.
_KEY_PREFIXES = tuple(
    _words(
        """
    api access secret private signing encryption encrypt master auth account app consumer
    subscription service session shared storage client admin license deploy webhook
    ingest ingestion write read management personal sas hmac jwt aes crypt cipher token
    """
    )
)
_PASSWORD_CORES = frozenset({"password", "passwd", "passphrase", "pass", "pwd", "pw"})
_SHORT_CORES = frozenset({"pass", "pwd", "pw", "auth"})

_KV_RE = re.compile(
    r"""
    (?P<core>passw(?:or)?d|passphrase|pass|pwd|pw|secret|token|credentials?|auth|key)
    (?P<tail>
        (?:[_.-]?(?:access|api|private|secret|auth|signing))?
        (?:[_.-]?(?:key|value|token|string|b64|base64|base|phrase|hash))?
        (?:[_.-]?[0-9]{1,3})?
    )
    \\?["'`]?\]?                               # end of a quoted key / subscript
    [ \t]{0,4}(?P<sep>:=|=>|=(?![=~])|:(?![:/\\]))[ \t]{0,4}
    (?:[rRbBfFuU]{1,2}(?=["']))?               # python string prefix
    (?:
        \\?"(?P<dq>(?:[^"\\\n]|\\[^"\n]){0,1024}+)\\?"
      | '(?P<sq>[^'\n]{0,1024}+)'
      | `(?P<bq>[^`\n]{0,1024}+)`
      | (?P<uq>[^\s"'`,;&)}\]<>]{1,512}+)
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)


def _kv_left_ok(text: str, lower: str, pos: int, core: str) -> bool:
    """Left context of a keyword: ``api_key`` yes, ``monkey``/``bypass`` no."""
    if core == "key":
        j = pos
        if j and lower[j - 1] in "_.-":
            j -= 1
        return lower.endswith(_KEY_PREFIXES, max(0, j - 16), j)
    if core in _SHORT_CORES:
        if pos == 0:
            return True
        prev = text[pos - 1]
        if not prev.isalnum():
            return True
        # camelCase: dbPass, userPwd
        return prev.islower() and text[pos].isupper()
    return True


def _validate_kv(m: re.Match[str], text: str) -> bool:
    core = m.group("core").lower()
    if core.startswith("passw"):
        core = "password"
    lower_key = _key_name(text, m.start()) + m.group(0)[: m.end("tail") - m.start()]
    value = m.group("secret")
    quoted = m.group("uq") is None
    if _is_placeholder(value):
        return False
    v = value.strip()
    low = v.lower()
    if _is_path_or_url(v):
        return False
    is_password = core in _PASSWORD_CORES
    if not quoted:
        sep_end = m.end("sep")
        # arn:aws:...:secret:name is not a YAML/JSON mapping (no space, unquoted key)
        if (
            m.group("sep") == ":"
            and text[sep_end : sep_end + 1] not in (" ", "\t")
            and text[m.start("sep") - 1 : m.start("sep")] not in ('"', "'")
        ):
            return False
        if "(" in v or "[" in v:
            return False  # call or subscript: os.getenv(...), os.environ[...]
        if _DOTTED_RE.fullmatch(v) and not any(c.isdigit() for c in v.split(".")[0]):
            return False  # attribute chain: settings.SECRET_KEY, self.token
        key_low = lower_key.lower()
        if low == key_low or key_low.endswith(low) or low.endswith(core):
            return False  # password = password, token=self_token ...
    if not is_password:
        return _looks_random(v)
    # Password-like keys: any literal counts, but not words that are code or prose.
    if quoted:
        # "Password must be at least 8 characters" is a label, not a password.
        return not (v[:1].isupper() and v.count(" ") >= 3)
    if len(v) < 3:
        return False
    if _IDENT_RE.fullmatch(v) and not any(c.isdigit() for c in v):
        if "_" in v and (v.islower() or v.isupper()):
            return False  # raw_password, DEFAULT_PASSWORD
        if v[0].isupper() and any(c.isupper() for c in v[1:]) and v != v.upper():
            return False  # SecretStr, CharField
        if _rest_continues(text, m.end()):
            return False  # "Password: must be 8 characters", "x_pass = await f()"
    return True


# --------------------------------------------------------------------------------------
# Structural rules
# --------------------------------------------------------------------------------------

_TOKEN_END = r"(?![A-Za-z0-9_-])"


def _not_placeholder_token(m: re.Match[str], text: str) -> bool:
    """Provider tokens: reject docs placeholders (``ghp_xxxx...``, ``AKIA...EXAMPLE``)."""
    v = m.group("secret")
    low = v.lower()
    if "example" in low or "xxxx" in low or "****" in low or "..." in low or "your" in low:
        return False
    return len(set(v)) >= 6


def _validate_auth(m: re.Match[str], text: str) -> bool:
    v = m.group("secret")
    if _is_placeholder(v):
        return False
    if m.group("scheme") is None and v.lower() in _AUTH_SCHEMES:
        return False
    return _looks_random(v)


def _validate_url(m: re.Match[str], text: str) -> bool:
    pw = m.group("secret")
    return not _is_placeholder(pw)


def _near_before(text: str, start: int, words: tuple[str, ...], span: int) -> bool:
    """True if one of ``words`` occurs on the same line within ``span`` chars before ``start``."""
    lo = max(0, start - span)
    lo = max(lo, text.rfind("\n", lo, start) + 1)
    return any(text.find(w, lo, start) != -1 for w in words)


def _validate_curl(m: re.Match[str], text: str) -> bool:
    return _near_before(text, m.start(), ("curl", "CURL"), 1000) and not _is_placeholder(
        m.group("secret")
    )


def _validate_netrc(m: re.Match[str], text: str) -> bool:
    # .netrc entries may span lines: look back a few lines for the machine/default token.
    lo = max(0, m.start() - 300)
    near = any(text.find(w, lo, m.start()) != -1 for w in ("machine", "default"))
    return near and not _is_placeholder(m.group("secret"))


def _validate_generic(m: re.Match[str], text: str) -> bool:
    return not _is_placeholder(m.group("secret"))


def _validate_random(m: re.Match[str], text: str) -> bool:
    v = m.group("secret")
    return not _is_placeholder(v) and _looks_random(v)


_AUTH_SCHEMES = frozenset(
    _words(
        "bearer basic token bot apikey api-key key digest negotiate ntlm sso-key jwt oauth "
        "otoken hmac sharedkey dsn"
    )
)


def _r(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags | re.VERBOSE)


def _token(name: str, description: str, anchors: tuple[str, ...], body: str) -> Rule:
    """A provider token: ``body`` must start with the (case-sensitive) prefix."""
    pattern = _r(rf"(?<![A-Za-z0-9_-])(?P<secret>{body}){_TOKEN_END}")
    return Rule(name, description, anchors, pattern, _not_placeholder_token)


_B62 = "A-Za-z0-9"
_B64URL = "A-Za-z0-9_-"

RULES: tuple[Rule, ...] = (
    Rule(
        "private-key",
        "PEM private-key block (RSA, EC, DSA, OPENSSH, PGP, PKCS#8, encrypted), also "
        "JSON-escaped with literal \\n; an unterminated block is redacted up to its end",
        ("-----begin",),
        _r(
            r"""(?P<secret>-----BEGIN[ A-Z0-9]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----
            (?:[A-Za-z0-9+/=\s\\:,.]|-(?!----)){16,16384}+
            (?:-----END[ A-Z0-9]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----)?)"""
        ),
    ),
    Rule(
        "jwt",
        "JSON Web Token (eyJ header . eyJ payload . signature)",
        ("eyj",),
        _r(
            r"""(?<![A-Za-z0-9_-])(?P<secret>eyJ[A-Za-z0-9_-]{8,4096}+\.eyJ[A-Za-z0-9_-]{8,8192}+
            \.[A-Za-z0-9_-]{0,4096}+)"""
        ),
    ),
    Rule(
        "url-credentials",
        "password in a URL's user-info: scheme://user:password@host (postgres, mysql, "
        "mongodb+srv, redis, amqp, https, ...)",
        ("://",),
        _r(
            r"""://(?P<user>[^\s:/?#@'"`<>]{0,128}+):
            (?P<secret>[^\s/@'"`<>]{1,256}+(?:@[^\s/@'"`<>]{1,128}+){0,3})@
            (?=[A-Za-z0-9\[])"""
        ),
        _validate_url,
    ),
    Rule(
        "authorization-header",
        "Authorization / Proxy-Authorization header value (Bearer, Basic, token, ... or raw)",
        ("authorization",),
        _r(
            r"""authorization\\?["']?\]?[ \t]{0,5}[:=][ \t]{0,5}\\?["']?[ \t]{0,3}
            (?:(?P<scheme>bearer|basic|token|bot|apikey|api-key|key|sso-key|jwt|oauth|otoken)
            [ \t]{1,5})?
            (?P<secret>[A-Za-z0-9._~+/=:-]{6,4096}+)""",
            re.IGNORECASE,
        ),
        _validate_auth,
    ),
    Rule(
        "bearer-token",
        "Bearer <token> outside an Authorization header",
        ("bearer",),
        _r(r"bearer[ \t]{1,5}(?P<secret>[A-Za-z0-9._~+/-]{16,4096}+=*)", re.IGNORECASE),
        _validate_random,
    ),
    Rule(
        "key-value",
        'key = value, key: value, "key": "value", key = \'value\' (also headers such as '
        "X-Api-Key: value and query strings) where the key names an API key, password "
        "(passwd, pwd, pass, passphrase), secret, token, credential(s) or auth",
        ("key", "pass", "pw", "secret", "token", "credential", "auth"),
        _KV_RE,
        _validate_kv,
    ),
    Rule(
        "cli-flag",
        "--password VALUE / --token VALUE command-line flags",
        ("--",),
        _r(
            r"""(?<![\w-])--(?=[a-z])
            (?P<flag>[a-z-]{0,30}?(?:password|passwd|pass|token|secret|api-key|apikey))
            [ \t]{1,4}(?:["'](?P<q>[^"'\n]{1,256}+)["']|(?P<u>[^\s"']{3,256}+))""",
            re.IGNORECASE,
        ),
        None,
    ),
    Rule(
        "curl-user",
        "curl -u user:password / --user user:password",
        (" -u", " --user"),
        _r(
            r"""[ \t](?:-u|--user)(?:[ \t]{1,4}|=)["']?[^\s:'"]{1,128}+:
            (?P<secret>[^\s'"]{1,256}+)"""
        ),
        _validate_curl,
    ),
    Rule(
        "netrc",
        ".netrc entries: login NAME password SECRET",
        ("login",),
        _r(
            r"""login[ \t]{1,10}[^\s]{1,256}+\s{1,20}+password[ \t]{1,10}
            (?P<secret>[^\s]{1,256}+)"""
        ),
        _validate_netrc,
    ),
    Rule(
        "sql-password",
        "SQL: IDENTIFIED BY 'x', WITH PASSWORD 'x'",
        ("identified", "password"),
        _r(
            r"""(?:identified[ \t]{1,5}by|password)[ \t]{1,5}'(?P<secret>[^'\n]{1,256}+)'""",
            re.IGNORECASE,
        ),
        _validate_generic,
    ),
    Rule(
        "query-secret",
        "secrets in URL query strings: ?sig=, ?signature=, ?X-Amz-Signature=, ?key=",
        ("sig=", "signature=", "key=", "x-amz-signature=", "x-goog-signature=", "code_verifier="),
        _r(
            r"""(?<=[?&;])(?:sig|signature|x-amz-signature|x-goog-signature|key|code_verifier)
            =(?P<secret>[^\s&#"'<>]{8,1024}+)""",
            re.IGNORECASE,
        ),
        _validate_random,
    ),
    Rule(
        "azure-storage-key",
        "Azure storage / Service Bus connection strings: AccountKey=, SharedAccessKey=",
        ("accountkey=", "sharedaccesskey="),
        _r(
            r"""(?:AccountKey|SharedAccessKey)=(?P<secret>[A-Za-z0-9+/]{20,200}+={0,2})""",
            re.IGNORECASE,
        ),
        _validate_generic,
    ),
    Rule(
        "aws-secret-key",
        "AWS secret access key (40 base64 chars) next to an aws/secret keyword",
        ("aws",),
        _r(
            r"""aws[A-Za-z0-9_.-]{0,30}?(?:secret|sk)[A-Za-z0-9_.-]{0,30}+\\?["']?
            [ \t]{0,4}(?:=|:|=>)[ \t]{0,4}\\?["']?(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])""",
            re.IGNORECASE,
        ),
        _not_placeholder_token,
    ),
    _token(
        "aws-access-key-id",
        "AWS access key id (AKIA, ASIA, ABIA, ACCA, A3T...)",
        ("akia", "asia", "abia", "acca", "a3t"),
        r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}",
    ),
    _token(
        "github-token",
        "GitHub tokens: ghp_ (classic PAT), gho_ (OAuth), ghu_ (user-to-server), "
        "ghs_ (server-to-server), ghr_ (refresh)",
        ("gh",),
        rf"gh[pousr]_[{_B62}]{{36,255}}+",
    ),
    _token(
        "github-fine-grained-pat",
        "GitHub fine-grained personal access token github_pat_",
        ("github_pat_",),
        r"github_pat_[A-Za-z0-9_]{40,255}+",
    ),
    _token(
        "gitlab-token",
        "GitLab tokens: glpat- (personal), gldt- (deploy), glrt- (runner), glptt- "
        "(trigger), glft- (feed), glsoat-, glcbt-, glffct-, glimt-, glagent-, gloas-, "
        "GR1348941 runner registration",
        ("gl", "gr1348941"),
        r"""(?:(?:glpat|gldt|glrt|glptt|glft|glsoat|glcbt|glffct|glimt|glagent|gloas)-
        [A-Za-z0-9_.-]{20,255}+|GR1348941[A-Za-z0-9_-]{20,64}+)""",
    ),
    _token(
        "slack-token",
        "Slack tokens: xoxb-, xoxp-, xoxa-, xoxr-, xoxs-, xoxe-, xoxe.xoxp-, xapp-",
        ("xox", "xapp-"),
        r"(?:xox[a-z]|xoxe\.xox[a-z]|xapp)-[A-Za-z0-9-]{10,512}+",
    ),
    Rule(
        "slack-webhook",
        "Slack incoming webhook / workflow URL",
        ("hooks.slack.com/",),
        _r(
            r"""hooks\.slack\.com/(?:services|workflows|triggers)/
            (?P<secret>[A-Za-z0-9+/_-]{20,200}+)"""
        ),
        _not_placeholder_token,
    ),
    Rule(
        "discord-webhook",
        "Discord webhook URL",
        ("/api/webhooks/",),
        _r(r"/api/webhooks/[0-9]{17,20}/(?P<secret>[A-Za-z0-9_-]{60,80}+)"),
        _not_placeholder_token,
    ),
    _token(
        "anthropic-key",
        "Anthropic API / admin keys sk-ant-",
        ("sk-",),
        r"sk-ant-[A-Za-z0-9_-]{32,255}+",
    ),
    _token(
        "openai-key",
        "OpenAI and generic sk- keys: sk-, sk-proj-, sk-svcacct-, sk-admin-",
        ("sk-",),
        r"sk-[A-Za-z0-9_-]{20,255}+",
    ),
    _token(
        "google-api-key",
        "Google API key AIza..., OAuth client secret GOCSPX-, OAuth access token ya29.",
        ("aiza", "gocspx-", "ya29."),
        r"(?:AIza[A-Za-z0-9_-]{35}|GOCSPX-[A-Za-z0-9_-]{28}|ya29\.[A-Za-z0-9_-]{20,1024}+)",
    ),
    _token(
        "stripe-key",
        "Stripe secret and restricted keys sk_live_, sk_test_, rk_live_, rk_test_, "
        "webhook secret whsec_",
        ("sk_", "rk_", "whsec_"),
        r"(?:[sr]k_(?:live|test)_[A-Za-z0-9]{16,255}+|whsec_[A-Za-z0-9]{24,255}+)",
    ),
    _token(
        "sendgrid-key",
        "SendGrid API key SG.xxx.yyy",
        ("sg.",),
        r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,64}",
    ),
    _token(
        "twilio-key",
        "Twilio API key SID SK + 32 hex",
        ("sk",),
        r"SK[0-9a-fA-F]{32}",
    ),
    _token("npm-token", "npm access token npm_", ("npm_",), r"npm_[A-Za-z0-9]{36}"),
    _token(
        "pypi-token",
        "PyPI / TestPyPI upload token pypi-AgE...",
        ("pypi-age",),
        r"pypi-AgE[A-Za-z0-9_-]{50,1024}+",
    ),
    _token(
        "huggingface-token",
        "Hugging Face user and org tokens hf_, api_org_",
        ("hf_", "api_org_"),
        r"(?:hf_|api_org_)[A-Za-z0-9]{30,64}",
    ),
    _token(
        "digitalocean-token",
        "DigitalOcean tokens dop_v1_, doo_v1_, dor_v1_",
        ("dop_", "doo_", "dor_"),
        r"do[por]_v1_[a-f0-9]{64}",
    ),
    _token(
        "shopify-token",
        "Shopify tokens shpat_, shpca_, shppa_, shpss_",
        ("shp",),
        r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",
    ),
    _token(
        "doppler-token",
        "Doppler tokens dp.pt., dp.st., dp.sa., dp.ct., dp.scim., dp.audit.",
        ("dp.",),
        r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9._-]{40,255}+",
    ),
    _token(
        "vault-token",
        "HashiCorp Vault tokens hvs., hvb., hvr.; Terraform Cloud .atlasv1.",
        ("hv", ".atlasv1."),
        r"(?:hv[sbr]\.[A-Za-z0-9_-]{24,512}+|[a-zA-Z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,120}+)",
    ),
    _token(
        "age-secret-key",
        "age encryption secret key AGE-SECRET-KEY-1...",
        ("age-secret-key-1",),
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
    ),
    _token(
        "databricks-token",
        "Databricks personal access token dapi + 32 hex",
        ("dapi",),
        r"dapi[a-f0-9]{32}(?:-[0-9])?",
    ),
    _token("mailgun-key", "Mailgun private API key key-", ("key-",), r"key-[0-9a-f]{32}"),
    _token(
        "telegram-bot-token",
        "Telegram bot token <bot id>:AA<33 chars> (found at :AA, then backs up over the id)",
        (":aa",),
        r"[0-9]{8,10}:AA[A-Za-z0-9_-]{33}",
    ),
    _token(
        "misc-provider-token",
        "other prefixed tokens: Linear lin_api_, Notion ntn_, Figma figd_, Grafana glc_/"
        "glsa_, Sentry sntrys_/sntryu_, New Relic NRAK-, Postman PMAK-, Supabase sbp_, "
        "Pulumi pul-, Groq gsk_, Perplexity pplx-, xAI xai-, Tailscale tskey-, Replicate r8_",
        (
            "lin_",
            "ntn_",
            "figd_",
            "gl",
            "sntry",
            "nrak-",
            "pmak-",
            "sbp_",
            "pul-",
            "gsk_",
            "pplx-",
            "xai-",
            "tskey-",
            "r8_",
        ),
        r"""(?:lin_api_[A-Za-z0-9]{40}|ntn_[A-Za-z0-9]{40,50}|figd_[A-Za-z0-9_-]{40,50}
        |glc_[A-Za-z0-9+/=]{32,400}+|glsa_[A-Za-z0-9_]{32,64}|sntry[su]_[A-Za-z0-9+/=_-]{32,400}+
        |NRAK-[A-Z0-9]{27}|PMAK-[a-f0-9]{24}-[a-f0-9]{34}|sbp_[a-f0-9]{40}|pul-[a-f0-9]{40}
        |gsk_[A-Za-z0-9]{48,60}|pplx-[A-Za-z0-9]{40,60}|xai-[A-Za-z0-9]{60,90}
        |tskey-[a-z]{3,8}-[A-Za-z0-9]{8,20}-[A-Za-z0-9]{16,40}|r8_[A-Za-z0-9]{37})""",
    ),
)

# Rules whose anchor sits inside the match: how far (at most) the match starts before it.
_ANCHOR_BACKOFF: dict[str, int] = {"telegram-bot-token": 10}


def _span_of(m: re.Match[str]) -> tuple[int, int]:
    for group in ("secret", "dq", "sq", "bq", "uq", "q", "u"):
        if group in m.re.groupindex and m.group(group) is not None:
            return m.span(group)
    return m.span()


def _scan_rule(
    rule: Rule,
    text: str,
    lower: str,
    first: dict[str, int],
    out: list[tuple[str, int, int]],
) -> None:
    """Try ``rule`` at every occurrence of its anchors; append accepted spans to ``out``.

    ``first`` caches each anchor's first position, so anchors shared by several rules
    (``sk`` for OpenAI, Anthropic, Stripe and Twilio) cost one full ``find``.
    """
    pattern = rule.pattern
    back = _ANCHOR_BACKOFF.get(rule.name, 0)
    is_kv = rule.name == "key-value"
    for anchor in rule.anchors:
        pos = first.get(anchor)
        if pos is None:
            pos = first[anchor] = lower.find(anchor)
        resume = 0
        while pos != -1:
            if pos < resume:
                pos = lower.find(anchor, resume)
                continue
            m = None
            if back:
                # digits precede the anchor: find the start of the digit run (bounded).
                start = pos
                while start > pos - back and start > 0 and text[start - 1].isdigit():
                    start -= 1
                m = pattern.match(text, start)
            elif is_kv:
                m = pattern.match(text, pos)
                if m is not None and not _kv_left_ok(text, lower, pos, m.group("core").lower()):
                    m = None
            else:
                m = pattern.match(text, pos)
            if m is None:
                pos = lower.find(anchor, pos + 1)
                continue
            span = _span_of(m)
            if rule.name == "private-key":  # keep the newline after a truncated block
                span = (span[0], span[0] + len(text[span[0] : span[1]].rstrip()))
            if span[1] > span[0] and _accept(rule, m, text, span):
                out.append((rule.name, span[0], span[1]))
            resume = max(m.end(), pos + 1)
            pos = lower.find(anchor, resume)


def _accept(rule: Rule, m: re.Match[str], text: str, span: tuple[int, int]) -> bool:
    if rule.validate is None:
        return not _is_placeholder(text[span[0] : span[1]])
    if rule.validate is _validate_kv:
        return _validate_kv(_GroupView(m, span, text), text)
    return rule.validate(m, text)


class _GroupView:
    """A match proxy whose ``secret`` group is the span chosen by :func:`_span_of`."""

    __slots__ = ("_m", "_span", "_text")

    def __init__(self, m: re.Match[str], span: tuple[int, int], text: str) -> None:
        self._m = m
        self._span = span
        self._text = text

    def group(self, name: str) -> str | None:
        if name == "secret":
            return self._text[self._span[0] : self._span[1]]
        return self._m.group(name)

    def start(self, *args: str) -> int:
        return self._m.start(*args)

    def end(self, *args: str) -> int:
        return self._m.end(*args)


def _lowered(text: str) -> str:
    lower = text.lower()
    if len(lower) != len(text):  # rare non-ASCII case mappings that change length
        lower = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    return lower


def find_secrets(text: str, *, merge: bool = True) -> list[tuple[str, int, int]]:
    """Return ``(rule_name, start, end)`` for each secret, sorted by position.

    Overlapping findings are merged into one span (named after the first rule) unless
    ``merge`` is false, in which case every rule's own finding is returned.
    """
    if not text:
        return []
    lower = _lowered(text)
    found: list[tuple[str, int, int]] = []
    first: dict[str, int] = {}
    for rule in RULES:
        _scan_rule(rule, text, lower, first, found)
    found.sort(key=lambda f: (f[1], -f[2]))
    if not merge:
        return found
    merged: list[tuple[str, int, int]] = []
    for name, start, end in found:
        if merged and start < merged[-1][2]:
            prev = merged[-1]
            if end > prev[2]:
                merged[-1] = (prev[0], prev[1], end)
            continue
        merged.append((name, start, end))
    return merged


def secret_kinds(text: str) -> list[str]:
    """The names of the rules that found a secret in ``text``, in order of first appearance.

    Says what kind of secret is there without repeating it (a manual memory is refused with
    these names, never with the value).
    """
    return list(dict.fromkeys(name for name, _start, _end in find_secrets(text, merge=False)))


def redact(text: str) -> str:
    """Return ``text`` with every secret found replaced by :data:`REDACTED`."""
    if not text:
        return ""
    if not isinstance(text, str):
        text = str(text)
    spans = find_secrets(text)
    if not spans:
        return text
    parts: list[str] = []
    last = 0
    for _name, start, end in spans:
        parts.append(text[last:start])
        parts.append(REDACTED)
        last = end
    parts.append(text[last:])
    return "".join(parts)
