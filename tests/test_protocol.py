"""The BR-RM two-turn protocol on the exact Qwen3 tokenizer: P1/P2 token ids and kept turn-1 thinking."""

from __future__ import annotations

from brrm.backends.base import Completion
from brrm.backends.fake import FakeBackend
from brrm.judges.brrm import BRRMConfig
from brrm.templates import render_brrm_turn1, render_brrm_turn2
from brrm.testing import brrm_judge
from brrm.types import Conversation, Status, Verdict

T1 = ("<think>\nResponse 1 says Paris, which is right.\n</think>\n\n[Quality Assessment Focus]\n"
      "Information Accuracy\n[End of Quality Assessment Focus]\n\n[Quality Analysis for Response 1]\n"
      "- Critical Issues: None identified\n[End of Quality Analysis for Response 1]\n\n"
      "[Quality Analysis for Response 2]\n- Critical Issues: Lyon is not the capital\n"
      "[End of Quality Analysis for Response 2]")
T2 = ("<think>\nAccuracy-critical.\n</think>\n\n[The Begin of Analysis on Response 1]\nCorrect.\n"
      "[The End of Analysis on Response 1]\n\n[The Begin of Analysis on Response 2]\nWrong city.\n"
      "[The End of Analysis on Response 2]\n\n[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]")


def _script(prompt, request):
    return T2 if "[The Begin of Analysis on Response 1]" in prompt.rsplit("<|im_start|>user", 1)[-1] else T1


def _judge(tokenizer):
    backend = FakeBackend(tokenizer, _script, model_id="nvidia/Qwen3-Nemotron-14B-BRRM")
    seen = []
    original = backend.generate

    def spy(requests, **kw):
        seen.extend(requests)
        return original(requests, **kw)

    backend.generate = spy
    return brrm_judge(backend, BRRMConfig(decoding="faithful")), seen


def test_p1_and_p2_token_ids_with_exact_qwen3_tokenizer(qwen3_tokenizer):
    tok = qwen3_tokenizer
    judge, seen = _judge(tok)
    (result,) = judge.judge_pairs(["What is the capital of France?"], ["Paris."], ["Lyon."])
    assert result.status is Status.OK and result.winner is Verdict.A
    turn1 = render_brrm_turn1(Conversation.from_prompt("What is the capital of France?"), "Paris.", "Lyon.")
    p1_text = "<|im_start|>user\n" + turn1 + "<|im_end|>\n<|im_start|>assistant\n"
    p2_text = (p1_text + T1 + "\n<|im_end|>\n" + "<|im_start|>user\n" + render_brrm_turn2()
               + "<|im_end|>\n<|im_start|>assistant\n")
    p1, p2 = seen[0].prompt_ids, seen[1].prompt_ids
    assert list(p1) == tok.encode(p1_text, add_special_tokens=False)
    assert list(p2) == tok.encode(p2_text, add_special_tokens=False)
    # fixed ids of the Qwen3 vocabulary: <|im_start|> user \n ... <|im_end|> \n <|im_start|> assistant \n
    assert list(p1[:3]) == [151644, 872, 198]
    assert list(p1[-5:]) == [151645, 198, 151644, 77091, 198]
    assert list(p2[-5:]) == [151645, 198, 151644, 77091, 198]
    assert p2[:len(p1)] == p1  # P2 extends P1 token for token (prefix caching reuses all of it)
    # turn-1 thinking survives in P2 (<think> = 151667, </think> = 151668), exactly once
    assert list(p2).count(151667) == 1 and list(p2).count(151668) == 1
    assert "Response 1 says Paris" in tok.decode(list(p2))
    # the turn-1 end is "\n<|im_end|>\n" as in the released code
    t1_end = tok.encode("[End of Quality Analysis for Response 2]\n<|im_end|>\n<|im_start|>user",
                        add_special_tokens=False)
    assert any(list(p2[i:i + len(t1_end)]) == t1_end for i in range(len(p2)))


def test_single_bos_and_no_double_template(qwen3_tokenizer):
    """C11: the rendered prompt is tokenized without adding special tokens again."""
    judge, seen = _judge(qwen3_tokenizer)
    judge.judge_pairs(["Recommend a board game for two players."], ["Try Patchwork."], ["Chess."])
    p1 = list(seen[0].prompt_ids)
    assert p1.count(151644) == 2  # <|im_start|> of the user turn and of the generation prompt only
    assert p1 == qwen3_tokenizer.apply_chat_template(
        [{"role": "user", "content": render_brrm_turn1(Conversation.from_prompt(
            "Recommend a board game for two players."), "Try Patchwork.", "Chess.")}],
        add_generation_prompt=True, tokenize=True, return_dict=False)


def test_turn1_thinking_parsed_out_and_dimensions(qwen3_tokenizer):
    judge, _ = _judge(qwen3_tokenizer)
    (r,) = judge.judge_pairs(["What is the capital of France?"], ["Paris."], ["Lyon."])
    assert r.dimensions == ("Information Accuracy",)
    assert r.analysis_a == "None identified" and r.analysis_b == "Lyon is not the capital"
    assert r.turn1_text == T1 and r.turn2_text == T2
    assert r.provenance.model == "nvidia/Qwen3-Nemotron-14B-BRRM" and r.provenance.decoding == "faithful"


def test_truncated_turn_is_reported_not_cut(qwen3_tokenizer):
    def script(prompt, request):
        return Completion(tuple(range(100, 100 + request.max_new_tokens)), "x" * request.max_new_tokens, "length")

    judge = brrm_judge(FakeBackend(qwen3_tokenizer, script), BRRMConfig(decoding="faithful"))
    (r,) = judge.judge_pairs(["Hi"], ["Hello!"], ["Hey."])
    assert r.status is Status.TRUNCATED and r.winner is Verdict.NONE and "budget" in r.reason
