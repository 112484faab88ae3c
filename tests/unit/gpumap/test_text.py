"""Quoting user values in messages: what each helper writes, and that it stays bounded and escaped whatever it is
given."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_scheduling import text


@pytest.mark.parametrize(
    "value, shown",
    [
        ("node1", "'node1'"),
        ("a\nb", "'a\\nb'"),
        ("\x00", "'\\x00'"),
        ("\u00a0", "'\\xa0'"),
        ("x" * 61, "'" + "x" * 60 + "'…"),
        (7, "'7'"),
        (True, "'True'"),
        (None, "'None'"),
        (1.5, "'1.5'"),
        (10**400, "'<an integer of 1329 bits>'"),
        ([1], "'<list>'"),
        ({"a": 1}, "'<dict>'"),
    ],
)
def test_show(value, shown):
    assert text.show(value) == shown


def test_show_takes_its_limit():
    assert text.show("abcdef", 3) == "'abc'…"


@given(st.one_of(st.text(max_size=500), st.integers(), st.none(), st.lists(st.integers())))
def test_show_is_bounded_and_printable_ascii(value):
    shown = text.show(value)
    assert len(shown) <= 3 * text.SHOWN_CHARS + 3
    assert all(" " <= c <= "~" for c in shown.removesuffix("…"))


@pytest.mark.parametrize(
    "value, written",
    [
        ("node-1.a_b", "node-1.a_b"),
        ("Node 1", "'Node 1'"),
        ("", "''"),
        ("x" * 253, "x" * 253),
        ("x" * 254, "'" + "x" * 60 + "'…"),
        (3, "'3'"),  # not a string: quoted
    ],
)
def test_plain(value, written):
    assert text.plain(value) == written


@pytest.mark.parametrize(
    "value, name",
    [
        (None, "null"),
        (False, "a boolean"),
        (0, "a number"),
        (0.5, "a number"),
        ("", "a string"),
        ([], "an array"),
        ({}, "an object"),
        ((), "a tuple"),
    ],
)
def test_json_type(value, name):
    assert text.json_type(value) == name


@pytest.mark.parametrize(
    "char, described",
    [
        ("\u00a0", "U+00A0 (NO-BREAK SPACE)"),
        ("\x00", "U+0000 (control character)"),
        ("\ue000", "U+E000 (private use character)"),
    ],
)
def test_describe_char(char, described):
    assert text.describe_char(char) == described
