"""``faithful`` parses turn 2 with the released evaluation's parser and scores by its rule (issue 32, item 2),
checked on a corpus of answer shapes against the official logic, re-stated here from YzjiaoNvd/BR-RM @ d20a4e0
(Apache-2.0) only to check brrm against it:

* ``nemo_rl/environments/brrm_environment.py`` ``parse_scoring_response``: ``ranking_pattern`` (the pattern
  of :func:`official` below), ``re.search(ranking_pattern, assistant_response, re.DOTALL)``,
  ``preference_content = ranking_match.group(1).strip()``, ``if ',' in
  preference_content: return False, None, …``, ``return True, preference_content, ""``;
* ``examples/run_eval_brrm.py``: ``if is_valid and ranking: result["predicted_ranking"] = int(ranking)`` (an
  ``int`` failure raises into the batch's ``except``: ``"scoring_parse_success": False``), and
  ``calculate_metrics``: a result counts when ``scoring_parse_success`` and ``"predicted_ranking" in result``,
  and is correct when ``pred_pref == true_pref``.
"""

from __future__ import annotations

import re

import pytest

from brrm.backends.fake import FakeBackend
from brrm.judges.brrm import BRRMConfig
from brrm.testing import brrm_judge, build_tiny_tokenizer
from brrm.types import Status, Verdict

T1 = ("[Quality Assessment Focus]\nInformation Accuracy\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None\n[End of Quality Analysis for Response 1]\n\n"
      "[Quality Analysis for Response 2]\n- Critical Issues: None\n[End of Quality Analysis for Response 2]")


def block(value: str) -> str:
    return f"[The Begin of Ranking Score]\n\\boxed{{{value}}}\n[The End of Ranking Score]"


CORPUS = {
    "one": block("1"), "two": block("2"), "three": block("3"), "zero": block("0"), "spaced": block(" 2 "),
    "signed": block("+1"), "comma": block("1,2"), "words": block("1 or 2"), "response": block("Response 1"),
    "blank": block(" "), "none": "I prefer the second one.", "two blocks": block("2") + "\n\n" + block("1"),
    "inside thinking": f"<think>maybe {block('1')}</think>\n\n{block('2')}",
    "unclosed thinking": f"<think>I think {block('2')} and then",
    "boxed elsewhere": "\\boxed{1}\n\n" + block("2"),
}


def official(t2: str) -> int | None:
    """The ranking the official run records (``predicted_ranking``), or None where it records none."""
    ranking_pattern = r'\[The Begin of Ranking Score\]\s*\n\s*\\boxed\{([^}]+)\}\s*\n\s*\[The End of Ranking Score\]'
    ranking_match = re.search(ranking_pattern, t2, re.DOTALL)
    if not ranking_match:
        return None
    preference_content = ranking_match.group(1).strip()
    if ',' in preference_content:
        return None
    if not preference_content:  # `if is_valid and ranking:`
        return None
    try:
        return int(preference_content)
    except ValueError:  # raised into the batch's except: scoring_parse_success False
        return None


@pytest.fixture(scope="module")
def judge():
    def script(prompt, request):
        last = prompt.rsplit("<|im_start|>user", 1)[-1]
        if "Evaluation Hierarchies" not in last:
            return T1
        return CORPUS[prompt.split("[The Begin of Response 1]\n", 1)[1].split("\n[The End of Response 1]", 1)[0]]

    return brrm_judge(FakeBackend(build_tiny_tokenizer(), script), BRRMConfig(decoding="faithful"))


@pytest.mark.parametrize("shape", list(CORPUS))
def test_every_answer_shape_parses_and_scores_as_the_official_code(judge, shape):
    (r,) = judge.judge_pairs(["Which is better?"], [shape], ["the other"])
    pred = official(CORPUS[shape])
    assert (r.status is Status.OK) == (pred is not None), (shape, r.reason)
    for gold, verdict in ((1, Verdict.A), (2, Verdict.B)):  # correct exactly when the official run counts it so
        assert (r.status is Status.OK and r.winner is verdict) == (pred == gold), (shape, gold, r.winner)
    if pred is not None and pred not in (1, 2):
        assert r.winner is Verdict.TIE and f"\\boxed{{{pred}}} names neither response" in r.reason


def test_the_corpus_covers_each_official_outcome():
    outcomes = {official(t) for t in CORPUS.values()}
    assert {None, 1, 2, 3, 0} <= outcomes
