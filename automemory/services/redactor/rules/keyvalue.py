"""Assignments whose key names a secret, in every syntax agents print.

``key = value`` / ``key: value`` / ``"key": "value"`` in shells, env files, YAML, JSON,
TOML, INI, properties, Go/Java/C#/PHP/Ruby/JS/Python/Kotlin/Rust code and Makefiles
(``=``, ``:=``, ``?=``, ``::=``, ``:::=``, ``.=``, ``+=``, ``=>``, ``<-``), typed
declarations (``var xToken string = "…"``), property setters
(``System.setProperty("X_TOKEN", "…")``), XML elements and config entries.  Command
lines and prose are in ``commandline.py``.

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
    if m.group("secret") is not None and m.start("sep") - m.end("tail") > 5:
        return False  # token          = 1*tchar: a grammar or a table; aligned values are quoted
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
            "# token          = 1*tchar",
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
)
