"""brrm judges as inspect_ai scorers (issue 21.4), run by inspect_ai's own ``eval()`` on its mock model
(``mockllm/model``), offline: a tiny real BR-RM judge end to end, a scripted failure (an unscored sample with its
reason, never a number) and a scalar reward."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest

import brrm
from brrm.backends.fake import FakeBackend
from brrm.testing import build_tiny_tokenizer, save_tiny_qwen3
from tests.serve_helpers import T1, is_turn2, ranking

# inspect_ai is imported by the fixture below, in the worker that runs these tests: collecting the file (every
# pytest-xdist worker collects the whole suite) costs nothing where the tests run elsewhere
pytestmark = pytest.mark.skipif(importlib.util.find_spec("inspect_ai") is None,
                                reason="inspect_ai not installed (pip install -e '.[inspect]')")
Task = eval = Sample = ModelOutput = ModelUsage = get_model = generate = brrm_pairwise = brrm_reward = Any
MOCK_OUTPUT = "Default output from mockllm/model"


@pytest.fixture(scope="module", autouse=True)
def _inspect_ai():
    """inspect_ai's names (and brrm's scorers, which import it) as this module's globals."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.solver import generate

    from brrm.integrations.inspect import brrm_pairwise, brrm_reward

    globals().update(Task=Task, eval=eval, Sample=Sample, ModelOutput=ModelOutput, ModelUsage=ModelUsage,
                     get_model=get_model, generate=generate, brrm_pairwise=brrm_pairwise, brrm_reward=brrm_reward)


def _samples() -> list[Any]:
    return [Sample(input="What is 2+2?", target="4", id="s1"), Sample(input="Name a colour.", target="Red.", id="s2")]


def _mock(text=MOCK_OUTPUT):
    """inspect's mock model answering ``text``, usage given (its own token count would fetch a tiktoken file)."""
    def output(*_args):
        return ModelOutput.from_content(model="mockllm", content=text).model_copy(
            update={"usage": ModelUsage(input_tokens=8, output_tokens=6, total_tokens=14)})

    return get_model("mockllm/model", custom_outputs=output)


def _eval(scorer, tmp_path, samples=None):
    (log,) = eval(Task(dataset=samples or _samples(), solver=generate(), scorer=scorer), model=_mock(),
                  log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    return log


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def test_pairwise_scorer_on_a_tiny_judge_through_inspect_eval(tmp_path, tiny_dir):
    log = _eval(brrm_pairwise(model=tiny_dir, kind="brrm", max_new_tokens=420, block_token_cap=8, thinking="off",
                              swap=True), tmp_path, _samples()[:1])  # one sample: four real generations
    direct = brrm.load(tiny_dir, kind="brrm", max_new_tokens=420, block_token_cap=8, thinking="off", swap=True)
    values = []
    samples = log.samples  # judged directly: the scorer adds nothing to the judge's judgment
    direct_judgments = direct.judge_pairs([s.input for s in samples], [MOCK_OUTPUT] * len(samples),
                                          [s.target for s in samples], ids=[str(s.id) for s in samples])
    for sample, j in zip(samples, direct_judgments, strict=True):
        score = sample.scores["brrm_pairwise"]
        assert score.value == {"A": 1.0, "tie": 0.5, "B": 0.0}[j.winner.value] and score.answer == j.winner.value
        assert score.metadata["status"] == "ok" and score.metadata["p_a"] == pytest.approx(j.p_a)
        assert score.metadata["provenance"]["seed"] == j.provenance.seed
        assert score.metadata["judge"]["model"] == tiny_dir and score.metadata["consistent"] == j.consistent
        assert "dimensions: " + ", ".join(j.dimensions) in score.explanation
        assert f"analysis of the output: {j.analysis_a}" in score.explanation
        values.append(score.value)
    metrics = log.results.scores[0].metrics
    assert len(values) == 1 and metrics["mean"].value == pytest.approx(values[0])


def _scripted(verdict):
    def script(prompt, request):
        return (verdict if "colour" in prompt else ranking(1)) if is_turn2(prompt) else T1

    return brrm.load(kind="brrm", backend=FakeBackend(build_tiny_tokenizer(), script), decoding="faithful")


def test_a_failed_judgment_is_an_unscored_sample_with_its_reason(tmp_path):
    log = _eval(brrm_pairwise(_scripted("I cannot decide.")), tmp_path)
    ok, failed = (s.scores["brrm_pairwise"] for s in log.samples)
    assert ok.value == 1.0 and ok.answer == "A"
    assert math.isnan(failed.value) and failed.reason == "parse_failure"
    assert failed.metadata["status"] == "parse_failure" and "boxed" in failed.explanation
    assert log.results.scores[0].metrics["mean"].value == 1.0  # the failure is out of the mean


def test_reference_model_output_and_reward_scorer(tmp_path):
    judge = _scripted(ranking(2))
    log = _eval(brrm_pairwise(judge, reference_model=_mock("A reference answer.")), tmp_path)
    assert [s.scores["brrm_pairwise"].value for s in log.samples] == [1.0, 0.0]
    shown = judge.model.backend.prompts[0]
    assert "A reference answer." in shown and MOCK_OUTPUT in shown and "\n4\n" not in shown  # not the target
    bt = brrm.load(kind="bt", backend=FakeBackend(build_tiny_tokenizer(), score_script=lambda p: len(p) / 100))
    log = _eval(brrm_reward(bt), tmp_path / "r")
    for sample in log.samples:
        score = sample.scores["brrm_reward"]
        expected = bt.score_one(sample.input, MOCK_OUTPUT)
        assert score.value == pytest.approx(expected.reward) and score.metadata["status"] == "ok"
