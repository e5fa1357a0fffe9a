"""Values of a provider's own shape, assigned to a key that names the provider.

``const SONAR_LOGIN = "…"``, ``SNYK_KEY := "<uuid>"``, ``sumologic.accessId = "su…"``,
``cloudflare: "<37 hex>"``: the key does not end in a secret word (``login``, ``id``,
a bare provider name), so the assignment rules leave it, but the provider's name in the
key and a value of exactly that provider's shape say it is a credential (gitleaks'
"semi-generic" rules work this way).  The value must match the shape *as a whole*, so a
UUID under ``SNYK_ORG_ID`` or a word under ``SONAR_LOGIN`` stays.
"""

from __future__ import annotations

import re

from automemory.services.redactor.base import Rule, fake, is_placeholder, rx

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_SECRET_ENDINGS = ("key", "token", "secret", "password", "pass", "pwd", "apikey")

# keyword -> (value shape, key endings that name a credential besides the usual ones)
PROVIDER_SHAPES: dict[str, tuple[re.Pattern[str], tuple[str, ...]]] = {
    "sonar": (re.compile(r"(?:squ_|sqp_|sqa_)?[A-Za-z0-9]{40}"), ("login",)),
    "snyk": (re.compile(_UUID), ()),
    "sumo": (re.compile(r"su[A-Za-z0-9]{12}|[A-Za-z0-9]{64}"), ("accessid", "access_id")),
    "cloudflare": (re.compile(r"[a-f0-9]{37}|[A-Za-z0-9_-]{40}"), ()),
    "heroku": (re.compile(_UUID), ()),
    "hubspot": (re.compile(_UUID), ()),
    "mailchimp": (re.compile(r"[a-f0-9]{32}-us[0-9]{1,2}"), ()),
    "messagebird": (re.compile(r"[a-z0-9]{25}|" + _UUID), ("clientid", "client_id")),
    "sourcegraph": (re.compile(r"[a-fA-F0-9]{40}"), ()),
}

_KEYWORDED_RE = rx(
    r"""(?<![A-Za-z])(?P<kw>sonar|snyk|sumo|cloudflare|heroku|hubspot|mailchimp
        |message[_.-]?bird|sourcegraph)
    (?P<tail>[A-Za-z0-9_.-]{0,40}+)
    \\?["'\]]?[ \t]{0,4}
    (?::::=|::=|:=|\?=|=>|=(?![=~>])|:|,)[ \t]{0,4}
    \\?["'`]?(?P<secret>[A-Za-z0-9_-]{12,80}+)(?![A-Za-z0-9_+/=-])""",
    re.IGNORECASE,
)


def _keyworded_ok(m: re.Match[str], value: str, text: str) -> bool:
    written = m.group("kw")
    if written[-1].isupper() and not written.isupper():
        return False  # sumObj = …: a word that starts like the provider, not its name
    kw = re.sub(r"[_.-]", "", written.lower())
    shape, extra = PROVIDER_SHAPES[kw]
    tail = re.sub(r"[.-]", "_", m.group("tail").lower()).rstrip("_")
    squeezed = tail.replace("_", "")
    endings = _SECRET_ENDINGS + tuple(e.replace("_", "") for e in extra)
    if tail and not squeezed.endswith(endings):
        return False  # SNYK_ORG_ID, HEROKU_APP_NAME: the provider's ids and names
    return shape.fullmatch(value) is not None and not is_placeholder(value)


_U = "3f2a9c1e-7b4d-4e8a-9c2f-1a6b8d0e4f7c"

RULES: tuple[Rule, ...] = (
    Rule(
        "provider-keyword",
        "provider credential by name",
        "a value of a provider's own shape assigned to a key that names the provider: "
        "SonarQube (sonar…login/token, 40 chars), Snyk (UUID), Sumo Logic (su + 12 access id, "
        "64-char key), Cloudflare (37 hex global key, 40-char token), Heroku and HubSpot "
        "(UUID), Mailchimp (32 hex-usN), MessageBird, Sourcegraph (40 hex)",
        (
            *("sonar", "snyk", "sumo", "cloudflare", "heroku", "hubspot", "mailchimp"),
            "sourcegraph",
            *("messagebird", "message_bird", "message-bird", "message.bird"),
        ),
        _KEYWORDED_RE,
        _keyworded_ok,
        (
            'const SONAR_LOGIN = "«' + fake("b62", 40) + '»"',
            'SONAR_LOGIN := "«' + fake("b62", 40, 1) + '»"',
            'SONAR.LOGIN ::= "«' + fake("b62", 40, 2) + '»"',
            'SONAR.TOKEN ?= "«squ_' + fake("b62", 40, 3) + '»"',
            'const SNYK_KEY = "«' + _U + '»"',
            'sumologic.accessId = "«su' + fake("b62", 12) + '»"',
            'export SUMOLOGIC_ACCESSID="«su' + fake("b62", 12, 4) + '»"',
            'cloudflare: "«' + fake("hex", 37) + '»"',
            "const hubspotKey = '«" + _U + "»';",
            'MAILCHIMP_KEY = "«' + fake("hex", 32) + '-us18»"',
            "sourcegraph: «" + fake("hex", 40, 5) + "»",
            'const MessageBirdClientID = "«' + _U + '»"',
        ),
        (
            "sumObj = suGyI5imvADdvU",
            'SNYK_ORG_ID = "' + _U + '"',
            "SONAR_LOGIN=admin",
            "sonar.login=${SONAR_TOKEN}",
            "sumologic_access_id         = ''",
            "SUMOLOGIC_ACCESSID: ${SUMOLOGIC_ACCESSID}",
            "heroku: git push heroku main",
            "- (NSNumber *)sumOfProperty:(NSString *)property;",
        ),
    ),
)
