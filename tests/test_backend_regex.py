"""Regex continuation (Brzozowski derivatives) used by the vLLM/OpenAI backends past a pattern's cap."""

from __future__ import annotations

import random
import re

import pytest

from brrm.backends.blackbox.regex import EMPTY, continuation, matches, parse, to_regex, viable
from brrm.judges.brrm_format import _dims_regex

REGEXES = [r"\nReason: [^\n\[]+\n\[end\]", r"[^\[]+\n\[", r"\n{0,2}Final Judgement:", r"(ab|a)*c?\d{2,3}",
           r"x.y[a-c\]]+", r"[\w ]{1,4}!", _dims_regex() + r"\n\["]
ALPHABET = "abcxy\n[]Reason: end0123\t!Final Judgement:Information Accuracy, Logical"


@pytest.mark.parametrize("regex", REGEXES)
def test_matches_agrees_with_re_and_round_trips(regex):
    rng = random.Random(0)
    printed = to_regex(parse(regex))
    for _ in range(1500):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
        want = re.fullmatch(regex, s) is not None
        assert matches(regex, s) == want and (re.fullmatch(printed, s) is not None) == want, (regex, s)


@pytest.mark.parametrize("regex", REGEXES)
def test_continuation_is_exactly_what_may_follow(regex):
    rng = random.Random(1)
    for _ in range(300):
        head = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6)))
        tail = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6)))
        rest = continuation(regex, head)
        got = rest != EMPTY and re.fullmatch(to_regex(rest), tail) is not None
        assert got == (re.fullmatch(regex, head + tail) is not None), (regex, head, tail)


def test_viable_prefixes_and_unsupported_syntax():
    assert viable(r"\nReason: [^\n\[]+\n\[end\]", "\nReas") and not viable(r"[^\[]+\n\[", "[")
    assert to_regex(continuation(r"\nReason: [^\n\[]+\n\[end\]", "\nReason: ok\n[e")) == r"nd\]"
    for bad in (r"(?=1)[12]", r"^ab", r"(a)\1", r"(?i)ab"):
        with pytest.raises(ValueError):
            parse(bad)
