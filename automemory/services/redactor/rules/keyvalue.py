"""Assignments whose key names a secret, in every syntax agents print.

``key = value`` / ``key: value`` / ``"key": "value"`` in shells, env files, YAML, JSON,
TOML, INI, properties, Go/Java/C#/PHP/Ruby/JS/Python/Kotlin/Rust code and Makefiles
(``=``, ``:=``, ``?=``, ``::=``, ``:::=``, ``.=``, ``+=``, ``=>``, ``<-``), typed
declarations (``var xToken string = "…"``), property setters
(``System.setProperty("X_TOKEN", "…")``), XML elements and config entries, command-line
flags and shell ``setenv``/``ENV`` commands.

Keys are identifiers *ending* in a keyword (password, passwd, pwd, pass, passphrase,
secret, token, credential(s), auth, or key after api/access/secret/private/...).  A
password/secret/token/credential key takes any literal value, whatever its length; only
references and placeholders as a whole value stay (``${VAR}``, ``os.environ[...]``,
``settings.X``, a call, ``<your-key>``, ``None``, ...).
"""

from __future__ import annotations

import re

from automemory.services.redactor.base import (
    Rule,
    fake,
    is_placeholder,
    line_before,
    looks_random,
    rest_continues,
    rx,
    words,
)

# Words that, written before "key" (api_key, secretKey, x-api-key), make it a secret key.
_KEY_PREFIXES = words(
    """
    api access secret private signing encryption encrypt master auth account app consumer
    subscription service session shared storage client admin license deploy webhook
    ingest ingestion write read management personal sas hmac jwt aes crypt cipher token
    """
)
_SHORT_CORES = frozenset({"pass", "pwd", "pw", "auth"})
_PASSWORD_CORES = frozenset({"password", "passwd", "passphrase", "pass", "pwd", "pw"})
# An "auth" key is a strong one when its name also holds one of these (authToken).
_STRONG_WORDS = ("passw", "pwd", "pass", "secret", "token", "credential")

_KEY = r"""
    (?P<core>passw(?:or)?d|passphrase|pass|pwd|pw|secret|token|credentials?|auth|key)
    (?P<tail>
        (?:[_.-]?(?:access|api|private|secret|auth|signing))?
        (?:[_.-]?(?:key|value|token|string|b64|base64|base|phrase|hash))?
        (?:[_.-]?[0-9]{1,3})?
    )
"""

_KV_RE = rx(
    _KEY
    + r"""
    (?P<close>\\?["'`]?\]?|\[[0-9]{0,4}\])        # end of a quoted key, subscript, C array
    (?P<type>(?:[ \t]{1,4}|[ \t]{0,4}:[ \t]{0,4})
        (?:string|String|str|&str|&'static[ ]str|\[\]byte|SecretStr|char[ ]?\*)
        (?=[ \t]{0,4}[:=?.+|]))?                # Go/TS/Kotlin/Rust type annotation
    [ \t]{0,24}+                                # aligned: password       = "…"
    (?P<sep>:::=|::=|:=|\?\?=|\|\|=|\?=|\.=|\+=|=>|<-|=(?![=~>])|:(?![:/\\])
        |(?:,|===?|!==?)(?=[ \t]{0,4}[rRbBfFuU@]{0,2}["'`]))  # setter arg, comparison
    [ \t]{0,4}
    (?P<prefix>[rRbBfFuU@]{1,2}(?=["']))?       # string prefix: r"", b'', f"", @""
    (?:
        (?P<ref>(?:\$\{\{[^}\n]*+\}\}|\$\{[^}\n]*+\}|\$\([^)\n]*+\)|\{\{[^}\n]*+\}\}
            |\{[A-Za-z0-9_.!:]*+\})(?:[:/@._-]{0,3}+\$?\{[A-Za-z0-9_.!:]*+\})*+)
            (?=[\s,;)}\]"'`\\]|$)
      | \\?"(?P<secret_dq>(?:[^"\\\n]|\\[^"\n])*+)\\?"
      | '(?P<secret_sq>[^'\n]*+)'
      | `(?P<secret_bq>[^`\n]*+)`
      | (?P<secret>[^\s"'`,;&)}\]<>]++)
    )
    """,
    re.IGNORECASE,
)

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)+")
_LABEL_RE = re.compile(r"[A-Z][A-Za-z]*(?: [A-Za-z]+)+")


def _key_start(text: str, core_start: int) -> int:
    """Where the identifier that ends with the keyword at ``core_start`` begins."""
    i = core_start
    lo = max(0, core_start - 64)
    while i > lo and (text[i - 1].isalnum() or text[i - 1] in "_.-"):
        i -= 1
    return i


def _left_ok(text: str, pos: int, core: str) -> bool:
    """Left context of a keyword: ``api_key`` yes, ``monkey``/``bypass`` no."""
    if core == "key":
        j = pos
        if j and text[j - 1] in "_.- ":
            j -= 1  # api_key, api.key, x-api-key, "API key: …"
        return text[max(0, j - 16) : j].lower().endswith(_KEY_PREFIXES)
    if core in _SHORT_CORES and pos:
        prev = text[pos - 1]
        return not prev.isalnum() or (prev.islower() and text[pos].isupper())  # dbPass
    return True


def _is_path_or_url(value: str) -> bool:
    return " " not in value and value.startswith(
        ("/", "~/", "./", "../", "http://", "https://", "file:")
    )


def _is_label(value: str) -> bool:
    """A label or message ("Password must be 12 characters", "API key"), not a secret."""
    return value[:1].isupper() and (value.count(" ") >= 3 or bool(_LABEL_RE.fullmatch(value)))


def _is_strong(key: str, core: str) -> bool:
    """Any literal counts, except under a bare ``auth`` key (``auth: oauth2``)."""
    return core != "auth" or any(w in key for w in _STRONG_WORDS)


def _is_password(core: str) -> bool:
    return core in _PASSWORD_CORES or core.startswith("passw")


_NAME_WORDS = ("passw", "passphrase", "token", "secret", "credential", "key")
# Keys ending in token/key that name pagination cursors, idempotency ids and the like.
_NOT_SECRET_KEY_RE = re.compile(
    r"(?:[a-z0-9]*[_.-])?(?:next[a-z]*|page|continuation|pagination|input|output|start"
    r"|starting|change|clientrequest|client[_-]request|idempotency|request|creation|sync"
    r"|resume|cancel|lifecycleaction|lifecycle[_-]action|lock|client|registration|sequence"
    r"|import|work[_-]unit|copy[_-]product|purchase|[a-z]*update|public[_-]?key)"
    r"[_-]?(?:token|key)"
)
_TYPE_NAME_RE = re.compile(r"[A-Z0-9]*(?:[A-Z][a-z]{2,}[0-9]*){2,}")  # PKCS7PrivateKeyTypes
_REGEX_HINTS = ("(?", "\\w", "\\d", "\\s", "[^", "]+", "]*", "]{")
_NUMBER_RE = re.compile(r"-?[0-9]{1,4}")
_COLOR_RE = re.compile(r"#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})")


def _is_not_secret_key(key: str) -> bool:
    """``next_token``, ``PageToken``, ``--idempotency-token``: a cursor or an id."""
    return _NOT_SECRET_KEY_RE.fullmatch(key.lower().lstrip("-")) is not None


_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
_SNAKE_WORDS_RE = re.compile(r"[a-z]{2,}(?:_[a-z]{2,})+")


def _is_name(value: str, *, setter: bool) -> bool:
    """A name that mentions a secret, not a secret: "set-password", "new_password2"."""
    if len(value) > 48 or not _NAME_RE.fullmatch(value):
        return False
    low = value.lower()
    if any(len(p) >= 16 and looks_random(p) for p in re.split(r"[_-]", value)):
        return False  # test_pub_04bfcfa73b7009a31d4a97018ffef85: a key with a prefix
    if setter and re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", value):
        return True  # @sensitive_post_parameters('password', 'credit_card')
    if not any(w in low for w in _NAME_WORDS):
        return False
    # outside a setter, only digit-free names: "prod_password_2024" is a (weak) password
    return setter or (("-" in value or "_" in value) and not any(c.isdigit() for c in value))


def _value_ok(
    m: re.Match[str], value: str, text: str, *, key: str, core: str, setter: bool = False
) -> bool:
    """Is ``value`` (assigned to ``key``) a literal secret rather than code or a placeholder?"""
    v = value.strip()
    if len(v) < 2 or is_placeholder(v) or _is_path_or_url(v) or _is_name(v, setter=setter):
        return False
    if re.sub(r"[_.-]", "", v.lower()) == re.sub(r"[_.-]", "", key):
        return False  # WaitForTaskToken = "waitForTaskToken": an enum, not a secret
    password = _is_password(core)
    if not password and (_is_not_secret_key(key) or _NUMBER_RE.fullmatch(v)):
        return False  # next_token: "abc", token = -1
    if _COLOR_RE.fullmatch(v) or any(hint in v for hint in _REGEX_HINTS):
        return False  # Token: '#dcdccc' (a style), secret = r'([a-z0-9]{64})' (a pattern)
    quoted = m.group("secret") is None
    if quoted:
        if _is_label(v) or (v[0] == "_" and _IDENT_RE.fullmatch(v)):
            return False  # "Password must be…", session_key = "_messages" (a name)
        if core == "key" and _SNAKE_WORDS_RE.fullmatch(v):
            return False  # RUN_SUMMARY_SESSION_KEY = "console_run_summary": a dict key
        if v.startswith("+ ") or v.endswith(" +"):
            return False  # 'Credential=' + access_key + '…': code between two literals
        if not password and " " in v and re.fullmatch(r"[a-z ]+", v):
            return False  # token = "not in" (words; a passphrase is a password key)
        prefix = m.group("prefix") if "prefix" in m.re.groupindex else None
        if prefix and "f" in prefix.lower() and "{" in v:
            return False  # f"share-{portfolio_id}": built at run time
        after = text[m.end() : m.end() + 2]
        if after[:1] == "." and after[1:2].isalpha():
            return False  # " ...\n".join(pairs): a method call on a literal
    else:
        if "(" in v or "[" in v or v.endswith(":"):
            return False  # os.getenv(...), os.environ[...], "no token": lambda: …
        if not password and _TYPE_NAME_RE.fullmatch(v):
            return False  # private_key: PKCS7PrivateKeyTypes (a type annotation)
        parts = v.split(".")
        if (
            _DOTTED_RE.fullmatch(v)
            and not any(c.isdigit() for c in parts[0])
            and not any(len(p) >= 16 and looks_random(p) for p in parts[1:])
        ):
            return False  # attribute chain: settings.SECRET_KEY, self.token, var.pw
        low = v.lower()
        if low == key or key.endswith(low) or low.endswith(core):
            return False  # password = password, token=self_token
        if _IDENT_RE.fullmatch(v) and not any(c.isdigit() for c in v):
            if "_" in v and (v.islower() or v.isupper()):
                return False  # raw_password, DEFAULT_PASSWORD
            if v[0].isupper() and any(c.isupper() for c in v[1:]) and v != v.upper():
                return False  # SecretStr, CharField
            if rest_continues(text, m.end()):
                return False  # "Password: must be 8 characters", "x_pass = await f()"
            if not password:
                return False  # session[SESSION_KEY] = backend, token = Error: a name
    return _is_strong(key, core) or looks_random(v)


def _kv_ok(m: re.Match[str], value: str, text: str) -> bool:
    if m.group("ref") is not None:
        return False
    if m.group("secret_bq") is not None and any(c.isspace() for c in value):
        return False  # KEY=`etcdctl get /secret`: a command substitution, not a value
    pos = m.start()
    core = m.group("core").lower()
    if not _left_ok(text, pos, core):
        return False
    start = _key_start(text, pos)
    key = text[start : m.end("tail")].lower()
    sep = m.group("sep")
    if text[max(0, start - 2) : start] == "::":
        return False  # AWS::IAM::AccessKey, Foo::Token: a type name
    if sep == ",":
        # a setter's first argument: System.setProperty("X_TOKEN", "..."), define('PW', '..')
        if m.group("secret") is not None or not m.group("close").strip("\\]"):
            return False
        if not start or text[start - 1] not in "\"'":
            return False
        call = text[max(0, start - 41) : start - 1].rstrip()
        if not call.endswith("(") or not call[-2:-1].isalnum() or core == "auth":
            return False  # ("auth", "0002_migration") is a tuple, not a setter
    elif (
        sep == ":"
        and m.group("secret") is not None
        and not m.group("close")
        and text[m.end("sep") : m.end("sep") + 1] not in (" ", "\t")
    ):
        return False  # arn:aws:...:secret:name is not a mapping (no space after the key)
    if sep.startswith(("==", "!=")):
        # a comparison gives a secret away only when the literal looks like one
        v = value.strip()
        if not (_is_password(core) and not v.isalpha()) and not looks_random(v):
            return False
    return _value_ok(m, value, text, key=key, core=core, setter=sep == ",")


# --- XML -------------------------------------------------------------------------------------

_KEY_AT_END_RE = rx(_KEY + r"$", re.IGNORECASE)

# <password>…</password>, <apiToken>…</apiToken>, <db:secret><![CDATA[…]]></db:secret>
_XML_ELEMENT_RE = rx(
    r"""<(?P<name>(?:[A-Za-z_][\w.-]{0,64}+:)?[A-Za-z_][\w.-]{0,64}+)
    (?:[ \t][^<>\n]{0,200}+)?>
    (?:\r?\n[ \t]{0,64}+)?                       # the value on its own line
    (?:<!\[CDATA\[(?P<secret_cdata>[^\]\n]*+)\]\]>|(?P<secret>[^<\n]++))
    (?:\r?\n[ \t]{0,64}+)?
    </(?P=name)>"""
)

# <add key="ClearTextPassword" value="…"/>, <property name="password" value="…"/>,
# <entry key="db.password">…</entry>
_XML_ENTRY_RE = rx(
    r"""(?<![\w-])(?:key|name)[ \t]{0,2}=[ \t]{0,2}(?P<q>["'])(?P<name>[^"'\n<>]{1,128}+)(?P=q)
    (?:[ \t]{1,10}value[ \t]{0,2}=[ \t]{0,2}
        (?:"(?P<secret_attr>[^"\n]*+)"|'(?P<secret_attr_sq>[^'\n]*+)')
      |[ \t]{0,4}>(?P<secret>[^<\n]++)</)""",
    re.IGNORECASE,
)


def _secret_key_core(name: str) -> str | None:
    """The keyword a name ends with (``ClearTextPassword`` -> ``password``), if any."""
    m = _KEY_AT_END_RE.search(name)
    if m is None:
        return None
    core = m.group("core").lower()
    return core if _left_ok(name, m.start(), core) else None


def _xml_element_ok(m: re.Match[str], value: str, text: str) -> bool:
    name = m.group("name").rsplit(":", 1)[-1]
    core = _secret_key_core(name)
    if core is None:
        return False
    return _value_ok(m, value, text, key=name.lower(), core=core) or (
        m.group("secret") is None and not is_placeholder(value)
    )


def _xml_entry_ok(m: re.Match[str], value: str, text: str) -> bool:
    name = m.group("name")
    core = _secret_key_core(name)
    if core is None:
        return False
    v = value.strip()
    if is_placeholder(v) or _is_label(v) or _is_path_or_url(v) or _is_name(v, setter=False):
        return False
    return _is_strong(name.lower(), core) or looks_random(v)


# --- command lines ---------------------------------------------------------------------------

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


_PASSWORD_ANCHORS = ("pass", "pw")
_SECRET_ANCHORS = ("key", "secret", "token", "credential", "auth")
_P = fake("b62", 32)

RULES: tuple[Rule, ...] = (
    Rule(
        "password-assignment",
        "password assignment",
        'key = value / key: value / "key": "value" in any syntax where the key names a '
        "password (password, passwd, pwd, pass, passphrase); any literal value",
        _PASSWORD_ANCHORS,
        _KV_RE,
        _kv_ok,
        (
            "password=«hunter2»",
            '"password": "«hunter2»"',
            "DB_PASSWORD=«Sup3rExampleS3cret!»",
            'DB_PASSWORD="«prod_password_2024»"',
            "<?php $dbPassword .= '«s3cr3t-pw»';",
            "DB_PASSWORD ?= «hunter22»",
            "ROOT_PASSWORD :::= «hunter22»",
            'System.setProperty("DB_PASSWORD", "«hunter22»");',
            "define('DB_PASSWORD', '«wp-s3cret»');",
            "Server=db;User Id=sa;Password=«Pa55word!»;Encrypt=True",
            "spring.datasource.password=«hunter22»",
            'val dbPassword: String = "«hunter22»"',
            ":password => '«hunter22»'",
            "if password == '«hunter22»':",
            'char my_password[] = "«hunter22»";',
            '<dataSource url="jdbc:postgresql://db/app" user="app" password="«hunter22»" />',
            'password       = "«rootpasswd»"',
        ),
        (
            "password=",
            "password: ${DB_PASSWORD}",
            'password = os.getenv("DB_PASSWORD")',
            "password = make_password(raw)",
            "def check_password(self, raw_password: str) -> bool:",
            "The password: must be at least 12 characters.",
            "bypass_cache = True",
            'choices = [("password", "Password")]',
            'label = _("Password")',
            "password: SecretStr",
            "DB_PASSWORD=your-db-password-here",
            '@sensitive_variables("password1", "password2")',
            "@sensitive_post_parameters('password', 'credit_card')",
            'print(f"password={password!r}")',
            "user_pass = '%s:%s' % (user, pw)",
            'pw = " ...\\n".join(pairs) + last',
            'self.validate_passwords("new_password1", "new_password2")',
        ),
    ),
    Rule(
        "secret-assignment",
        "secret or token assignment",
        'key = value / key: value / "key": "value" in any syntax where the key names a '
        "secret, token, API key or credential(s) (any literal value) or auth (a value "
        "that looks generated)",
        _SECRET_ANCHORS,
        _KV_RE,
        _kv_ok,
        (
            "token=«hunter2»",
            'api_key: "«mykey»"',
            "secret: «12345678»",
            "export GITHUB_TOKEN=«mytok3n»",
            "Your API key: «a1B2c3D4e5»",
            'if api_token == "«' + _P + '»":',
            'char db_secret[32] = "«' + _P + '»";',
            "token: «xxxxxxxxRealTok3n99»",
            'var xToken string = "«' + _P + '»"',
            'const apiToken: string = "«' + _P + '»";',
            'System.setProperty("X_TOKEN", "«' + _P + '»");',
            "X_TOKEN ::= «" + _P + "»",
            '$xToken .= "«' + _P + '»";',
            "client_secret = '«" + _P + "»'",
            'ENV["API_TOKEN"] = "«' + _P + '»"',
            'api_token <- "«' + _P + '»"',
            '{"auths": {"r.example.com": {"auth": "«' + fake("b64", 40) + '»"}}}',
            "harnessToken=«pat." + fake("b62", 22) + "." + fake("b62", 24, 1) + "»",
            "vault_token: «s." + fake("b62", 24, 2) + "»",
            'System.setProperty("LOB_TOKEN", "«test_pub_' + fake("hex", 31) + '»");',
            "GOCARDLESS_TOKEN = '«live_" + fake("b62", 40, 3) + "»'",
        ),
        (
            "token = os.environ['TOKEN']",
            "SECRET_KEY = settings.SECRET_KEY",
            "token = get_token()",
            "token: ${{ secrets.GITHUB_TOKEN }}",
            'api_key = "<your-key>"',
            "api_key: null",
            "api_key: '***'",
            "max_tokens=4096",
            "auth: oauth2",
            "credentials: include,",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-AbCdEf",
            "sort_key: created_at",
            "api_key: str | None = None",
            'fields = ("api_key", "API key")',
            'migrations = [("auth", "0002_alter_permission_name_max_length")]',
            'session_key = "_messages"',
            "request.session[BACKEND_SESSION_KEY] = backend",
            'reset_url_token = "set-password"',
            'token = "not in"',
            '"no token": lambda: client.get("/projects"),',
            'if token == "":',
            'elif token == "with":',
            'if csrf_token == "NOTPROVIDED":',
            'and user_pass == "git"',
            "if auth_type == 'bearer':",
            "credentials = '{0}:{1}'.format(user, passwd).encode()",
            "f'Credential={key}/{scope}, '",
            "+ 'Credential=' + access_key + '/' + scope",
            'serverAuth = "1.3.6.1.5.5.7.3.1"',
            '"input_token": "NextToken",',
            '{"nextToken": "1", "ChangeToken": "abcd12f2-46da-4fdb-b8d5-fbd4c466928f"}',
            "token = Error",
            "token = -1",
            "Token: '#dcdccc',",
            "jsonnet_token = r'[^\\W\\d]\\w*'",
            'portfolio_share_token = f"share-{portfolio_id}-{org_type}"',
            "ACCESS_KEY = 'aws_access_key_id'",
            "capabilities = 'LOGINDISABLED AUTH=CRAM-MD5'",
            '"AWS::IAM::AccessKey": "72c2d9dd90025459",',
            '<a href="tk.html" accesskey="U">Tk</a>',
            'WaitForTaskToken = "waitForTaskToken"',
            'ALLOW_CREDENTIALS = "allowCredentials"',
            "private_key: PKCS7PrivateKeyTypes,",
            "f'aws_secret_access_key: {params.secret_access_key}\\n'",
            '"nextForwardToken": "f/31961209122447488583055879464742346735121166569214640130",',
            '"PolicyUpdateToken": "1:X9QGexP7HASDlsFp+G31Iw==",',
            '<assemblyIdentity name="Microsoft.VC90.CRT" publicKeyToken="1fc8b3b9a1e18e3b"/>',
            "SUMO_ACCESS_KEY=`etcdctl get /sumologic_secret`",
            "-e SUMO_ACCESS_KEY=`etcdctl get /sumologic_secret`",
            "API_TOKEN=$(vault read -field=token secret/ci)",
            'token: "${{ secrets.DEPLOY_TOKEN }}"',
            "export API_TOKEN=${API_TOKEN:-}",
            "secret_key = self.settings.secret_key",
            'RUN_SUMMARY_SESSION_KEY = "console_run_summary"',
            'token        = "xxxxxxxxxxxxxx.atlasv1.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"',
        ),
    ),
    Rule(
        "xml-element",
        "secret in an XML element",
        "<password>…</password>, <apiToken>…</apiToken>, <db:secret><![CDATA[…]]></db:secret>",
        ("<",),
        _XML_ELEMENT_RE,
        _xml_element_ok,
        (
            "<password>«hunter22»</password>",
            "<server><id>r</id><username>ci</username><password>«s3cret!»</password></server>",
            "<apiToken>«" + _P + "»</apiToken>",
            "<db:secret><![CDATA[«" + _P + "»]]></db:secret>",
        ),
        (
            "<password>${env.DB_PASSWORD}</password>",
            "<label>Password</label>",
            "<title>Reset your password</title>",
            '<input type="password" name="password">',
            "<password></password>",
            "<apiToken>{{ token }}</apiToken>",
        ),
    ),
    Rule(
        "xml-config-entry",
        "secret in a config entry",
        '.NET / NuGet / Spring XML entries: <add key="ClearTextPassword" value="…"/>, '
        '<property name="password" value="…"/>, <entry key="db.password">…</entry>',
        ("key=", "name="),
        _XML_ENTRY_RE,
        _xml_entry_ok,
        (
            '<add key="ClearTextPassword" value="«hunter22»" />',
            '<add key="ApiToken" value="«' + _P + '»"/>',
            '<property name="password" value="«s3cret!»"/>',
            '<entry key="db.password">«hunter22»</entry>',
        ),
        (
            '<add key="ClearTextPassword" value="%NUGET_PASSWORD%" />',
            '<add key="Password" value="" />',
            '<property name="password" value="${db.password}"/>',
            '<input type="submit" name="set-password" value="{% translate \'Set it\' %}">',
        ),
    ),
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
)
