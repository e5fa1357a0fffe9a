"""Decoders: the text as the rules should see it, for secrets written in disguise.

A secret can be written so that no rule sees it: ``ghp_…`` in full-width forms, a
token split by a zero-width space, ``postgres%3A%2F%2Fadmin%3A…``, ``password&#61;…``, a
base64-encoded database URL.  Each decoder builds one *view* of the text: only the lines
(or blobs) it changes, decoded once, with the original span of every decoded character.
The engine runs the rules over each view exactly as over the text and maps each finding
back, so the secret is replaced in the original text, encoded form and all (a base64 blob
is replaced whole).  Views are never decoded again: one level, no recursion, and each
decoder is one linear pass that costs nothing on text it does not apply to.

A decoder is data like a rule: an id, a label, a description, its view function and its
own samples (``true_positives`` mark with ``«…»`` what must be replaced in the original,
``false_positives`` must come out unchanged).  ``tests/automemory/redactor/test_decoders.py``
checks every decoder against its samples.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from automemory.services.redactor.base import fake


@dataclass(frozen=True)
class View:
    """Decoded text and, for each of its characters, the span it came from."""

    text: str
    starts: list[int]
    ends: list[int]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the decoded ``text[start:end]``."""
        return self.starts[start], self.ends[end - 1]


@dataclass(frozen=True)
class Decoder:
    """One way of writing text in disguise, and its own proof."""

    id: str
    label: str
    description: str
    view: Callable[[str], View | None]
    true_positives: tuple[str, ...] = ()
    false_positives: tuple[str, ...] = ()


class _Builder:
    """Collects decoded pieces with their original spans."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.starts: list[int] = []
        self.ends: list[int] = []

    def keep(self, text: str, lo: int, hi: int) -> None:
        """Original ``text[lo:hi]`` unchanged, each character its own span."""
        self.parts.append(text[lo:hi])
        self.starts.extend(range(lo, hi))
        self.ends.extend(range(lo + 1, hi + 1))

    def put(self, decoded: str, lo: int, hi: int) -> None:
        """``decoded`` stands for the original ``lo:hi``: every character maps to it whole."""
        self.parts.append(decoded)
        self.starts.extend([lo] * len(decoded))
        self.ends.extend([hi] * len(decoded))

    def separate(self, at: int) -> None:
        self.put("\n", at, at)

    def build(self) -> View | None:
        return View("".join(self.parts), self.starts, self.ends) if self.parts else None


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    lo = text.rfind("\n", 0, pos) + 1
    hi = text.find("\n", pos)
    return lo, len(text) if hi == -1 else hi


def _escape_view(
    text: str, finder: re.Pattern[str], decode: Callable[[str], str | None]
) -> View | None:
    """Lines holding an escape ``finder`` matches, each escape replaced by ``decode`` of it
    (``None`` keeps it as written)."""
    out = _Builder()
    line_hi = -1
    pos = 0
    for m in finder.finditer(text):
        decoded = decode(m.group())
        if decoded is None:
            continue
        if m.start() >= line_hi:  # a new line: close the previous one, open this one
            if line_hi != -1:
                out.keep(text, pos, line_hi)
                out.separate(line_hi)
            pos, line_hi = _line_bounds(text, m.start())
        out.keep(text, pos, m.start())
        if len(decoded) * 3 == len(m.group()) and m.group()[0] == "%":
            for k in range(len(decoded)):  # ASCII %XX: each character keeps its own escape
                out.put(decoded[k], m.start() + 3 * k, m.start() + 3 * k + 3)
        else:
            out.put(decoded, m.start(), m.end())
        pos = m.end()
    if line_hi != -1:
        out.keep(text, pos, line_hi)
    return out.build()


# --- percent-encoding ---------------------------------------------------------------------

_PERCENT_RE = re.compile(r"(?:%[0-9A-Fa-f]{2})++")


def _percent_decode(run: str) -> str | None:
    try:
        decoded = bytes.fromhex(run.replace("%", "")).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return decoded if decoded.isprintable() else None  # %02d stays a format, not a byte


def percent_view(text: str) -> View | None:
    if "%" not in text:
        return None
    return _escape_view(text, _PERCENT_RE, _percent_decode)


# --- HTML entities ------------------------------------------------------------------------

_ENTITY_RE = re.compile(r"&(?:#[0-9]{1,7}+;?|#[xX][0-9A-Fa-f]{1,6}+;?|[A-Za-z][A-Za-z0-9]{1,31}+;)")


def _entity_decode(entity: str) -> str | None:
    decoded = html.unescape(entity)
    return decoded if decoded != entity and decoded.isprintable() else None


def entity_view(text: str) -> View | None:
    if "&" not in text:
        return None
    return _escape_view(text, _ENTITY_RE, _entity_decode)


# --- Unicode: compatibility forms and invisible characters --------------------------------

# Format characters and fillers that render as nothing: zero-width space/joiners, marks,
# bidi controls, word joiner, BOM, soft hyphen, variation selectors, tags, Hangul fillers.
_INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f"
)
_INVISIBLE_RE = re.compile(f"[{_INVISIBLE}]")
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]")


def _non_ascii_lines(text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each line holding a non-ASCII character, in order."""
    pos = 0
    while True:
        m = _NON_ASCII_RE.search(text, pos)
        if m is None:
            return
        lo, hi = _line_bounds(text, m.start())
        yield lo, hi
        pos = hi + 1


def _unicode_view(text: str, *, strip: bool) -> View | None:
    if text.isascii():
        return None
    out = _Builder()
    for lo, hi in _non_ascii_lines(text):
        line = text[lo:hi]
        has_invisible = strip and _INVISIBLE_RE.search(line) is not None
        if not has_invisible and unicodedata.is_normalized("NFKC", line):
            continue
        if strip and not has_invisible:
            continue  # the compatibility view has this line already
        for i, c in enumerate(line, lo):
            if c.isascii():
                out.put(c, i, i + 1)
            elif not (strip and _INVISIBLE_RE.match(c)):
                out.put(unicodedata.normalize("NFKC", c), i, i + 1)
        out.separate(hi)
    return out.build()


def compat_view(text: str) -> View | None:
    return _unicode_view(text, strip=False)


def invisible_view(text: str) -> View | None:
    return _unicode_view(text, strip=True)


# --- base64 blobs of printable text -------------------------------------------------------

_B64_RE = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}+={0,2}(?![A-Za-z0-9+/_=-])")
_PRINTABLE_RE = re.compile(rb"[\x20-\x7e\t\r\n]+")
_B64_MAX = 65536  # longer runs are data (images, archives), not a line of text


def _b64_text(blob: str) -> str | None:
    body = blob.rstrip("=")
    if len(body) % 4 == 1 or len(body) > _B64_MAX:
        return None
    urlsafe = "-" in body or "_" in body
    if urlsafe and ("+" in body or "/" in body):
        return None
    padded = body + "=" * (-len(body) % 4)
    try:
        raw = (base64.urlsafe_b64decode if urlsafe else base64.b64decode)(padded)
    except (binascii.Error, ValueError):
        return None
    if not _PRINTABLE_RE.fullmatch(raw) or not any(65 <= b <= 122 for b in raw):
        return None
    return raw.decode("ascii")


def base64_view(text: str) -> View | None:
    out = _Builder()
    for m in _B64_RE.finditer(text):
        decoded = _b64_text(m.group())
        if decoded is not None:
            out.put(decoded, m.start(), m.end())  # a finding inside takes the whole blob
            out.separate(m.end())
    return out.build()


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _wide(s: str) -> str:
    """``s`` in full-width forms (U+FF01..U+FF5E), as a phone keyboard may type it."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


_T = fake("b62", 36)

DECODERS: tuple[Decoder, ...] = (
    Decoder(
        "unicode-compat",
        "compatibility forms",
        "full-width and other compatibility forms folded by NFKC (a full-width ghp_… or "
        "password=… reads as the ASCII one)",
        compat_view,
        (
            "«" + _wide("ghp_" + _T) + "»",
            _wide("password=") + "«" + _wide("hunter22") + "»",
            "token" + _wide(":") + "\u3000«" + _wide(fake("b62", 24, 2)) + "»",
        ),
        (
            _wide("password"),
            "\u30d1\u30b9\u30ef\u30fc\u30c9\u3092\u5909\u66f4\u3057\u307e\u3057\u305f",
            "\ufb01le size \u2264 10 MB, x\u00b2 + y\u00b2",
            _wide("Token:none"),
            "caf\u00e9 d\u00e9j\u00e0 vu",
        ),
    ),
    Decoder(
        "invisible-characters",
        "invisible characters",
        "zero-width spaces and joiners, soft hyphens, bidi controls, word joiners, BOMs and "
        "other invisible characters removed from inside a token (compatibility forms folded "
        "too)",
        invisible_view,
        (
            "«ghp_" + _T[:10] + "\u200b" + _T[10:] + "»",
            "GITHUB_TOKEN=«ghp_" + _T[:20] + "\u2060" + _T[20:] + "»",
            "«sk-proj-" + fake("b62", 20, 3) + "\u00ad" + fake("b62", 28, 4) + "»",
            "password\u200b=«hunter22»",
        ),
        (
            "👩\u200d💻 deployed the fix",
            "\ufeffREADME",
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
            "token\u200b is required",
        ),
    ),
    Decoder(
        "percent-encoding",
        "percent-encoding",
        "URL percent-encoding (%3A, %2F, %40, %3D, UTF-8 sequences), decoded on the lines "
        "that hold it; the encoded secret is replaced whole",
        percent_view,
        (
            "DATABASE_URL=postgres%3A%2F%2Fadmin%3A«s3cr3t%21pw»%40db.internal%2Fapp",
            "https://example.com/cb?state=x&q=password%3D«hunter22»",
            "next=%2Fhome%3Ftoken%3D«" + fake("b62", 32, 5) + "»",
            "«%67%68%70%5F" + "".join(f"%{ord(c):02X}" for c in _T) + "»",
        ),
        (
            "https://example.com/search?q=caf%C3%A9%20au%20lait",
            'print("%02d:%02d" % (h, m))',
            "width: 100%; height: 50%",
            "https://example.com/?q=password%20reset%20help",
            "GET /files/report%202024.pdf",
        ),
    ),
    Decoder(
        "html-entities",
        "HTML entities",
        "HTML character references (&#61;, &#x3D;, &quot;, &equals;, &colon;) decoded on the "
        "lines that hold them",
        entity_view,
        (
            "password&#61;«hunter22»",
            "&quot;api_key&quot;: &quot;«" + fake("b62", 32, 6) + "»&quot;",
            "token&#x3D;«" + fake("b62", 24, 7) + "»",
            "postgres&colon;//app&colon;«s3cr3t»&commat;db/app",
        ),
        (
            "Tom &amp; Jerry &lt;3",
            "&quot;password&quot;: &quot;&quot;",
            "a &#61; b",
            "&copy; 2024 &mdash; all rights reserved",
        ),
    ),
    Decoder(
        "base64",
        "base64 blob",
        "base64 and base64url blobs (16+ characters) that decode to printable ASCII text are "
        "scanned as text; a secret inside redacts the whole blob",
        base64_view,
        (
            "DB=«" + _b64("postgres://admin:s3cr3tPw@db.internal:5432/app") + "»",
            "echo «" + _b64("export GITHUB_TOKEN=ghp_" + _T) + "» | base64 -d | sh",
            "value: «" + _b64("password=hunter22") + "»",
            "«"
            + base64.urlsafe_b64encode(b"secret: ~~~" + fake("b62", 24).encode()).decode()
            + "»",
        ),
        (
            "config: " + _b64('{"name": "app", "replicas": 3}'),
            _b64("just a sentence about nothing secret"),
            "sha256-" + _b64("x" * 8) + " integrity",
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
            "the_quick_brown_fox_jumps_over",
            "AbstractBaseUserManagerMixin",
        ),
    ),
)
