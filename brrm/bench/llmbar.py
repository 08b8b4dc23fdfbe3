"""LLMBar (Zeng et al., ICLR 2024): 419 instruction-following pairs with an objective winner.

Data layout and label balance are documented in ``../shared/data/LLMBar/SOURCE.md`` (princeton-nlp/LLMBar at
commit ``900616bf``): ``<root>/LLMBar/LLMBar/<subset>/dataset.json``, a JSON list of
``{input, output_1, output_2, label: 1|2}``; no ties. Natural has 100 pairs (42 x 1, 58 x 2); the four
adversarial subsets have 134 / 92 / 47 / 46.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from brrm.errors import ConfigError
from brrm.records import LLMBAR_FIELDS, PairRecord, RecordError, read_pair_records

LLMBAR_SUBSETS = (
    "Natural",
    "Adversarial/Neighbor",
    "Adversarial/GPTInst",
    "Adversarial/GPTOut",
    "Adversarial/Manual",
)
"""The five LLMBar subsets, as folder paths under ``LLMBar/LLMBar/`` (419 pairs together)."""

DATA_DIR_ENV = "BRRM_DATA_DIR"
"""Environment variable naming the data root (the folder that holds ``LLMBar/``)."""


def default_data_root() -> Path:
    """``$BRRM_DATA_DIR`` if set, else ``../shared/data`` next to the repository checkout."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def _canonical_subset(subset: str) -> str:
    """Match a subset name exactly, case-insensitively, or by its last part (``neighbor``)."""
    for name in LLMBAR_SUBSETS:
        if subset.lower() in (name.lower(), name.rsplit("/", 1)[-1].lower()):
            return name
    raise ConfigError(f"LLMBar subset {subset!r} is not valid; expected one of {', '.join(LLMBAR_SUBSETS)}")


def llmbar_path(subset: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Path of one subset's ``dataset.json``.

    Args:
        subset: one of :data:`LLMBAR_SUBSETS` (case-insensitive; ``Neighbor`` etc. alone also match).
        root: the data root that holds ``LLMBar/``; default :func:`default_data_root`.

    Raises:
        ConfigError: for an unknown subset (listing the valid ones), or when the file is not there (naming
            the path and ``BRRM_DATA_DIR``).
    """
    name = _canonical_subset(subset)
    base = Path(root) if root is not None else default_data_root()
    path = base / "LLMBar" / "LLMBar" / name / "dataset.json"
    if not path.is_file():
        raise ConfigError(
            f"LLMBar {name} not found at {path}; set {DATA_DIR_ENV} (or root=) to the folder holding LLMBar/"
        )
    return path


def load_llmbar(subset: str, root: str | os.PathLike[str] | None = None) -> list[PairRecord]:
    """Load one LLMBar subset as pairwise records.

    Ids are ``"<subset>/<row>"`` (e.g. ``"Natural/1"``, row 1-based) so subsets can be pooled; labels
    1 / 2 become ``Verdict.A`` / ``Verdict.B`` (output_1 is response A).

    Args:
        subset: one of :data:`LLMBAR_SUBSETS` (see :func:`llmbar_path`).
        root: the data root; default :func:`default_data_root`.

    Raises:
        ConfigError: for an unknown subset, a missing file, or a row that is not a valid record.
    """
    path = llmbar_path(subset, root)
    name = _canonical_subset(subset)
    records: list[PairRecord] = []
    for item in read_pair_records(path, fields=LLMBAR_FIELDS):
        if isinstance(item, RecordError):
            raise ConfigError(f"{path}: {item.reason}")
        records.append(dataclasses.replace(item, id=f"{name}/{item.line}"))
    return records
