"""The proxy's normal form of text: the same as the regular expression it replaced, on every
character and on random mixtures of them (ids and digests made before must not move)."""

from __future__ import annotations

import re
import sys

from hypothesis import given
from hypothesis import strategies as st

from proxy.text import one_spaced, unspaced

_WHITESPACE = re.compile(r"\s+")
SPACES = [chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace()]
mixtures = st.text(alphabet=st.sampled_from([*SPACES, "a", "é", " ", "\n"]), max_size=40)


def test_every_whitespace_character_the_regex_knows_is_collapsed():
    for code in range(sys.maxunicode + 1):
        text = f"a{chr(code)}{chr(code)}b"
        assert one_spaced(text) == _WHITESPACE.sub(" ", text).strip(), hex(code)


def test_runs_of_whitespace_become_one_space_and_the_ends_none():
    assert one_spaced("  Book\t\tme\r\n a\u00a0flight  ") == "Book me a flight"


@given(mixtures)
def test_one_spaced_is_the_regex_form(text):
    assert one_spaced(text) == _WHITESPACE.sub(" ", text).strip()


@given(mixtures)
def test_unspaced_is_the_regex_form(text):
    assert unspaced(text) == _WHITESPACE.sub("", text)
