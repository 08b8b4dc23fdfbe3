"""RLBFF principle judges on a tiny real Qwen3 (tier 1); the exact Qwen3 tokenizer (tier 2) for token ids."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from brrm.backends.transformers import TransformersBackend
from brrm.errors import ConfigError, TemplateError
from brrm.judges.principle import PrincipleConfig, PrincipleJudge, judgement_token_ids, resolve_format
from brrm.testing import build_tiny_qwen3, build_tiny_tokenizer, qwen3_chat_template
from brrm.types import SamplingConfig, Status

NARROW = {"hidden_size": 16, "head_dim": 16, "intermediate_size": 32, "num_hidden_layers": 1,
          "tie_word_embeddings": True}
"""A narrower tiny Qwen3 for the 151,669-token vocabulary: its embedding is 2.4M parameters, not 19.4M (~5 CPU-s
of random init)."""

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


def _judge(causal, fmt, decoding="constrained", **sampling):
    model, tok = causal
    backend = RecordingBackend(model, tok, model_id="tiny-principle")
    config = PrincipleConfig(format=fmt, decoding=decoding, sampling=SamplingConfig(temperature=0.0, **sampling))
    return PrincipleJudge(backend, config), backend


def _logit_diff(model, ids, yes, no):
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0, -1].float()
    return (logits[yes] - logits[no]).item()


def test_qwen_judgement_tokens_are_7414_and_2308(qwen3_tokenizer):
    assert judgement_token_ids(qwen3_tokenizer, "qwen3_genrm") == (7414, 2308)
    assert qwen3_tokenizer.convert_ids_to_tokens([7414, 2308]) == ["ĠYes", "ĠNo"]
    assert judgement_token_ids(qwen3_tokenizer, "llama_reward") == (9454, 2753)  # "Yes", "No"


def test_construction_checks_ids_with_the_exact_qwen3_tokenizer(qwen3_tokenizer, monkeypatch):
    tok = qwen3_tokenizer  # the session's; its template is restored after the test
    monkeypatch.setattr(tok, "chat_template", principle_template())
    model, _ = build_tiny_qwen3(tok, seed=0, config=NARROW)  # the ids are the point, not the shape
    judge = PrincipleJudge(
        TransformersBackend(model, tok, model_id="nvidia/Qwen3-Nemotron-32B-GenRM-Principle")
    )
    assert judge.format == "qwen3_genrm" and judge.option_ids == (7414, 2308)


def test_split_judgement_tokens_are_a_config_error():
    from tokenizers import models, pre_tokenizers, trainers

    from brrm.testing import TINY_ADDED_TOKENS
    from brrm.testing.tokenizers import _add_tokens, _qwen_pipeline, _wrap

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
        with pytest.raises(ConfigError, match="is not one token after .* single-token label"):
            PrincipleJudge(TransformersBackend(model, tok), PrincipleConfig(format=fmt))


def test_template_without_principle_role_fails_naming_it():
    model, tok = build_tiny_qwen3(seed=3)  # stock Qwen3 template: drops unknown roles silently
    with pytest.raises(TemplateError, match=r"chat template of .*sha256 [0-9a-f]{16}.*role 'principle'"):
        PrincipleJudge(TransformersBackend(model, tok, model_id="x"), PrincipleConfig(format="qwen3_genrm"))


class FreeAsGrammarBackend(RecordingBackend):
    """The real tiny model, whose free generations are steered to end in "Final Judgement: Yes|No" by the
    constrained program (a random model would not get there on its own); every token is still the model's."""

    def __init__(self, *args, program, **kwargs):
        super().__init__(*args, **kwargs)
        self.program = program

    def generate(self, requests, **kwargs):
        steered = [replace(r, program=self.program(r.max_new_tokens)) if r.program is None else r for r in requests]
        return super().generate(steered, **kwargs)


def test_card_decoding_reads_the_clamped_log_ratio_at_the_judgement_step(causal):
    """Qwen3-GenRM-Principle's card recipe: free generation, then the logits where the judgement was emitted."""
    model, tok = causal
    config = PrincipleConfig(format="qwen3_genrm", sampling=SamplingConfig(temperature=0.0, max_new_tokens=40))
    probe = PrincipleJudge(TransformersBackend(model, tok), replace(config, decoding="constrained"))
    backend = FreeAsGrammarBackend(model, tok, model_id="tiny-principle", program=probe._program)
    judge = PrincipleJudge(backend, config)
    (r,) = judge.score(["What is 2+2?"], ["4"], principles="The response is correct.")
    assert r.ok and r.provenance.decoding == "free" and r.provenance.policies["reward"] == "clamped"
    (free_req,), (free,) = backend.calls[0]
    (step_req,), _ = backend.calls[1]
    assert step_req.prompt_ids == free_req.prompt_ids + free.token_ids[:-1]  # the step before the end of turn
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([list(step_req.prompt_ids)])).logits[0, -1].float()
    yes, no = judge.option_ids
    s_yes, s_no, s_max = logits[yes].item(), logits[no].item(), logits.max().item()
    assert r.logits == pytest.approx((s_yes, s_no, s_max), abs=1e-4)
    assert r.reward == pytest.approx(max(s_yes - s_max, -50) - max(s_no - s_max, -50), abs=1e-4)
    raw = PrincipleJudge(backend, replace(config, reward="logit_diff")).score(
        ["What is 2+2?"], ["4"], principles="The response is correct.")[0]
    assert raw.reward == pytest.approx(s_yes - s_no, abs=1e-4)
    from brrm.judges.principle_format import card_reward

    assert card_reward(0.0, -80.0, 0.0) == 50.0 and card_reward(-3.0, -1.0, 2.0) == pytest.approx(-2.0)


def test_card_decoding_without_a_final_judgement_is_a_parse_failure_with_the_text_kept():
    from brrm.backends.fake import FakeBackend

    tok = build_tiny_tokenizer()
    tok.chat_template = principle_template()
    backend = FakeBackend(tok, lambda p, r: "<think>\nhmm\n</think>\n\nIt depends.", programs=True)
    judge = PrincipleJudge(backend, PrincipleConfig(format="qwen3_genrm"))
    (r,) = judge.score(["What is 2+2?"], ["4"], principles="The response is correct.")
    assert r.status is Status.PARSE_FAILURE and math.isnan(r.reward) and r.text.endswith("It depends.")


def test_qwen_genrm_reward_is_read_at_the_judgement_step(causal):
    model, tok = causal
    judge, backend = _judge(causal, "qwen3_genrm", max_new_tokens=40)
    convs = [
        "What is 2+2?",
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "Name a colour."},
        ],
    ]
    results = judge.score(convs, ["4", "Blue."], principles="The response is correct.", ids=["a", "b"])
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
    (r,) = judge.score(["What is 1+1?"], ["1+1=2"], principles="The answer is correct.")
    ((requests, completions),) = backend.calls
    prompt = tok.decode(requests[0].prompt_ids)
    question = ("Evaluate the response to the previous prompt in terms of whether it satisfies this principle: "
                "The answer is correct.. Only answer Yes or No.")  # the model card's wording, verbatim
    assert question in prompt and prompt.index("1+1=2") < prompt.index(question)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert r.text in ("Yes", "No") and len(completions[0].token_ids) == 1
    yes, no = judge.option_ids
    assert r.reward == pytest.approx(_logit_diff(model, requests[0].prompt_ids, yes, no), abs=1e-5)


@pytest.mark.parametrize("fmt", ["llama_reward", "qwen3_genrm"])
def test_many_principles_per_response_in_one_batch(causal, fmt):
    judge, backend = _judge(causal, fmt, max_new_tokens=40)
    principles = ["The response is correct.", "The response is concise.", "The response is polite."]
    grid = judge.score_principles(["What is 2+2?", "Name a colour."], ["4", "Blue."], principles)
    assert len(backend.calls) == 1 and len(backend.calls[0][0]) == 6
    assert [[r.principle for r in row] for row in grid] == [principles, principles]
    for i, (conv, resp) in enumerate((("What is 2+2?", "4"), ("Name a colour.", "Blue."))):
        for k, p in enumerate(principles):
            alone = judge.score([conv], [resp], principles=p)[0]
            assert grid[i][k].ok and grid[i][k].reward == pytest.approx(alone.reward, abs=1e-5)
    per_item = judge.score(["What is 2+2?"] * 3, ["4"] * 3, principles=principles)
    assert [r.principle for r in per_item] == principles
    assert len({round(r.reward, 6) for r in grid[0]}) == 3


def test_principle_is_required_and_inputs_are_checked_before_any_model_call(causal):
    judge, backend = _judge(causal, "llama_reward")
    with pytest.raises(ConfigError, match="principle is required"):
        judge.score(["hi"], ["hello"])
    with pytest.raises(ConfigError, match="non-empty string"):
        judge.score(["hi"], ["hello"], principles="  ")
    with pytest.raises(ConfigError, match="missing"):
        judge.score(["hi", "yo"], ["hello", None], principles="polite")
    with pytest.raises(ConfigError, match="same length"):
        judge.score(["hi", "yo"], ["hello", "hey"], principles=["polite"])
    with pytest.raises(ConfigError, match="ends with role 'assistant'"):
        judge.score(
            [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]],
            ["y"],
            principles="polite",
        )
    assert backend.calls == []


def test_empty_thinking_only_and_over_long_inputs(causal):
    judge, _ = _judge(causal, "qwen3_genrm", max_new_tokens=40, max_total_tokens=120)
    empty, thought, long, ok = judge.score(
        ["Say something kind."] * 3 + ["Say hi."],
        ["", "<think>hmm</think>", "word " * 200, "<think>plan</think>Hi!"],
        principles="The response is kind.",
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
    (r,) = judge.score(["hi"], ["hello"], principles="polite")
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
    a, b = judge.score(["What is 2+2?"] * 2, ["4", "5"], principles="The answer is correct.")
    assert pair.ok and pair.p_a == pytest.approx(1 / (1 + math.exp(b.reward - a.reward)), abs=1e-6)
    group = unified.rank("What is 2+2?", ["4", "5", "four", ""])
    assert group.n_scored == 4 and group.rewards[3].status is Status.EMPTY and 3 not in group.ranking
    assert all(r.principle == "The answer is correct." for r in group.rewards)
    with pytest.raises(ConfigError, match="principle is required"):
        ScalarRewardJudge(judge).judge_pairs(["hi"], ["a"], ["b"])
