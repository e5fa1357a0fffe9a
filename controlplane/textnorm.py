"""Text as a reader sees it: the one normaliser for every check that matches what text says.

The instruction flags (`controlplane.services.instructions`) and the provenance check that
keeps private notes out of what others read (`automemory.services.provenance`) both read
text through this module, so a character that hides a word from one hides it from neither:

- every Unicode default-ignorable code point (`DEFAULT_IGNORABLE`, the `Default_Ignorable_
  Code_Point` property of DerivedCoreProperties.txt: soft hyphen, zero-width and bidi
  controls, invisible operators, variation selectors, the Mongolian free variation
  selectors, U+E0000-E0FFF...) is removed, and so are the interlinear annotation controls
  U+FFF9-FFFB, which no renderer shows either;
- every Unicode space (`Zs`) and blank (the Hangul fillers U+115F, U+1160, U+3164, U+FFA0
  and the braille blank U+2800, which render as empty cells) reads as a space. The Hangul
  fillers are default-ignorable too; they become spaces, not nothing, since one put where a
  space goes ("ignore\\u3164previous") separates two words on screen;
- every line break (CR, LF, VT, FF, NEL, U+2028, U+2029) reads as a line break (`\\n`);
- Unicode tag characters (U+E0020-E007E), which no renderer shows but a model reads, read as
  the ASCII they encode, and `hidden_text(text)` says the text carries such a payload. The
  tags of an emoji tag sequence (a subdivision flag such as England's: U+1F3F4, the tags
  `gbeng`, U+E007F) are part of an emoji and are dropped, never flagged.

`text_as_read` gives the reading (its length may differ); `words_with_spans` gives its words
with their place in the original text, for a caller that cuts the original. Both are linear:
one `str.translate` and one regular-expression scan, skipped when the text holds nothing
unusual.
"""

import re
import unicodedata
from collections.abc import Iterator
from functools import cache

# Default_Ignorable_Code_Point, DerivedCoreProperties.txt (unchanged since Unicode 9 and in
# 16.0). `tests/controlplane/test_textnorm.py` checks it against the `regex` package's Unicode
# data and against the rule that derives it from the general categories.
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors, vowel separator
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner, LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated formats
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xFEFF, 0xFEFF),  # zero-width no-break space (byte order mark)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # reserved
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE0FFF),  # tags, variation selectors 17-256, reserved
)
# Removed as well although not default-ignorable: interlinear annotation controls.
ALSO_REMOVED: tuple[tuple[int, int], ...] = ((0xFFF9, 0xFFFB),)
# The space separators (general category `Zs`).
SPACES: frozenset[int] = frozenset(
    {0x20, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000}
)
# Blanks that are not `Zs` but show as an empty cell.
BLANKS_NOT_ZS: frozenset[int] = frozenset({0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800})
LINE_BREAKS: frozenset[int] = frozenset({0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0x2028, 0x2029})
TAG_ASCII = range(0xE0020, 0xE007F)  # TAG SPACE .. TAG TILDE, read as U+0020 .. U+007E
TAG_BLOCK = (0xE0000, 0xE007F)
HIDDEN_RUN = 4  # this many invisible characters in a row carry data, not formatting

_JOINER = "\u200b"  # what an invisible character becomes where lengths must be kept


def _ranges_class(ranges) -> str:
    return "".join(f"{chr(low)}-{chr(high)}" for low, high in ranges)


def _is_invisible(code: int) -> bool:
    return any(low <= code <= high for low, high in (*DEFAULT_IGNORABLE, *ALSO_REMOVED))


@cache
def _tables() -> tuple[dict[int, str | None], dict[int, str]]:
    """The reading (`text_as_read`) and its same-length twin (`words_with_spans`)."""
    reading: dict[int, str | None] = {}
    same_length: dict[int, str] = {}
    for low, high in (*DEFAULT_IGNORABLE, *ALSO_REMOVED):
        for code in range(low, high + 1):
            reading[code] = None
            same_length[code] = _JOINER
    for code in SPACES | BLANKS_NOT_ZS:
        reading[code] = same_length[code] = " "
    for code in LINE_BREAKS:
        reading[code] = "\n"
        same_length[code] = "\n"
    for code in TAG_ASCII:
        reading[code] = same_length[code] = chr(code - 0xE0000)
    del reading[0x20], same_length[0x20], reading[0x0A], same_length[0x0A]
    return reading, same_length


# Anything `text_as_read` changes: the fast path skips texts without it.
_UNUSUAL = re.compile(
    "[\r\x0b\x0c\x85\u2028\u2029\u2800\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
    f"{_ranges_class((*DEFAULT_IGNORABLE, *ALSO_REMOVED))}]"
)
_TAGS = re.compile(f"[{_ranges_class([TAG_BLOCK])}]")
# An emoji tag sequence (UTS #51): an emoji, its tags (digits and small letters), CANCEL TAG.
_EMOJI_TAG_SEQUENCE = re.compile(
    "([\u2600-\u27bf\U0001f000-\U0001faff]\ufe0f?)"
    "([\U000e0030-\U000e0039\U000e0061-\U000e007a]{1,32}\U000e007f)"
)
_INVISIBLE_RUN = re.compile(
    f"[{_ranges_class((*DEFAULT_IGNORABLE, *ALSO_REMOVED))}]{{{HIDDEN_RUN},}}"
)


def _without_emoji_tags(text: str, *, keep_length: bool) -> str:
    if keep_length:
        return _EMOJI_TAG_SEQUENCE.sub(lambda m: m[1] + _JOINER * len(m[2]), text)
    return _EMOJI_TAG_SEQUENCE.sub(r"\1", text)


def text_as_read(text: str) -> str:
    """`text` as it reads: invisible characters removed, spaces and blanks as a space, line
    breaks as `\\n` (CRLF as one), tag characters as the ASCII they encode. Not case-folded
    nor NFKC-normalised: callers that match add what they need."""
    if not _UNUSUAL.search(text):
        return text
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if _TAGS.search(text):
        text = _without_emoji_tags(text, keep_length=False)
    return text.translate(_tables()[0])


def hidden_text(text: str) -> bool:
    """Whether `text` carries something a reader cannot see but a model reads: tag
    characters outside an emoji tag sequence, or a run of `HIDDEN_RUN` invisible characters
    (zero-width binary, stacked variation selectors). Emoji need at most two in a row (the
    variation selector and ZWJ of "\u2764\ufe0f\u200d\U0001f525")."""
    if not _UNUSUAL.search(text):
        return False
    if _TAGS.search(text):
        text = _without_emoji_tags(text, keep_length=False)
        if _TAGS.search(text):
            return True
    return _INVISIBLE_RUN.search(text) is not None


_ASCII_WORD = re.compile(r"\w+", re.ASCII)


@cache
def _word_pattern() -> re.Pattern:
    """A word of the same-length reading: `\\w` characters and the combining marks and
    invisible characters inside them, starting where such a run starts (so that a long run
    with no letter is scanned once, not once per position)."""
    marks = []
    for code in range(0x30000):
        if unicodedata.category(chr(code)) in ("Mn", "Mc", "Me") and not _is_invisible(code):
            marks.append(chr(code))
    inner = "".join(marks) + _JOINER
    inner_class = re.escape(inner)
    return re.compile(rf"(?<![\w{inner_class}])[{inner_class}]*\w[\w{inner_class}]*")


def _word_value(raw: str) -> str:
    if raw.isascii():
        return raw.lower()
    return unicodedata.normalize("NFKC", raw.replace(_JOINER, "")).casefold()


def words_with_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, word) of every word of `text` as read: `start:end` spans the original
    text, `word` is case-folded and NFKC-normalised with the invisible characters inside it
    removed, so "pa\\u200bger", full-width "pager" and "PAGER" are one word and "pager\\u3164notes"
    is two."""
    if text.isascii():
        for match in _ASCII_WORD.finditer(text):
            yield match.start(), match.end(), match.group().lower()
        return
    reading = text
    if _UNUSUAL.search(text):
        if _TAGS.search(text):
            reading = _without_emoji_tags(reading, keep_length=True)
        reading = reading.translate(_tables()[1])
    for match in _word_pattern().finditer(reading):
        yield match.start(), match.end(), _word_value(match.group())
