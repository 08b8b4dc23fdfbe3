"""Values that cannot lie (issue 9.7) and scalar-path inputs (issue 9.6)."""

from __future__ import annotations

import math

import pytest

from brrm.backends.base import Completion
from brrm.backends.fake import FakeBackend
from brrm.compose import ScalarRewardJudge
from brrm.errors import ConfigError
from brrm.judges.brrm import BRRMConfig, digit_probability
from brrm.reward_models.bradley_terry import BradleyTerryRewardModel
from brrm.templates import ContextPolicy
from brrm.testing import brrm_judge, build_tiny_qwen3, build_tiny_tokenizer
from brrm.types import SamplingConfig, ScalarReward, Status, summarize_rewards


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"swap": "no"}, "swap must be true or false"),
    ({"max_retries": True}, "max_retries must be an integer"),
    ({"block_token_cap": 12.0}, "block_token_cap must be an integer"),
    ({"decoding": "fast"}, "decoding 'fast' is not valid"),
    ({"neutralize_markers": 1}, "neutralize_markers must be true or false"),
    ({"verdict": "last"}, "verdict 'last' is not valid; expected one of last_after_thinking, first, official"),
])
def test_brrm_config_refuses_values_that_mean_something_else(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        BRRMConfig(**kwargs)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"temperature": math.nan}, "temperature must be a finite number >= 0"),
    ({"temperature": math.inf}, "finite"),
    ({"top_p": 0}, r"top_p must be a finite number in \(0, 1\]"),
    ({"seed": True}, "seed must be an integer"),
    ({"max_new_tokens": 2.5}, "max_new_tokens must be an integer >= 1"),
])
def test_sampling_config_like_vllm_parameter_classes(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SamplingConfig(**kwargs)
    with pytest.raises(ConfigError, match="system_messages 'none' is not valid"):
        ContextPolicy(system_messages="none")


def test_probability_is_overflow_safe():
    p, logits = digit_probability(Completion((1,), "x", "stop", choice_logits=((1000.0, -1000.0),)))
    assert p == 1.0 and logits == (1000.0, -1000.0)
    p, _ = digit_probability(Completion((1,), "x", "stop", choice_logits=((-800.0, 800.0),)))
    assert p == 0.0
    p, _ = digit_probability(Completion((1,), "x", "stop"))
    assert math.isnan(p)  # not measured: NaN (null in JSON), never a default


def _scripted(tok, **cfg):
    t1 = ("[Quality Assessment Focus]\nLogical Reasoning\n[End of Quality Assessment Focus]\n\n"
          "[Quality Analysis for Response 1]\n- Critical Issues: None\n[End of Quality Analysis for Response 1]\n\n"
          "[Quality Analysis for Response 2]\n- Critical Issues: None\n[End of Quality Analysis for Response 2]")

    def script(prompt, request):
        if "Evaluation Hierarchies" in prompt.rsplit("<|im_start|>user", 1)[-1]:
            return "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]"
        return t1

    return brrm_judge(FakeBackend(tok, script, model_id="scripted"), BRRMConfig(decoding="faithful", **cfg))


def test_consistent_attempts_ids_and_hash_say_what_happened():
    tok = build_tiny_tokenizer()
    judge = _scripted(tok, shortcuts=True)  # identical pair below: decided without the model (faithful alone calls it)
    (one,) = judge.judge_pairs(["q"], ["a"], ["b"], ids=["p1"])
    assert one.consistent is None and one.to_dict()["consistent"] is None  # one order: not measured
    assert one.attempts == 1 and one.id == "p1"
    (both,) = judge.judge_pairs(["q"], ["a"], ["b"], ids=["p1"], swap=True)
    assert both.consistent is False and both.attempts == 1  # no retry happened, though two orders ran
    assert [s.id for s in both.sub_judgments] == ["p1", "p1"]
    (same,) = judge.judge_pairs(["q"], ["same"], ["same"], swap=True)
    assert same.attempts == 0 and math.isnan(same.p_a) and same.consistent is True
    other = FakeBackend(tok, lambda p, r: "x", model_id="scripted")
    other.tokenizer = build_tiny_tokenizer()
    other.tokenizer.chat_template = "{{ bos_token }}" + other.tokenizer.chat_template
    h1 = judge.info.template_hash
    h2 = brrm_judge(other, BRRMConfig(decoding="faithful")).info.template_hash
    assert h1 != h2  # the BR-RM template hash covers the chat template too
    assert one.provenance.template_hash == h1


def test_a_programming_error_raises_instead_of_becoming_an_item_status():
    tok = build_tiny_tokenizer()

    def buggy(prompt, request):
        raise TypeError("bug in the script")

    judge = brrm_judge(FakeBackend(tok, buggy), BRRMConfig(decoding="faithful"))
    with pytest.raises(TypeError, match="bug in the script"):
        judge.judge_pairs(["q"], ["a"], ["b"])


def test_a_chat_template_failure_is_that_records_invalid_input():
    model, tok = build_tiny_qwen3(sequence_classification=True)
    tok.chat_template = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not "
                         "supported') }}{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    judge = ScalarRewardJudge(BradleyTerryRewardModel.from_model(model, tok))
    bad = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why do cats purr?"}]
    good, failed = judge.score(["Why do cats purr?", bad], ["Contentment.", "Contentment."])
    assert good.ok and failed.status is Status.INVALID_INPUT and "System role not supported" in failed.reason


def test_history_reasoning_policy_applies_to_scalar_models_and_is_recorded():
    model, tok = build_tiny_qwen3(sequence_classification=True)
    conv = [{"role": "user", "content": "What is 12 squared?"}, {"role": "assistant", "content": "<think>12*12 = "
            "144</think>144"}, {"role": "user", "content": "And 13 squared?"}]
    strip = BradleyTerryRewardModel.from_model(model, tok)
    keep = BradleyTerryRewardModel.from_model(model, tok, strip_history_reasoning=False)
    s, k = tok.decode(list(strip.encode(conv, "169").ids)), tok.decode(list(keep.encode(conv, "169").ids))
    assert "144" in s and "12*12" not in s and "12*12 = 144" in k  # C14, both settings
    assert strip.provenance.policies["strip_history_reasoning"] is True
    assert keep.provenance.policies["strip_history_reasoning"] is False


def test_summaries_count_every_truncation():
    rewards = [ScalarReward(1.0, Status.OK, "3 conversation tokens dropped", truncated=True, truncated_tokens=3),
               ScalarReward(2.0, Status.OK),
               ScalarReward.failed(Status.TRUNCATED, "the response alone is over max_length", truncated=True)]
    s = summarize_rewards(rewards)
    assert s["truncated"] == 2 and s["scored"] == 2 and s["by_status"]["truncated"] == 1


def test_labels_resolve_to_the_token_the_model_emits_in_position():
    """A SentencePiece-style tokenizer ("▁" marks a word start) writes "Yes" differently alone and after text."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from brrm.constraints import label_token_id

    vocab = {"<unk>": 0, "▁Yes": 1, "Yes": 2, "▁No": 3, "No": 4, ":": 5, "▁": 6, "Judgement": 7, "▁Final": 8,
             "\n": 9, "▁Maybe": 10}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.normalizer = normalizers.Replace(" ", "▁")
    raw.pre_tokenizer = pre_tokenizers.Split(pattern=Regex("▁?[A-Za-z]+|:|\n|▁"), behavior="isolated")
    raw.decoder = decoders.Replace("▁", " ")
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")
    assert tok.encode("Yes", add_special_tokens=False) == [2] and tok.encode(" Yes", add_special_tokens=False) == [1]
    assert label_token_id(tok, " Yes", "Judgement:") == 1  # after the colon: "▁Yes"
    assert label_token_id(tok, "Yes", "\n") == 2  # at a line start: "Yes"
    with pytest.raises(ConfigError, match="not one token"):
        label_token_id(tok, " Yes No", ":")
