"""Tiny real models for tests and benchmarks: a random-weight Qwen3 (causal LM or one-label classifier) around
any tokenizer (``DESIGN.md`` §4 tier 1), and a BR-RM judge over a given backend."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

    from brrm.backends.base import Backend
    from brrm.judges.brrm import BRRMConfig



from brrm.testing.tokenizers import build_tiny_tokenizer, save_tokenizer
from brrm.types import RewardJudge

#: Architecture of the tiny Qwen3 (vocab and special ids come from the tokenizer). head_dim 64 is the
#: smallest that vLLM's CPU attention accepts.
TINY_QWEN3_CONFIG: dict[str, int | bool] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}


def _special_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    """Id of ``token`` in ``tokenizer``; raises ``ValueError`` when it is not a single known token."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(token_id, int) or tokenizer.convert_ids_to_tokens(token_id) != token:
        raise ValueError(f"tokenizer has no token {token!r}")
    return token_id


def build_tiny_qwen3(
    tokenizer: PreTrainedTokenizerFast | None = None,
    *,
    seed: int = 0,
    sequence_classification: bool = False,
    dtype: torch.dtype = torch.float32,
    config: Mapping[str, int | float | bool | str] | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A random-weight tiny Qwen3 (hidden 64, 2 layers, 2 heads / 1 KV head, head_dim 64) in eval mode.

    Args:
        tokenizer: default :func:`build_tiny_tokenizer` (~1.5k vocab, ~0.3M params); with
            :func:`build_qwen3_tokenizer` the model has vocab 151,669 (~19.5M params, 78 MB in fp32).
            It must contain ``<|im_end|>`` and its pad token.
        seed: ``torch.manual_seed`` before init (inside ``torch.random.fork_rng``, so the global CPU RNG
            is left as it was); the same seed gives bit-identical weights.
        sequence_classification: build ``Qwen3ForSequenceClassification`` (``num_labels=1``, scalar
            reward from the last non-pad token) instead of ``Qwen3ForCausalLM``.
        dtype: weights are initialised in float32 and then cast, so weights for a seed agree across dtypes
            up to rounding.
        config: ``Qwen3Config`` fields overriding :data:`TINY_QWEN3_CONFIG` (another shape, e.g.
            ``{"head_dim": 16, "num_attention_heads": 4, "tie_word_embeddings": True}``); the vocabulary and
            special ids always come from the tokenizer.

    Returns:
        ``(model, tokenizer)``. ``config.vocab_size == len(tokenizer)``; ``eos_token_id`` = ``<|im_end|>``,
        ``pad_token_id`` = the tokenizer's pad, ``bos_token_id`` = its bos or ``<|endoftext|>`` (as Qwen3);
        the generation config uses the same eos and pad.
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification

    tok = tokenizer if tokenizer is not None else build_tiny_tokenizer()
    eos_id = _special_id(tok, "<|im_end|>")
    pad_id = _special_id(tok, tok.pad_token or "<|endoftext|>")
    bos_id = _special_id(tok, tok.bos_token or "<|endoftext|>")
    make_config: Callable[..., Qwen3Config] = Qwen3Config  # the overrides are any Qwen3Config fields
    qwen3_config = make_config(
        vocab_size=len(tok),
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        **{**TINY_QWEN3_CONFIG, **(config or {})},
    )
    if sequence_classification:
        qwen3_config.num_labels = 1
    cls = Qwen3ForSequenceClassification if sequence_classification else Qwen3ForCausalLM
    with torch.random.fork_rng(devices=[]):  # seed the init without touching the caller's RNG stream
        torch.manual_seed(seed)
        model = cls(qwen3_config).to(dtype).eval()  # type: ignore[arg-type]  # transformers wraps .to
    if getattr(model, "generation_config", None) is not None:  # causal LMs only
        model.generation_config.eos_token_id = eos_id
        model.generation_config.pad_token_id = pad_id
        model.generation_config.bos_token_id = bos_id
    return model, tok


def favour_tokens(model: PreTrainedModel, boosts: Mapping[int, float], *, channel: int = 0) -> PreTrainedModel:
    """Raise some tokens' logits at every position of a causal LM with untied embeddings, in its weights (in place).

    One residual channel is made constant: every token's embedding holds ``1.0`` there and no attention or MLP
    output (``o_proj``, ``down_proj``) writes to it, so the final norm hands the head a positive value ``h`` there
    (1 over the hidden state's RMS, times the norm's weight), and the head's weight from that channel to token ``t``
    is set to ``boosts[t]``: token ``t``'s logit rises by ``boosts[t] * h``, more at some positions than at others.
    A random tiny model favouring ``"\n"`` and ``"["`` ends BR-RM's free-text blocks (``\n[``) after lengths that
    differ from block to block, as a trained judge's do, instead of running every block to its token cap.

    Args:
        model: e.g. from :func:`build_tiny_qwen3`.
        boosts: token id -> weight from the constant channel to that token's logit.
        channel: the residual channel made constant.

    Returns:
        ``model``.

    Raises:
        ValueError: for tied input and output embeddings (one matrix cannot hold both changes).
    """
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    embed_weight, head_weight = getattr(embed, "weight", None), getattr(head, "weight", None)
    if not isinstance(embed_weight, torch.Tensor) or not isinstance(head_weight, torch.Tensor) \
            or head_weight is embed_weight:
        raise ValueError("favour_tokens needs a model with untied input and output embeddings")
    with torch.no_grad():
        embed_weight[:, channel] = 1.0
        for name, module in model.named_modules():
            if name.endswith(("o_proj", "down_proj")) and isinstance(module, torch.nn.Linear):
                module.weight[channel, :] = 0.0
                if module.bias is not None:
                    module.bias[channel] = 0.0
        head_weight[:, channel] = 0.0
        for token, boost in boosts.items():
            head_weight[token, channel] = boost
    return model


class TinyQwen3Options(TypedDict, total=False):
    """The keywords of :func:`build_tiny_qwen3` (see there)."""

    tokenizer: PreTrainedTokenizerFast | None
    seed: int
    sequence_classification: bool
    dtype: torch.dtype
    config: Mapping[str, int | float | bool | str] | None


def save_tiny_qwen3(path: str | os.PathLike[str], **kwargs: Unpack[TinyQwen3Options]) -> Path:
    """Build a tiny Qwen3 with :func:`build_tiny_qwen3` and save model + tokenizer to ``path``.

    Args:
        path: output directory (created). It receives ``config.json``, ``generation_config.json``,
            ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json`` and the chat template.
        **kwargs: passed to :func:`build_tiny_qwen3` (``tokenizer``, ``seed``, ``sequence_classification``,
            ``dtype``, ``config``).

    Returns:
        ``path`` as a ``Path``; ``AutoModelForCausalLM.from_pretrained(path)`` (or
        ``AutoModelForSequenceClassification``) and ``AutoTokenizer.from_pretrained(path)`` load it offline.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model, tok = build_tiny_qwen3(**kwargs)
    model.save_pretrained(out)
    save_tokenizer(tok, out)
    return out


def brrm_judge(backend: Backend, config: BRRMConfig | None = None) -> RewardJudge:
    """The :class:`~brrm.RewardJudge` of a BR-RM judge over ``backend`` with a full ``BRRMConfig`` (tests that
    set config fields directly), built through the one door: :func:`brrm.load` with every field of ``config``
    as its flat keyword (the sampling settings as ``temperature``, ``top_p``, ``max_new_tokens``, …)."""
    from dataclasses import fields

    import brrm

    if config is None:
        return brrm.load(kind="brrm", backend=backend)
    s = config.sampling
    flat = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "sampling"}
    flat.update(temperature=s.temperature, top_p=s.top_p, max_new_tokens=s.max_new_tokens,
                max_total_tokens=s.max_total_tokens, seed=s.seed)
    return brrm.load(kind="brrm", backend=backend, **flat)
