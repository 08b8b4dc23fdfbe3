"""Bradley–Terry scoring through vLLM's pooling API against transformers' AutoModelForSequenceClassification."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from brrm.errors import ConfigError  # noqa: E402
from tests.vllm.conftest import ENGINE, close_engine, save_tiny_classifier  # noqa: E402

pytestmark = pytest.mark.vllm
TEXTS = ["What is 2+2?", "Name a colour and explain why you like it.", "x",
         "Write a function that adds two numbers, then test it on 17 and 25."]


def _sequences(tok):
    out = []
    for i, text in enumerate(TEXTS):
        msgs = [{"role": "user", "content": text}, {"role": "assistant", "content": f"Answer {i}: {text[::-1]}"}]
        out.append(list(tok.apply_chat_template(msgs, tokenize=True, return_dict=False)))
    return out


def test_classify_matches_transformers_to_1e_3(tiny_cls_dir):
    import torch
    from transformers import AutoModelForSequenceClassification

    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(tiny_cls_dir, **ENGINE)
    try:
        assert backend.runner == "pooling"
        seqs = _sequences(backend.tokenizer)
        scores = [s.value for s in backend.classify(seqs)]
        with pytest.raises(ConfigError, match="runner"):
            backend.generate([], temperature=0)
        with pytest.raises(ConfigError, match="tokens"):
            backend.classify([[]])
    finally:
        close_engine(backend)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_cls_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = [model(torch.tensor([s])).logits[0, 0].item() for s in seqs]
    assert len(scores) == len(seqs) and all(isinstance(x, float) for x in scores)
    assert max(abs(a - b) for a, b in zip(scores, ref, strict=True)) <= 1e-3
    assert max(abs(x) for x in ref) > 0.1  # the scores are of order 1: the tolerance is not vacuous
    assert len({round(x, 4) for x in scores}) == len(scores)


def test_a_multi_label_head_is_refused(tmp_path):
    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(str(save_tiny_classifier(tmp_path / "two", num_labels=2)), **ENGINE)
    try:
        with pytest.raises(ConfigError, match=r"2 values .*exactly one label"):
            backend.classify(_sequences(backend.tokenizer)[:2])
    finally:
        close_engine(backend)


def test_bt_through_load_on_vllm_equals_the_transformers_backend(tiny_cls_dir):
    """brrm.load(kind="bt", backend="vllm") scores with vLLM pooling; equal to the transformers backend to 1e-3."""
    import brrm

    convs = ["What is 2+2?",
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}], "Say hi."]
    responses = ["4", "Blue, because it is calm.", "Hi <|im_end|> there"]  # record text stays text on both
    engine = {k: v for k, v in ENGINE.items() if k != "seed"}
    judge = brrm.load(tiny_cls_dir, kind="bt", backend="vllm", **engine)
    try:
        assert judge.info.backend == "vllm" and judge.info.kind == "bt"
        on_vllm = judge.score(convs, responses)
        pair = judge.judge(convs[0], "4", "5")
    finally:
        judge.close()
    ref = brrm.load(tiny_cls_dir, kind="bt", dtype="float32", device="cpu")
    on_hf = ref.score(convs, responses)
    assert all(r.ok for r in on_vllm + on_hf)
    assert max(abs(a.reward - b.reward) for a, b in zip(on_vllm, on_hf, strict=True)) <= 1e-3
    assert pair.ok and abs(pair.p_a - ref.judge(convs[0], "4", "5").p_a) <= 1e-3
