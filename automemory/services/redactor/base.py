"""The rule type and the value checks every rule family shares.

A rule is data: an id, a human label, anchors, a regex matched *at* an anchor, an optional
validator, and the samples that prove it (``true_positives`` mark each secret with
``«…»``; ``false_positives`` must come out unchanged).  ``tests/automemory/redactor/test_rules.py``
checks every rule against its own samples.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

REDACTED = "[REDACTED]"

# (match, value, text) -> keep the finding?  ``value`` is the secret group's text.
Validator = Callable[[re.Match[str], str, str], bool]
# (match, text, memo) -> the secret spans of one match, for rules that find several per
# match; ``memo`` is a scratch dict that lives for one scan of one text.
SpanFinder = Callable[[re.Match[str], str, dict[str, object]], list[tuple[int, int]]]


@dataclass(frozen=True)
class Rule:
    """One detection rule and its own proof.

    ``anchors`` are lowercase literals; the regex is tried only where one occurs and must
    match starting exactly there (``backoff`` characters earlier for rules whose anchor
    sits inside the match).  The secret is the first matched group whose name starts with
    ``secret`` (else the whole match), unless ``spans`` returns the spans itself.
    ``in_token_runs`` says every match is 16+ characters of ``[A-Za-z0-9_.~+/=-]``, so
    the anchors are looked for only inside such runs (a fraction of ordinary text).
    """

    id: str
    label: str
    description: str
    anchors: tuple[str, ...]
    pattern: re.Pattern[str]
    validate: Validator | None = None
    true_positives: tuple[str, ...] = ()
    false_positives: tuple[str, ...] = ()
    backoff: int = 0
    backoff_chars: str = "0123456789"
    spans: SpanFinder | None = None
    in_token_runs: bool = False
    secret_groups: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        groups = tuple(g for g in self.pattern.groupindex if g.startswith("secret"))
        object.__setattr__(self, "secret_groups", groups)

    @property
    def name(self) -> str:
        """The rule id (the name ``find_secrets`` reports)."""
        return self.id


def rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """Compile a verbose rule regex."""
    return re.compile(pattern, flags | re.VERBOSE)


def words(spec: str) -> tuple[str, ...]:
    return tuple(spec.split())


# --------------------------------------------------------------------------------------
# Placeholders and references: only ever recognised as the WHOLE value
# --------------------------------------------------------------------------------------

PLACEHOLDER_WORDS = frozenset(
    words(
        """
    none null nil undefined true false yes no on off empty blank default unset
    redacted [redacted] <redacted> hidden masked removed omitted filtered
    secret secrets password passwd pwd pass passphrase token tokens key apikey api_key
    credential credentials auth changeme change_me change-me example sample dummy fake
    placeholder string str bytes int integer number bool boolean object dict list array
    any required optional todo tbd n/a na env environment value text field type
    bearer basic oauth oauth2 jwt self cls return include omit same-origin inherit
    """
    )
)

# Letters-and-separators phrases that say "put your value here".
_PLACEHOLDER_PHRASE_WORDS = (
    "your",
    "here",
    "replace",
    "insert",
    "placeholder",
    "example",
    "changeme",
    "change_me",
    "dummy",
    "sample",
    "redacted",
    "todo",
)

_REFERENCE_RE = re.compile(
    r"""
      \$[A-Za-z_][A-Za-z0-9_]*                  # $VAR
    | \$[0-9#@*?!$-]                            # $1, $@, $*: positional and special
    | \$\{\{.*\}\}                              # ${{ secrets.X }}
    | \$\{[^{}]*\}                              # ${VAR}, ${VAR:-default}
    | \$\(.*\)                                  # $(command)
    | %[A-Za-z_][A-Za-z0-9_]*%                  # %VAR%
    | \{\{.*\}\} | \{%.*%\}                      # {{ var }}, {% tag %}
    | (?:\{[A-Za-z0-9_.!:]*\}|%[sdr]|%\([A-Za-z_]+\)[sdr]|[:/@._ -]|\\[nrt])+
                                                # {token}, {0}:{1}, %s:%s, {password!r}
    | <[^<>]*>                                  # <your-key>
    | !!?[A-Za-z][A-Za-z0-9_]*(?:[ \t].*)?      # YAML tag: !vault |, !!binary, !Ref X
    | [*&][A-Za-z_][A-Za-z0-9_]*                # YAML alias / anchor
    """,
    re.VERBOSE | re.DOTALL,
)
_PHRASE_RE = re.compile(r"[A-Za-z_ -]+")
_MASK_CHARS = "*xX.-_#?•…~ "


def is_placeholder(value: str) -> bool:
    """True when the whole value is a reference or placeholder (``${X}``, ``<key>``, ``***``).

    A secret that merely *contains* ``example`` or ``xxxx`` is not a placeholder.
    """
    v = value.strip()
    if not v:
        return True
    low = v.lower()
    if low in PLACEHOLDER_WORDS:
        return True
    if not v.strip(_MASK_CHARS) and (len(v) >= 3 or "x" not in low):
        return True  # ***, xxxx, ..., but "x" alone is a value
    if _REFERENCE_RE.fullmatch(v) or v.startswith(("$(", "${", "`")):
        return True  # also a substitution cut at a space: --password=$(cat /run/pw)
    if _PHRASE_RE.fullmatch(v) and any(w in low for w in _PLACEHOLDER_PHRASE_WORDS):
        return True  # your-api-key-here, YOUR_API_KEY, REPLACE_ME
    return is_masked_prefix(v)


_MASK_RUN_RE = re.compile(r"[*xX.•…]{4,}")


def is_masked_prefix(v: str) -> bool:
    """``sk-...``, ``ghp_xxxxxxxx``, ``gho_****``: a short visible prefix, then a mask;
    ``xxxxxxxx.atlasv1.xxxxxxxxxxxx``: masks around a short visible infix."""
    kept = v.rstrip("*xX.•…")
    if len(v) - len(kept) >= 3 and len(kept) <= 12:
        return True
    unmasked = _MASK_RUN_RE.sub("", v)
    return len(v) - len(unmasked) >= 16 and len(unmasked) <= 12


_CAMEL_WORDS_RE = re.compile(r"[a-z]{2,}(?:[A-Z][a-z]{2,}){2,}[A-Za-z]*|(?:[A-Z][a-z]{2,}){3,}")


def is_identifier_words(value: str) -> bool:
    """``requiredCharacteristicTypesForDisplayMetadata``: a name made of words, not a key.

    Generated tokens mix cases in short runs; a camelCase or PascalCase name of three or
    more words of three or more letters is code.
    """
    return bool(_CAMEL_WORDS_RE.fullmatch(value)) and looks_random(value) is False


def in_url_path(text: str, start: int, end: int) -> bool:
    """True if ``text[start:end]`` is a path segment or host label of a URL.

    ``https://github.com/xoxa-nyc/xoxa-nyc.github.io/…``: the match sits between ``/``
    (or a ``.`` of a host or file name) on the same whitespace-free run that holds ``://``.
    """
    before = text[start - 1 : start]
    after = text[end : end + 1]
    if before not in ("/", ".") and after not in ("/", "."):
        return False
    lo = start
    floor = max(0, start - 2048)
    while lo > floor and not text[lo - 1].isspace() and text[lo - 1] not in "\"'`<>(=":
        lo -= 1
    scheme = text.find("://", lo, start)
    # past the authority: ``https://ghp_…@github.com`` is a credential, not a path
    return scheme != -1 and text.find("/", scheme + 3, start) != -1


_SCHEME_NAME_RE = re.compile(r"[A-Z]+(?:-[A-Z0-9]+)+")
_WORD_PIECE_RE = re.compile(r"[A-Z]?[a-z]{1,100}|[A-Z]{1,100}(?![a-z])")


def looks_random(value: str) -> bool:
    """True if a value has the shape of a generated token rather than a word or name."""
    if len(value) < 8 or " " in value:
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if has_digit:  # digits and dots only: a version or an OID (1.3.6.1.5.5.7.3.1)
        if _SCHEME_NAME_RE.fullmatch(value):
            return False  # CRAM-MD5, AES-256-GCM
        return has_alpha or (len(value) >= 16 and "." not in value)
    if not has_alpha:
        return False
    # Letters only: words and CamelCase split into long pieces, random base62 into short.
    if value.islower() or value.isupper():
        return len(value) >= 32 and not any(c in "-_. " for c in value)
    pieces = _WORD_PIECE_RE.findall(value)
    letters = sum(len(p) for p in pieces)
    return bool(pieces) and letters / len(pieces) < 3.0


def line_before(text: str, start: int, span: int) -> str:
    """The text before ``start`` on the same line, at most ``span`` characters."""
    lo = max(0, start - span)
    lo = max(lo, text.rfind("\n", lo, start) + 1)
    return text[lo:start]


def rest_continues(text: str, end: int) -> bool:
    """True if more than a comment follows on the line (prose or an expression)."""
    i = end
    n = min(len(text), end + 64)
    while i < n and text[i] in " \t":
        i += 1
    return i < len(text) and text[i] not in "\r\n#"


def not_placeholder(m: re.Match[str], value: str, text: str) -> bool:
    return not is_placeholder(value)


def random_not_placeholder(m: re.Match[str], value: str, text: str) -> bool:
    return not is_placeholder(value) and looks_random(value)


# --------------------------------------------------------------------------------------
# Sample filler: deterministic, format-shaped, never a real credential
# --------------------------------------------------------------------------------------

ALPHABETS = {
    "b62": "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xYzC",
    "hex": "0f1e2d3c4b5a6978a1b2c3d4e5f6",
    "HEX": "0F1E2D3C4B5A6978A1B2C3D4E5F6",
    "upper": "QZ7RT2KW5MX3PV4HN6JD",
    "b64": "aB3d+E5fG/7hJ9kL1mN2pQ4rS6tU8vW0",
    "lower": "q7r2k5m3p4h6n8d9j1w0z",
    "digits": "8306152974",
}


def fake(alphabet: str, n: int, seed: int = 0) -> str:
    """``n`` characters of ``alphabet`` (a key of :data:`ALPHABETS`), varied by ``seed``."""
    chars = ALPHABETS[alphabet]
    step = 7 if len(chars) % 7 else 5
    return "".join(chars[(seed * 3 + i * step + i // len(chars)) % len(chars)] for i in range(n))
