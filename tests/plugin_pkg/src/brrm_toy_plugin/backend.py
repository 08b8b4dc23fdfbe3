"""Backend ``toytok``: the checkpoint's own tokenizer and nothing else (it runs no model), built from its options
object like every backend, and its one :class:`~brrm.backends.entry.BackendEntry`."""

from __future__ import annotations

from dataclasses import dataclass

from brrm.backends.base import BackendInfo, Capabilities
from brrm.backends.entry import BackendEntry
from brrm.types import check_int
from brrm.types.options import option


@dataclass(frozen=True)
class ToyTokOptions:
    """Options of the ``toytok`` backend."""

    toy_rows: int | None = option(None, help="responses tokenized per call, >= 1 (default 4)")

    def __post_init__(self) -> None:
        if self.toy_rows is not None:
            check_int("toy_rows", self.toy_rows, low=1)


class ToyTokBackend:
    """The tokenizer of a saved checkpoint (``AutoTokenizer.from_pretrained``)."""

    def __init__(self, tokenizer: object, name: str, rows: int) -> None:
        self.tokenizer = tokenizer
        self.rows = rows
        self.info = BackendInfo("toytok", name, {"rows": rows})
        self.capabilities = Capabilities(generate=False, programs=False, classify=False)

    @classmethod
    def from_options(cls, source: str, options: ToyTokOptions, *, name: str, task: str) -> ToyTokBackend:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(source), name, options.toy_rows or 4)

    def count(self, texts: list[str]) -> list[int]:
        """Tokens of each text (no special tokens), ``rows`` texts per tokenizer call."""
        out: list[int] = []
        for i in range(0, len(texts), self.rows):
            out += [len(ids) for ids in self.tokenizer(texts[i:i + self.rows], add_special_tokens=False)["input_ids"]]
        return out

    def close(self) -> None:
        pass


BACKEND = BackendEntry(ToyTokOptions, ToyTokBackend)
