"""Every decoder against its own samples, as every rule is.

A true positive marks with ``«…»`` what must be replaced in the ORIGINAL text (the
encoded secret whole, a base64 blob whole); a false positive must come out unchanged,
with no finding at all.
"""

from __future__ import annotations

import re

import pytest

from automemory.services.redactor import DECODERS, REDACTED, Decoder, find_secrets, redact

_MARKED = re.compile("«([^»]*)»")


def _cases(kind: str) -> list[tuple[Decoder, str]]:
    return [
        (decoder, sample)
        for decoder in DECODERS
        for sample in (decoder.true_positives if kind == "tp" else decoder.false_positives)
    ]


def _id(case: tuple[Decoder, str]) -> str:
    decoder, sample = case
    return f"{decoder.id}:{sample[:40]}"


@pytest.mark.parametrize("case", _cases("tp"), ids=_id)
def test_decoder_sees_its_true_positive(case: tuple[Decoder, str]) -> None:
    decoder, sample = case
    text = sample.replace("«", "").replace("»", "")
    out = redact(text)
    assert out == _MARKED.sub(REDACTED, sample)
    assert redact(out) == out, "redacting twice must change nothing"
    view = decoder.view(text)
    assert view is not None, "the decoder itself must see the sample"
    for secret in _MARKED.findall(sample):
        assert secret not in out


@pytest.mark.parametrize("case", _cases("tp"), ids=_id)
def test_decoder_finds_its_true_positive_in_a_long_text(case: tuple[Decoder, str]) -> None:
    _decoder, sample = case
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n" * 160
    text = sample.replace("«", "").replace("»", "")
    assert (
        redact(f"{filler}{text}\n{filler}") == f"{filler}{_MARKED.sub(REDACTED, sample)}\n{filler}"
    )


@pytest.mark.parametrize("case", _cases("fp"), ids=_id)
def test_decoder_keeps_its_false_positive(case: tuple[Decoder, str]) -> None:
    _decoder, sample = case
    assert find_secrets(sample, merge=False) == []
    assert redact(sample) == sample


@pytest.mark.parametrize("decoder", DECODERS, ids=lambda d: d.id)
def test_decoder_is_documented_data_with_its_own_proof(decoder: Decoder) -> None:
    assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", decoder.id)
    assert decoder.label and decoder.description
    assert len(decoder.true_positives) >= 3 and len(decoder.false_positives) >= 3
    for sample in decoder.true_positives:
        assert _MARKED.search(sample), sample
