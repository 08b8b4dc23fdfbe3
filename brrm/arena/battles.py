"""Battles already judged, read back to be rated again (``brrm arena --battles``): by another judge, another run,
or people. Three formats, detected from the first record's fields or named:

- ``brrm``: what ``brrm arena --output`` writes (``battles.jsonl`` and ``failures.jsonl``:
  :meth:`brrm.arena.judging.Battle.to_dict`): ``model_a``, ``model_b``, ``winner``, ``prompt_id``, ``status``,
  and the provenance (``p_a``, so soft outcomes rate as they did; ``category``, ``judge``, …).
- ``lmarena``: LMArena's released battles (FastChat's ``clean_battle_*.json``, the ``lmarena-ai/arena-human-
  preference-*`` datasets): ``model_a``, ``model_b``, ``winner`` ∈ ``model_a`` / ``model_b`` / ``tie`` /
  ``tie (bothbad)`` (FastChat) or ``both_bad`` (``arena-human-preference-140k``) (every tie counts half, as
  FastChat's ``elo_analysis`` counts them); the prompt id from
  ``question_id`` or ``id`` (else the line); an optional string ``category``; and the style counts from the
  optional ``conv_metadata``: ``sum_assistant_a_tokens`` and ``header_count_a``, ``list_count_a``, ``bold_count_a``
  (each an integer or an object of integers, summed, as FastChat's ``STYLE_CONTROL_ELEMENTS_V1`` reads them), and
  the ``_b`` ones.
- ``arena-hard``: Arena-Hard-Auto's judgment lines (``data/<bench>/model_judgment/<judge>/<model>.jsonl``, from its
  ``gen_judgment.py``): ``model``, ``games``, ``uid`` (v2.0) or ``question_id`` (v0.1), ``baseline`` (v2.0; v0.1
  lines name none: pass it), optional ``category`` and ``judge``. Game 1 shows the baseline's answer as A and the
  model's as B, game 2 the other way round; each game's ``score`` label (``A>>B``, ``A>B``, ``A=B``, ``B>A``,
  ``B>>A`` and the mirrored spellings) is one battle, a strong verdict (``>>``) counted :data:`STRONG_WEIGHT`
  times, as ``show_result.py``'s ``load_judgments`` does. A line with a game without a score (``null``) is two
  failed battles: ``show_result.py`` drops such a judgment.

The source is a file (JSON Lines, JSON, Parquet: :func:`brrm.records.open_rows`), a folder of ``*.jsonl`` files
(Arena-Hard-Auto's per-model judgment files, read in name order), or a Hugging Face dataset (a folder or a hub id
in the local cache). A bad line is one :class:`~brrm.arena.table.RowError` with its line number (and file) while
the rest goes on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.arena.judging import Battle
from brrm.arena.table import ArenaTable, RowError
from brrm.errors import ConfigError
from brrm.records import RecordError, open_rows
from brrm.types import Status

if TYPE_CHECKING:
    import numpy as np

BATTLE_FORMATS = {
    "brrm": "model_a, model_b, winner, prompt_id, status (the battles.jsonl brrm arena --output writes)",
    "lmarena": "model_a, model_b, winner (model_a, model_b, tie, tie (bothbad) or both_bad); optional "
               "question_id or id, conv_metadata (token and markdown counts for style control)",
    "arena-hard": "model, games (each with a score such as A>>B, A>B, A=B, B>A, B>>A), uid or question_id, "
                  "baseline (Arena-Hard-Auto's model_judgment lines)",
}
"""Each battles format and the fields it needs."""

STRONG_WEIGHT = 3
"""How many battles an Arena-Hard-Auto strong verdict (``A>>B``) counts as: ``show_result.py``'s
``load_judgments(weight=3)``."""

ARENA_HARD_LABELS = {"A>>B": ("a", STRONG_WEIGHT), "A>B": ("a", 1), "A=B": ("tie", 1), "B>A": ("b", 1),
                     "B>>A": ("b", STRONG_WEIGHT), "A<<B": ("b", STRONG_WEIGHT), "A<B": ("b", 1), "B=A": ("tie", 1),
                     "B<<A": ("a", STRONG_WEIGHT), "B<A": ("a", 1)}
"""Arena-Hard-Auto's verdict labels (``show_result.py``'s ``label_to_score``): which answer won (A, B or a tie) and
how many battles the verdict counts as."""

LMARENA_WINNERS = {"model_a": "model_a", "model_b": "model_b", "tie": "tie", "tie (bothbad)": "tie",
                   "both_bad": "tie"}
"""LMArena's ``winner`` values (FastChat's battles say ``tie (bothbad)``, the ``arena-human-preference-140k``
dataset ``both_bad``) and the :class:`~brrm.arena.judging.Battle` winner each is."""

STYLE_KEYS = ("sum_assistant_{}_tokens", "header_count_{}", "list_count_{}", "bold_count_{}")
"""LMArena's ``conv_metadata`` keys of :data:`brrm.arena.style.FEATURES`, in order (``{}``: ``a`` or ``b``)."""

Counts = tuple[tuple[float, float, float, float], tuple[float, float, float, float]]
"""A battle's style counts: ``model_a``'s answer's :data:`~brrm.arena.style.FEATURES`, then ``model_b``'s."""


class _Bad(Exception):
    """A record that is no battle of its format (the message says why, naming the field)."""


@dataclass(frozen=True)
class BattleFile:
    """The battles of a file.

    Attributes:
        battles: in file order (an Arena-Hard-Auto line gives one per game, a strong verdict several).
        counts: per battle, the style counts the file gives (LMArena's ``conv_metadata``), or None.
        models: in first-seen order.
        errors: the bad lines, in order (each rated nowhere, reported once).
        format: one of :data:`BATTLE_FORMATS`.
        source: the path or hub id read.
        baseline: the model every battle meets when the file names one (Arena-Hard-Auto's ``baseline``), else ``""``.
    """

    battles: tuple[Battle, ...]
    counts: tuple[Counts | None, ...]
    models: tuple[str, ...]
    errors: tuple[RowError, ...]
    format: str
    source: str
    baseline: str = ""

    @property
    def style_counts(self) -> list[Counts] | None:
        """Every battle's style counts when each battle with a verdict has them; None otherwise."""
        if not self.battles or any(c is None for c, b in zip(self.counts, self.battles, strict=True) if b.ok):
            return None
        zero = ((0.0,) * 4, (0.0,) * 4)
        return [c if c is not None else zero for c in self.counts]  # type: ignore[misc]


def read_battles(source: str | Path, *, format: str | None = None, baseline: str | None = None,
                 split: str | None = None) -> BattleFile:
    """Read a battles file (see the module docstring).

    Args:
        source: a file, a folder of ``*.jsonl`` files, or a Hugging Face dataset folder or hub id.
        format: one of :data:`BATTLE_FORMATS`; None: detected from the first record's fields.
        baseline: Arena-Hard-Auto's baseline model, for lines that name none (v0.1).
        split: the split of a Hugging Face dataset with several.

    Raises:
        ConfigError: for a missing source, an unknown ``format``, a first record of no known format (naming the
            formats and the fields each needs), or no valid battle (naming the first bad line).
    """
    if format is not None and format not in BATTLE_FORMATS:
        raise ConfigError(f"--battles-format {format!r} is not valid; expected one of {', '.join(BATTLE_FORMATS)}")
    rows = _rows(source, split)
    fmt = format or detect_format(rows, str(source))
    battles: list[Battle] = []
    counts: list[Counts | None] = []
    errors: list[RowError] = []
    for line, where, row in rows:
        if isinstance(row, RecordError):
            errors.append(RowError(line, f"{where}: {row.reason.split(': ', 1)[-1]}"))
            continue
        try:
            parsed = _parse(fmt, line, row, baseline)
        except _Bad as exc:
            errors.append(RowError(line, f"{where}: {exc}"))
            continue
        battles += [b for b, _ in parsed]
        counts += [c for _, c in parsed]
    if not battles:
        first = f"; first bad line: {errors[0].reason}" if errors else ""
        raise ConfigError(f"{source} holds no valid battle of format {fmt} ({BATTLE_FORMATS[fmt]}){first}")
    models = tuple(dict.fromkeys(m for b in battles for m in (b.model_a, b.model_b)))
    return BattleFile(tuple(battles), tuple(counts), models, tuple(errors), fmt, str(source),
                      _baseline(battles) if fmt == "arena-hard" else "")


def detect_format(rows: Sequence[tuple[int, str, object]], source: str) -> str:
    """The format of the first record that is a JSON object, from its fields.

    Raises:
        ConfigError: when no record is an object, or the first one's fields fit no format: naming every format
            and the fields it needs.
    """
    first = next((row for _, _, row in rows if isinstance(row, dict)), None)
    if first is not None:
        if "games" in first and "model" in first:
            return "arena-hard"
        if {"model_a", "model_b", "winner"} <= set(first):
            return "brrm" if {"prompt_id", "status"} <= set(first) else "lmarena"
    has = f"its first record has fields {', '.join(map(str, first)) or 'none'}" if first is not None else \
        "no record of it is a JSON object"
    formats = "; ".join(f"{name}: {fields}" for name, fields in BATTLE_FORMATS.items())
    raise ConfigError(f"{source} is in no known battles format: {has}. The formats and the fields each needs: "
                      f"{formats}. Name one with --battles-format")


def _rows(source: str | Path, split: str | None) -> list[tuple[int, str, object]]:
    """(line, where, row): the records of ``source`` numbered as :func:`brrm.records.open_rows` numbers them;
    ``where`` names the line (and, in a folder, its file)."""
    path = Path(source).expanduser()
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else []
    if not files:
        return [(k, f"line {k}", row) for k, row in open_rows(source, split=split)]
    if split is not None:
        raise ConfigError(f"--split applies to Hugging Face datasets, not the folder of JSON Lines {str(source)!r}")
    out: list[tuple[int, str, object]] = []
    for f in files:
        out += [(len(out) + 1, f"{f.name} line {k}", row) for k, row in open_rows(f)]
    return out


def _parse(fmt: str, line: int, row: object, baseline: str | None) -> list[tuple[Battle, Counts | None]]:
    if not isinstance(row, dict):
        raise _Bad(f"a battle must be a JSON object, got {type(row).__name__}")
    if fmt == "brrm":
        return [(_brrm(row), None)]
    if fmt == "lmarena":
        return [_lmarena(line, row)]
    return [(b, None) for b in _arena_hard(row, baseline)]


def _text(row: Mapping[str, object], name: str) -> str:
    value = row.get(name)
    if name not in row:
        raise _Bad(f"missing field {name!r}")
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"{name!r} must be a non-empty string, got {value!r}")
    return value


def _id(row: Mapping[str, object], names: Iterable[str], default: str | None = None) -> str:
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise _Bad(f"{name!r} must be a string or an integer, got {value!r}")
            return str(value)
    if default is None:
        raise _Bad(f"missing field {' or '.join(repr(n) for n in names)}")
    return default


def _pair(row: Mapping[str, object]) -> tuple[str, str]:
    a, b = _text(row, "model_a"), _text(row, "model_b")
    if a == b:
        raise _Bad(f"model_a and model_b are the same model ({a!r})")
    return a, b


def _category(row: Mapping[str, object]) -> str:
    value = row.get("category")
    return value if isinstance(value, str) else ""


def _brrm(row: Mapping[str, object]) -> Battle:
    """One ``battles.jsonl`` / ``failures.jsonl`` line of ``brrm arena``."""
    a, b = _pair(row)
    status = _text(row, "status")
    winner = row.get("winner") or ""
    if status == Status.OK.value and winner not in ("model_a", "model_b", "tie"):
        raise _Bad(f"'winner' must be model_a, model_b or tie in a battle with status ok, got {winner!r}")

    def num(name: str) -> float:
        value = row.get(name)
        if value is None:
            return math.nan
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Bad(f"{name!r} must be a number or null, got {value!r}")
        return float(value)

    p_a = num("p_a")
    if not math.isnan(p_a) and not 0.0 <= p_a <= 1.0:
        raise _Bad(f"'p_a' must be in [0, 1] or null, got {p_a!r}")
    consistent = row.get("consistent")
    return Battle(_id(row, ("prompt_id",)), _category(row), a, b, status, str(row.get("reason") or ""),
                  str(winner) if status == Status.OK.value else "", p_a,
                  consistent if isinstance(consistent, bool) else None, bool(row.get("swapped")),
                  str(row.get("judge") or ""), str(row.get("fingerprint") or ""), num("position_bias"))


def _lmarena(line: int, row: Mapping[str, object]) -> tuple[Battle, Counts | None]:
    """One LMArena battle, with its ``conv_metadata`` style counts when it has them."""
    a, b = _pair(row)
    winner = row.get("winner")
    if winner not in LMARENA_WINNERS:
        raise _Bad(f"'winner' must be one of {', '.join(LMARENA_WINNERS)}, got {winner!r}")
    battle = Battle(_id(row, ("question_id", "id"), str(line)), _category(row), a, b, Status.OK.value, "",
                    LMARENA_WINNERS[str(winner)], math.nan, None, False, str(row.get("judge") or ""), "")
    meta = row.get("conv_metadata")
    if meta is None:
        return battle, None
    if not isinstance(meta, dict):
        raise _Bad(f"'conv_metadata' must be an object, got {type(meta).__name__}")
    side = [tuple(_count(meta, key.format(s)) for key in STYLE_KEYS) for s in ("a", "b")]
    return battle, (side[0], side[1])  # type: ignore[return-value]


def _count(meta: Mapping[str, object], key: str) -> float:
    """A ``conv_metadata`` count: an integer, or an object of integers summed (FastChat's reading)."""
    value = meta.get(key)
    parts = list(value.values()) if isinstance(value, dict) else [value]
    if key not in meta or not parts or not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
                                                for v in parts):
        raise _Bad(f"'conv_metadata.{key}' must be a count or an object of counts, got {value!r}")
    return float(sum(parts))  # type: ignore[arg-type]


def _arena_hard(row: Mapping[str, object], baseline: str | None) -> list[Battle]:
    """The battles of one Arena-Hard-Auto judgment line (see the module docstring)."""
    model = _text(row, "model")
    base = row.get("baseline") or baseline
    if not isinstance(base, str) or not base:
        raise _Bad("no 'baseline' field (Arena-Hard-Auto v0.1 judgments name none): pass --baseline, e.g. "
                   "gpt-4-0314 for arena-hard-v0.1")
    if base == model:
        raise _Bad(f"'model' is the baseline {base!r}")
    games = row.get("games")
    if not isinstance(games, list) or not 1 <= len(games) <= 2 or not all(isinstance(g, dict) for g in games):
        raise _Bad(f"'games' must be a list of one or two objects, got {games!r}"[:200])
    pid, category, judge = _id(row, ("uid", "question_id")), _category(row), str(row.get("judge") or "")
    orders = ((base, model), (model, base))
    if any(g.get("score") is None for g in games):
        reason = "a game without a score (no verdict label): Arena-Hard-Auto's show_result.py drops the judgment"
        return [Battle(pid, category, a, b, Status.PARSE_FAILURE.value, reason, "", math.nan, None, True, judge, "")
                for (a, b), _ in zip(orders, games, strict=False)]
    out = []
    for (a, b), game in zip(orders, games, strict=False):
        label = game["score"]
        if label not in ARENA_HARD_LABELS:
            raise _Bad(f"game score {label!r} is no verdict label; expected one of {', '.join(ARENA_HARD_LABELS)}")
        side, weight = ARENA_HARD_LABELS[str(label)]
        winner = {"a": "model_a", "b": "model_b", "tie": "tie"}[side]
        out += [Battle(pid, category, a, b, Status.OK.value, "", winner, math.nan, None, len(games) == 2, judge,
                       "")] * weight
    return out


def _baseline(battles: Sequence[Battle]) -> str:
    """The model in every battle, when exactly one is (Arena-Hard-Auto's baseline); else ``""``."""
    common = set.intersection(*({b.model_a, b.model_b} for b in battles))
    return next(iter(common)) if len(common) == 1 else ""


def style_inputs(file: BattleFile, table: ArenaTable | None, *, style_control: bool
                 ) -> tuple[np.ndarray | None, list[tuple[float, float]] | None, str]:
    """What style control and the length-controlled win rates of ``file``'s battles use: (each battle's answers'
    style counts, shape ``(n, 2, 4)``, or None; each battle's answer lengths, or None; a line saying which).
    The file's own counts (LMArena's ``conv_metadata``, lengths in tokens) come first; else the answers of
    ``table`` (:func:`brrm.arena.style.answer_counts`, lengths in characters); else neither."""
    import numpy as np

    from brrm.arena.length import response_lengths
    from brrm.arena.style import answer_counts

    given = file.style_counts
    if given is not None:
        counts = np.array(given, dtype=np.float64)
        lengths = [(float(a), float(b)) for a, b in counts[:, :, 0]]
        note = "style control: from the battles' conv_metadata (tokens, headers, lists, bold)"
    elif table is not None:
        counts, lengths = answer_counts(table, file.battles), response_lengths(table, file.battles)
        note = f"style control: from the answers in {table.source}"
    else:
        lacking = sum(1 for c, b in zip(file.counts, file.battles, strict=True) if b.ok and c is None)
        return None, None, (f"no style control: {lacking} battles carry no style counts (LMArena's conv_metadata); "
                            "pass --input with the models' answers" if style_control else "")
    return (counts if style_control else None), lengths, (note if style_control else "")
