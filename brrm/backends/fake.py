"""A scripted backend for testing judge logic (parsing, composition, retries, errors, servers, adapters).

It never stands in for a model where a tiny real one can run: it exists for the cases a real model
cannot be made to produce on demand (a given malformed output, a backend error on item 3, a truncation, a
stall, a wrong number of scores).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from brrm.backends.base import BackendInfo, Capabilities, Completion, GenerationRequest, Score

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Script = Callable[[str, GenerationRequest], "str | Completion | Exception"]
ScoreScript = Callable[[str], "float | Exception"]


class FakeBackend:
    """Answers each request by calling ``script(prompt_text, request)``.

    The script returns the generated text (finish reason ``stop``), a full :class:`Completion`, or an
    exception instance (turned into ``finish_reason="error"`` with its message, like a failed request).
    ``score_script(prompt_text)`` answers :meth:`classify` with a float or an exception instance.

    Args:
        tokenizer: a real tokenizer (prompts are decoded with it, texts encoded with it).
        script: the scripted model.
        score_script: the scripted classifier (``classify``); None: no classify capability.
        model_id: recorded as the model id.
        max_context: the context window to report.
        chunk_size: the preferred judgments per call it declares.
        programs: declare constraint-program support (the script then answers for the program: it is never run).
        concurrent: declare that ``generate``/``classify`` may be called from several threads at once
            (``capabilities.concurrent``), standing in for an engine that takes concurrent calls (vLLM, a server);
            the script must then be thread-safe (the backend's own bookkeeping is). False (the default): it stands
            in for a one-call-at-a-time engine (transformers' static batching), and callers serialize its calls.

    Attributes:
        prompts: every prompt text seen, in order (generation and classification).
        calls: number of ``generate``/``classify`` calls.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, script: Script | None = None, *,
                 score_script: ScoreScript | None = None, model_id: str = "fake", max_context: int = 1 << 20,
                 end_of_turn: str = "<|im_end|>", chunk_size: int = 64, programs: bool = False,
                 concurrent: bool = False) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.score_script = score_script
        self.info = BackendInfo("fake", model_id)
        self.capabilities = Capabilities(generate=script is not None, programs=programs,
                                         classify=score_script is not None, vocab_logit=score_script is not None,
                                         kv_reuse=False, chunk_size=chunk_size, concurrent=concurrent,
                                         seeded=True)
        self.max_context = max_context
        end_of_turn_id = tokenizer.convert_tokens_to_ids(end_of_turn)  # one token in: one id out
        if not isinstance(end_of_turn_id, int):
            raise TypeError(f"the tokenizer gave {end_of_turn_id!r} as the id of {end_of_turn!r}")
        self.end_of_turn_id = end_of_turn_id
        self.prompts: list[str] = []
        self.calls = 0
        self.stats = {"requests": 0, "classified": 0}
        self._lock = threading.Lock()  # the tokenizer and the bookkeeping, under concurrent calls; not the script

    def generate(self, requests: Sequence[GenerationRequest], *, temperature: float = 1.0,
                 top_p: float = 1.0, keep_kv: bool = False,
                 on_complete: Callable[[int], None] | None = None, top_k: int = 0) -> list[Completion]:
        """Run the script for each request, in order."""
        assert self.script is not None, "this FakeBackend has no generation script"
        self._count_call()
        out = []
        for req in requests:
            prompt = self._seen(req.prompt_ids, "requests")
            result = self.script(prompt, req)
            if isinstance(result, Exception):
                out.append(Completion.failed(f"{type(result).__name__}: {result}"))
            elif isinstance(result, Completion):
                out.append(result)
            else:
                with self._lock:
                    ids = tuple(self.tokenizer.encode(result, add_special_tokens=False))
                out.append(Completion(ids, result, "stop"))
            if on_complete is not None:
                on_complete(len(out) - 1)
        return out

    def classify(self, sequences: Sequence[Sequence[int]], *, token_id: int | None = None) -> list[Score]:
        """Run ``score_script`` for each sequence, in order."""
        assert self.score_script is not None, "this FakeBackend has no score script"
        self._count_call()
        values = [self.score_script(self._seen(seq, "classified")) for seq in sequences]
        return [Score.failed(f"{type(v).__name__}: {v}") if isinstance(v, Exception) else Score(float(v))
                for v in values]

    def _count_call(self) -> None:
        with self._lock:
            self.calls += 1

    def _seen(self, ids: Sequence[int], stat: str) -> str:
        """The prompt text of ``ids``, recorded in :attr:`prompts` and counted under ``stats[stat]``."""
        with self._lock:
            prompt = str(self.tokenizer.decode(list(ids), skip_special_tokens=False))
            self.prompts.append(prompt)
            self.stats[stat] += 1
        return prompt

    def close(self) -> None:
        """Nothing to free."""
