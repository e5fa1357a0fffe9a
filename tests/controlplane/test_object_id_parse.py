"""`object_id_parse`: the one way a path segment becomes a database id (else 404)."""

import pytest

from controlplane.access import object_id_parse


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", 1),
        (42, 42),
        ("007", 7),
        (str(2**63 - 1), 2**63 - 1),
    ],
)
def test_ascii_digits_in_a_key_range_are_an_id(value, expected):
    assert object_id_parse(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "0",
        "-1",
        "+3",
        " 3",
        "3 ",
        "1.0",
        "1e3",
        "",
        "abc",
        "\u0661\u0662",
        "\uff13",
        "²",
        str(2**63),
        "9" * 20,
        None,
        "0x10",
    ],
)
def test_anything_else_is_no_id(value):
    assert object_id_parse(value) is None


def test_the_console_and_the_api_share_it():
    from automemory.console import memory_views

    assert memory_views.object_id_parse is object_id_parse
