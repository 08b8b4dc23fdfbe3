"""A scripted backend for testing judge logic (parsing, composition, retries, error handling).

It never stands in for a model where a tiny real one can run: it exists for the cases a real model
cannot be made to produce on demand (a given malformed output, a backend error on item 3, a truncation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from brrm.backends.base import BackendInfo, Completion, GenerationRequest

Script = Callable[[str, GenerationRequest], "str | Completion | Exception"]


class FakeBackend:
    """Answers each request by calling ``script(prompt_text, request)``.

    The script returns the generated text (finish reason ``stop``), a full :class:`Completion`, or an
    exception instance (turned into ``finish_reason="error"`` with its message, like a failed request).

    Args:
        tokenizer: a real tokenizer (prompts are decoded with it, texts encoded with it).
        script: the scripted model.
        model_id: recorded as the model id.
        max_context: the context window to report.
    """

    def __init__(self, tokenizer: Any, script: Script, *, model_id: str = "fake", max_context: int = 1 << 20,
                 end_of_turn: str = "<|im_end|>") -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.info = BackendInfo("fake", model_id)
        self.max_context = max_context
        self.end_of_turn_id = int(tokenizer.convert_tokens_to_ids(end_of_turn))
        self.prompts: list[str] = []

    def generate(self, requests: Sequence[GenerationRequest], *, temperature: float = 1.0,
                 top_p: float = 1.0) -> list[Completion]:
        """Run the script for each request, in order."""
        out = []
        for req in requests:
            prompt = self.tokenizer.decode(list(req.prompt_ids), skip_special_tokens=False)
            self.prompts.append(prompt)
            result = self.script(prompt, req)
            if isinstance(result, Exception):
                out.append(Completion.failed(f"{type(result).__name__}: {result}"))
            elif isinstance(result, Completion):
                out.append(result)
            else:
                ids = tuple(self.tokenizer.encode(result, add_special_tokens=False))
                out.append(Completion(ids, result, "stop"))
        return out
