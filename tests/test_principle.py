"""RLBFF principle judges on a tiny real Qwen3 (tier 1); the exact Qwen3 tokenizer (tier 2) for token ids."""

from __future__ import annotations

import math

import pytest
import torch

from brrm.backends.transformers import TransformersBackend
from brrm.errors import ConfigError, TemplateError
from brrm.judges.principle import PrincipleConfig, PrincipleJudge, judgement_token_ids, resolve_format
from brrm.testing import build_tiny_qwen3, build_tiny_tokenizer, qwen3_chat_template
from brrm.types import SamplingConfig, Status

USER_LINE = '{%- if (message.role == "user") or (message.role == "system" and not loop.first) %}'


def principle_template() -> str:
    """The stock Qwen3 template plus ``principle`` turns rendered like user turns (as GenRM needs)."""
    template = qwen3_chat_template()
    assert USER_LINE in template
    return template.replace(
        USER_LINE,
        USER_LINE.replace(
            '(message.role == "user")', '(message.role == "user") or (message.role == "principle")'
        ),
    )


class RecordingBackend(TransformersBackend):
    """The real transformers backend, keeping each generate call's requests and completions."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def generate(self, requests, **kwargs):
        out = super().generate(requests, **kwargs)
        self.calls.append((list(requests), out))
        return out


@pytest.fixture(scope="module")
def causal():
    model, tok = build_tiny_qwen3(seed=3)
    tok.chat_template = principle_template()
    return model, tok


def _judge(causal, fmt, **sampling):
    model, tok = causal
    backend = RecordingBackend(model, tok, model_id="tiny-principle")
    config = PrincipleConfig(format=fmt, sampling=SamplingConfig(temperature=0.0, **sampling))
    return PrincipleJudge(backend, config), backend


def _logit_diff(model, ids, yes, no):
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0, -1].float()
    return (logits[yes] - logits[no]).item()


def test_qwen_judgement_tokens_are_7414_and_2308(qwen3_tokenizer):
    assert judgement_token_ids(qwen3_tokenizer, "qwen3_genrm") == (7414, 2308)
    assert qwen3_tokenizer.convert_ids_to_tokens([7414, 2308]) == ["ĠYes", "ĠNo"]
    assert judgement_token_ids(qwen3_tokenizer, "llama_reward") == (9454, 2753)  # "Yes", "No"


def test_construction_checks_ids_with_the_exact_qwen3_tokenizer():
    from brrm.testing import build_qwen3_tokenizer

    tok = build_qwen3_tokenizer()
    tok.chat_template = principle_template()
    model, _ = build_tiny_qwen3(tok, seed=0)
    judge = PrincipleJudge(
        TransformersBackend(model, tok, model_id="nvidia/Qwen3-Nemotron-32B-GenRM-Principle")
    )
    assert judge.format == "qwen3_genrm" and judge.option_ids == (7414, 2308)


def test_split_judgement_tokens_are_a_config_error():
    from tokenizers import models, pre_tokenizers, trainers

    from brrm.testing import TINY_ADDED_TOKENS, _add_tokens, _qwen_pipeline, _wrap

    raw = _qwen_pipeline(models.BPE(fuse_unk=False, byte_fallback=False))
    raw.train_from_iterator(
        ["plain bytes"],
        trainers.BpeTrainer(
            vocab_size=260, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        ),
    )
    _add_tokens(raw, TINY_ADDED_TOKENS)
    tok = _wrap(raw, 4096)
    tok.chat_template = principle_template()
    assert len(tok.encode(" Yes", add_special_tokens=False)) > 1
    model, _ = build_tiny_qwen3(tok)
    for fmt in ("qwen3_genrm", "llama_reward"):
        with pytest.raises(ConfigError, match="single token"):
            PrincipleJudge(TransformersBackend(model, tok), PrincipleConfig(format=fmt))


def test_template_without_principle_role_fails_naming_it():
    model, tok = build_tiny_qwen3(seed=3)  # stock Qwen3 template: drops unknown roles silently
    with pytest.raises(TemplateError, match=r"chat template of .*sha256 [0-9a-f]{16}.*role 'principle'"):
        PrincipleJudge(TransformersBackend(model, tok, model_id="x"), PrincipleConfig(format="qwen3_genrm"))


def test_qwen_genrm_reward_is_read_at_the_judgement_step(causal):
    model, tok = causal
    judge, backend = _judge(causal, "qwen3_genrm", max_new_tokens_per_turn=40)
    convs = [
        "What is 2+2?",
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "Name a colour."},
        ],
    ]
    results = judge.score(convs, ["4", "Blue."], principle="The response is correct.", ids=["a", "b"])
    ((requests, completions),) = backend.calls
    yes, no = judge.option_ids
    for r, req, comp in zip(results, requests, completions, strict=True):
        assert r.ok and r.principle == "The response is correct." and r.id in ("a", "b")
        prompt = tok.decode(req.prompt_ids)
        assert "<|im_start|>principle\nThe response is correct.<|im_end|>\n" in prompt
        assert prompt.endswith(
            "<|im_start|>principle\nThe response is correct.<|im_end|>\n<|im_start|>assistant\n"
        )
        assert "</think>" in r.text and r.text.rsplit("</think>", 1)[1].lstrip("\n").startswith(
            "Final Judgement:"
        )
        assert r.text.endswith(("Final Judgement: Yes", "Final Judgement: No"))
        step = len(comp.token_ids) - 1  # the judgement token is the last generated one (end of turn removed)
        assert comp.token_ids[step] in (yes, no)
        expected = _logit_diff(model, req.prompt_ids + comp.token_ids[:step], yes, no)
        assert r.reward == pytest.approx(expected, abs=1e-4)
        assert r.logits[0] - r.logits[1] == pytest.approx(r.reward)
        assert r.provenance.decoding == "constrained" and r.provenance.policies["format"] == "qwen3_genrm"
    assert results[0].reward != results[1].reward


def test_llama_reward_is_the_first_token_logit_difference(causal):
    model, tok = causal
    judge, backend = _judge(causal, "llama_reward")
    (r,) = judge.score(["What is 1+1?"], ["1+1=2"], principle="The answer is correct.")
    ((requests, completions),) = backend.calls
    prompt = tok.decode(requests[0].prompt_ids)
    assert "The answer is correct." in prompt and "Answer only Yes or No" in prompt
    assert prompt.index("1+1=2") < prompt.index("Answer only Yes or No")
    assert prompt.endswith("<|im_start|>assistant\n")
    assert r.text in ("Yes", "No") and len(completions[0].token_ids) == 1
    yes, no = judge.option_ids
    assert r.reward == pytest.approx(_logit_diff(model, requests[0].prompt_ids, yes, no), abs=1e-5)


@pytest.mark.parametrize("fmt", ["llama_reward", "qwen3_genrm"])
def test_many_principles_per_response_in_one_batch(causal, fmt):
    judge, backend = _judge(causal, fmt, max_new_tokens_per_turn=40)
    principles = ["The response is correct.", "The response is concise.", "The response is polite."]
    grid = judge.score_principles(["What is 2+2?", "Name a colour."], ["4", "Blue."], principles)
    assert len(backend.calls) == 1 and len(backend.calls[0][0]) == 6
    assert [[r.principle for r in row] for row in grid] == [principles, principles]
    for i, (conv, resp) in enumerate((("What is 2+2?", "4"), ("Name a colour.", "Blue."))):
        for k, p in enumerate(principles):
            alone = judge.score([conv], [resp], principle=p)[0]
            assert grid[i][k].ok and grid[i][k].reward == pytest.approx(alone.reward, abs=1e-5)
    per_item = judge.score(["What is 2+2?"] * 3, ["4"] * 3, principle=principles)
    assert [r.principle for r in per_item] == principles
    assert len({round(r.reward, 6) for r in grid[0]}) == 3


def test_principle_is_required_and_inputs_are_checked_before_any_model_call(causal):
    judge, backend = _judge(causal, "llama_reward")
    with pytest.raises(ConfigError, match="principle is required"):
        judge.score(["hi"], ["hello"])
    with pytest.raises(ConfigError, match="non-empty string"):
        judge.score(["hi"], ["hello"], principle="  ")
    with pytest.raises(ConfigError, match="missing"):
        judge.score(["hi", "yo"], ["hello", None], principle="polite")
    with pytest.raises(ConfigError, match="same length"):
        judge.score(["hi", "yo"], ["hello", "hey"], principle=["polite"])
    with pytest.raises(ConfigError, match="ends with role 'assistant'"):
        judge.score(
            [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]],
            ["y"],
            principle="polite",
        )
    assert backend.calls == []


def test_empty_thinking_only_and_over_long_inputs(causal):
    judge, _ = _judge(causal, "qwen3_genrm", max_new_tokens_per_turn=40, max_total_tokens=120)
    empty, thought, long, ok = judge.score(
        ["Say something kind."] * 3 + ["Say hi."],
        ["", "<think>hmm</think>", "word " * 200, "<think>plan</think>Hi!"],
        principle="The response is kind.",
    )
    assert empty.status is Status.EMPTY and math.isnan(empty.reward)
    assert thought.status is Status.EMPTY and thought.thinking_stripped
    assert long.status is Status.TRUNCATED and "120-token limit" in long.reason and long.truncated
    assert ok.ok and ok.thinking_stripped


def test_non_finite_judgement_logits_are_backend_errors():
    model, tok = build_tiny_qwen3(seed=5)
    tok.chat_template = principle_template()
    with torch.no_grad():
        model.lm_head.weight[tok.convert_tokens_to_ids("Yes")] = float("nan")
    judge = PrincipleJudge(TransformersBackend(model, tok), PrincipleConfig(format="llama_reward"))
    (r,) = judge.score(["hi"], ["hello"], principle="polite")
    assert r.status is Status.BACKEND_ERROR and math.isnan(r.reward) and r.reason


def test_formats_resolve_from_model_ids():
    assert resolve_format("auto", "nvidia/Qwen3-Nemotron-32B-GenRM-Principle") == "qwen3_genrm"
    assert resolve_format("auto", "nvidia/Llama-3.3-Nemotron-70B-Reward-Principle") == "llama_reward"
    with pytest.raises(ConfigError, match="cannot tell"):
        resolve_format("auto", "tiny")
    with pytest.raises(ConfigError, match="placeholder"):
        PrincipleConfig(question="Is it good?")
    assert build_tiny_tokenizer().encode(" Yes", add_special_tokens=False) != []


def test_principle_judge_behind_the_one_interface(causal):
    from brrm.compose import ScalarRewardJudge

    judge, _ = _judge(causal, "llama_reward")
    unified = ScalarRewardJudge(judge, principle="The answer is correct.")
    (pair,) = unified.judge_pairs(["What is 2+2?"], ["4"], ["5"])
    a, b = judge.score(["What is 2+2?"] * 2, ["4", "5"], principle="The answer is correct.")
    assert pair.ok and pair.p_a == pytest.approx(1 / (1 + math.exp(b.reward - a.reward)), abs=1e-6)
    group = unified.rank("What is 2+2?", ["4", "5", "four", ""])
    assert group.n_scored == 4 and group.rewards[3].status is Status.EMPTY and 3 not in group.ranking
    assert all(r.principle == "The answer is correct." for r in group.rewards)
    with pytest.raises(ConfigError, match="principle is required"):
        ScalarRewardJudge(judge).judge_pairs(["hi"], ["a"], ["b"])
