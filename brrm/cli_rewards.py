"""``brrm score`` (scalar rewards of records) and the models behind ``brrm judge --model-type bt|principle``.

Output contract of ``brrm score``: one JSON object (a :class:`~brrm.types.ScalarReward` dict) per input
record and principle, in input order, to ``--output`` (or stdout); a summary with counts by status to
stderr. Malformed records become ``invalid_input`` lines naming the line and field; the rest are scored.

Record schema (columns remappable with ``--field field=column``)::

    {"id": "q1",                                   # optional; default: the 1-based line / row number
     "conversation": [{"role": "user", "content": "..."}, ...],   # or "prompt": "..."
     "response": "...",
     "principle": "..."}                           # optional; principle models only (else --principle)

A pairwise record (``response_a`` / ``response_b``, e.g. ``examples/pairs.jsonl``) yields two records,
``<id>:A`` and ``<id>:B``. Importing this module is cheap (models load inside the commands).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brrm.errors import ConfigError
from brrm.records import read_string_field
from brrm.types import Conversation, SamplingConfig, ScalarReward, Status

MODEL_TYPES = ("bt", "principle")


@dataclass(frozen=True)
class ScoreFields:
    """Input columns of a scoring record (see the module docstring)."""

    id: str = "id"
    conversation: str = "conversation"
    prompt: str = "prompt"
    response: str = "response"
    principle: str = "principle"

    @classmethod
    def from_overrides(cls, overrides: Iterable[str] | None) -> ScoreFields:
        """Build from ``field=column`` strings.

        Raises:
            ConfigError: on a malformed override or an unknown field (naming the valid ones).
        """
        valid = [f.name for f in dataclasses.fields(cls)]
        pairs = {}
        for item in overrides or ():
            key, sep, column = item.partition("=")
            if not sep or key.strip() not in valid or not column.strip():
                raise ConfigError(
                    f"field override {item!r} must be field=column with field one of {', '.join(valid)}"
                )
            pairs[key.strip()] = column.strip()
        return cls(**pairs)


@dataclass(frozen=True)
class ScoreRecord:
    """One valid scoring record: ``line`` is the 1-based line / row number."""

    id: str
    line: int
    conversation: Conversation
    response: str
    principle: str = ""


def read_score_records(
    path: str, *, fields: ScoreFields | None = None, limit: int | None = None, format: str | None = None
) -> list[Any]:
    """Read scoring records; every row gives ScoreRecord(s) or one :class:`brrm.records.RecordError`.

    Raises:
        ConfigError: when the file is missing or its format is unknown (as in ``brrm.records``).
    """
    from pathlib import Path

    from brrm.records import RecordError, detect_format, iter_rows

    fields = fields or ScoreFields()
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"input file {path!r} does not exist or is not a file")
    out: list[Any] = []
    for line, row in iter_rows(p, detect_format(p, format), limit):
        if isinstance(row, RecordError):
            out.append(row)
            continue
        try:
            out.extend(_parse_row(row, line, fields))
        except ConfigError as exc:
            rid = row.get(fields.id) if isinstance(row, Mapping) else None
            out.append(RecordError(line, "" if rid is None else str(rid), f"line {line}: {exc}"))
    return out


def _parse_row(row: Any, line: int, f: ScoreFields) -> list[ScoreRecord]:
    if not isinstance(row, Mapping):
        raise ConfigError(f"expected an object with fields, got {type(row).__name__}")
    rid = row.get(f.id)
    if isinstance(rid, float) and rid.is_integer():
        rid = int(rid)
    rid = str(line) if rid is None or rid == "" else str(rid)
    conv = row.get(f.conversation)
    if conv not in (None, ""):
        if isinstance(conv, str):
            try:  # CSV cells hold the message list as JSON text
                conv = json.loads(conv)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"field {f.conversation!r} is not valid JSON: {exc}") from None
        conversation = Conversation.coerce(conv, where=f.conversation)
    else:
        conversation = Conversation.from_prompt(read_string_field(row, f.prompt))
    principle = row.get(f.principle) or ""
    if not isinstance(principle, str):
        raise ConfigError(f"field {f.principle!r} must be a string")
    if f.response not in row and {"response_a", "response_b"} <= row.keys():
        return [
            ScoreRecord(
                f"{rid}:{side}", line, conversation, read_string_field(row, f"response_{side.lower()}"), principle
            )
            for side in ("A", "B")
        ]
    return [ScoreRecord(rid, line, conversation, read_string_field(row, f.response), principle)]


# ---------------------------------------------------------------------------------------------- models
class MeanOverPrinciples:
    """A principle judge as a plain scalar model: the mean reward over fixed principles (one batch).

    A response is ok only when every principle scored ok; otherwise it carries the first failure.
    """

    def __init__(self, judge: Any, principles: Sequence[str]) -> None:
        if not principles:
            raise ConfigError("a principle model needs at least one --principle")
        self.judge = judge
        self.principles = list(principles)

    def score(
        self,
        conversations: Sequence[Any],
        responses: Sequence[str],
        /,
        *,
        principle: str | Sequence[str] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[ScalarReward]:
        grid = self.judge.score_principles(conversations, responses, self.principles)
        out = []
        for i, row in enumerate(grid):
            rid = str(ids[i]) if ids is not None else ""
            bad = next((r for r in row if not r.ok), None)
            if bad is not None:
                out.append(dataclasses.replace(bad, id=rid, principle=" | ".join(self.principles)))
                continue
            mean = sum(r.reward for r in row) / len(row)
            out.append(
                dataclasses.replace(
                    row[0],
                    reward=mean,
                    id=rid,
                    principle=" | ".join(self.principles),
                    logits=tuple(r.reward for r in row),
                    text="",
                )
            )
        return out


def load_scalar_model(model_type: str, model: str, **opts: Any) -> Any:
    """Load a Bradley–Terry model (``bt``) or a principle judge (``principle``) from a hub id or directory.

    Args:
        model_type: ``bt`` or ``principle``.
        model: hub id or local directory.
        **opts: ``dtype``, ``device``, ``batch_size``, ``backend`` (only ``transformers``); for ``bt`` also
            ``recipe``, ``max_length``, ``truncation_side``, ``token_budget``, ``strip_thinking``; for
            ``principle`` also ``format``, ``sampling`` (a SamplingConfig), ``strip_thinking``.

    Raises:
        ConfigError: on an unknown model type or backend.
    """
    if model_type not in MODEL_TYPES:
        raise ConfigError(
            f"model type {model_type!r} is not valid here; expected one of {', '.join(MODEL_TYPES)}"
        )
    backend = opts.pop("backend", "transformers") or "transformers"
    if backend != "transformers":
        raise ConfigError(
            f"backend {backend!r} is not supported for {model_type} models yet; use transformers"
        )
    dtype, device, batch = opts.pop("dtype", "auto"), opts.pop("device", "auto"), opts.pop("batch_size", None)
    if model_type == "bt":
        from brrm.reward_models.bradley_terry import BradleyTerryRewardModel

        kwargs = {k: v for k, v in opts.items() if v is not None}
        if batch:
            kwargs["max_batch_size"] = batch
        return BradleyTerryRewardModel.from_pretrained(model, dtype=dtype, device=device, **kwargs)
    from brrm.judges.principle import PrincipleConfig, PrincipleJudge

    config = PrincipleConfig(
        format=opts.get("format") or "auto",
        sampling=opts.get("sampling") or SamplingConfig(temperature=0.0),
        strip_thinking=opts.get("strip_thinking", True),
    )
    extra = {"batch_size": batch} if batch else {}
    return PrincipleJudge.from_pretrained(
        model, format=config.format, config=config, dtype=dtype, device=device, **extra
    )


def build_pairwise_judge(
    model_type: str,
    model: str,
    *,
    principles: Sequence[str] | None = None,
    principle: str | None = None,
    margin: float = 0.0,
    **opts: Any,
) -> Any:
    """A pairwise judge (``judge_pairs(conversations, responses_a, responses_b, *, ids, labels, swap)``).

    Args:
        model_type: ``bt`` or ``principle``.
        model: hub id or local directory.
        principles, principle: the principle(s) of a principle model (required there; with several, a
            response's reward is its mean over them); not allowed for ``bt``.
        margin: |r_A − r_B| ≤ margin is a tie (reward units).
        **opts: see :func:`load_scalar_model`.

    Returns:
        A :class:`brrm.compose.ScalarRewardJudge` (it also offers ``score`` and ``rank``).

    Raises:
        ConfigError: on an unknown model type, a principle for ``bt``, or none for ``principle``.
    """
    from brrm.compose import ScalarRewardJudge

    chosen = [*(principles or ()), *([principle] if principle else [])]
    if model_type == "bt" and chosen:
        raise ConfigError(
            "Bradley–Terry models take no principle; drop --principle or use --model-type principle"
        )
    scorer = load_scalar_model(model_type, model, **opts)
    if model_type == "principle":
        scorer = MeanOverPrinciples(scorer, chosen)
    return ScalarRewardJudge(scorer, margin=margin)


# ---------------------------------------------------------------------------------------------- command
def add_score_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``score`` subcommand to an argparse subparsers object; it runs :func:`run_score`."""
    from brrm.records import FORMATS

    p = subparsers.add_parser(
        "score",
        help="scalar rewards of conversation/response records",
        description="Score each record's response with a Bradley–Terry or principle model.",
    )
    p.add_argument("--input", "-i", required=True, help="records file (.jsonl, .json, .parquet, .csv, .tsv)")
    p.add_argument("--output", "-o", default="-", help="JSONL output path ('-' = stdout, the default)")
    p.add_argument("--model", "-m", required=True, help="hub id or local dir of the reward model")
    p.add_argument(
        "--model-type",
        choices=MODEL_TYPES,
        default="bt",
        help="bt: Bradley-Terry scalar RM; principle: RLBFF principle RM",
    )
    p.add_argument(
        "--principle",
        action="append",
        default=None,
        help="principle (repeatable: every record is scored under each); principle models only",
    )
    p.add_argument(
        "--field",
        action="append",
        default=None,
        help="column override field=column (fields: id, conversation, prompt, response, principle)",
    )
    p.add_argument("--input-format", choices=FORMATS, default=None, help="default: from the file suffix")
    p.add_argument("--limit", type=int, default=None, help="score only the first N records")
    p.add_argument(
        "--recipe", default="auto", help="bt: auto, sequence_classification, qwen3_nemotron, llama_nemotron"
    )
    p.add_argument(
        "--format", dest="principle_format", default="auto", help="principle: auto, qwen3_genrm, llama_reward"
    )
    p.add_argument(
        "--max-length", type=int, default=None, help="bt: most tokens per input (default: model context)"
    )
    p.add_argument(
        "--truncation-side",
        choices=("left", "none"),
        default="left",
        help="bt: drop the oldest conversation tokens (left) or mark over-long inputs truncated (none)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="rows per forward / decoding batch")
    p.add_argument("--token-budget", type=int, default=16384, help="bt: padded tokens per forward batch")
    p.add_argument("--keep-thinking", action="store_true", help="do not strip a leading <think> block")
    p.add_argument("--max-new-tokens", type=int, default=8192, help="principle: new-token budget (thinking)")
    p.add_argument("--max-total-tokens", type=int, default=16384, help="principle: prompt + new tokens")
    p.add_argument(
        "--temperature", type=float, default=0.0, help="principle: thinking temperature (0 = greedy)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda")
    p.set_defaults(func=run_score)
    return p


def _model_options(args: argparse.Namespace) -> dict[str, Any]:
    common = {
        "dtype": args.dtype,
        "device": args.device,
        "batch_size": args.batch_size,
        "strip_thinking": not args.keep_thinking,
    }
    if args.model_type == "bt":
        return {
            **common,
            "recipe": args.recipe,
            "max_length": args.max_length,
            "truncation_side": args.truncation_side,
            "token_budget": args.token_budget,
        }
    sampling = SamplingConfig(
        temperature=args.temperature,
        max_new_tokens_per_turn=args.max_new_tokens,
        max_total_tokens=args.max_total_tokens,
        seed=args.seed,
    )
    return {**common, "format": args.principle_format, "sampling": sampling}


def run_score(args: argparse.Namespace) -> int:
    """``brrm score``: read records, score them, write JSONL and a summary; returns the exit code (0).

    Raises:
        ConfigError: on bad options or an unreadable file (before any model is loaded).
    """
    from brrm.records import RecordError

    if args.model_type == "bt" and args.principle:
        raise ConfigError(
            "Bradley–Terry models take no principle; drop --principle or use --model-type principle"
        )
    records = read_score_records(
        args.input, fields=ScoreFields.from_overrides(args.field), limit=args.limit, format=args.input_format
    )
    good = [r for r in records if not isinstance(r, RecordError)]
    model = load_scalar_model(args.model_type, args.model, **_model_options(args)) if good else None
    scored = iter(_score_records(model, good, args) if good else [])
    results: list[ScalarReward] = []
    for rec in records:
        if isinstance(rec, RecordError):
            results.append(ScalarReward.failed(Status.INVALID_INPUT, rec.reason, id=rec.id))
        else:
            results.extend(next(scored))
    _write(results, args.output)
    print(json.dumps(summarize_rewards(results)), file=sys.stderr)
    return 0


def _score_records(model: Any, good: list[ScoreRecord], args: argparse.Namespace) -> list[list[ScalarReward]]:
    """Per record, its reward(s): one for bt; one per principle for principle models (one batch)."""
    convs, texts, ids = [r.conversation for r in good], [r.response for r in good], [r.id for r in good]
    if args.model_type == "bt":
        return [[r] for r in model.score(convs, texts, ids=ids)]
    per_record = [list(args.principle) if args.principle else [r.principle] for r in good]
    missing = [r.line for r, ps in zip(good, per_record, strict=True) if not all(ps)]
    if missing:
        raise ConfigError(
            f"principle models need --principle or a 'principle' field; missing on lines {missing[:10]}"
        )
    flat = [(i, p) for i, ps in enumerate(per_record) for p in ps]
    rewards = model.score(
        [convs[i] for i, _ in flat],
        [texts[i] for i, _ in flat],
        principle=[p for _, p in flat],
        ids=[ids[i] for i, _ in flat],
    )
    out: list[list[ScalarReward]] = [[] for _ in good]
    for (i, _), r in zip(flat, rewards, strict=True):
        out[i].append(r)
    return out


def _write(results: list[ScalarReward], output: str) -> None:
    handle = sys.stdout if output == "-" else open(output, "w", encoding="utf-8")  # noqa: SIM115
    try:
        for r in results:
            handle.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
    finally:
        if handle is not sys.stdout:
            handle.close()


def summarize_rewards(results: Sequence[ScalarReward]) -> dict[str, Any]:
    """Counts by status and the mean / min / max of ok rewards (failed ones never enter them)."""
    by_status = {s.value: 0 for s in Status if s is not Status.PARSE_FAILURE}
    for r in results:
        by_status[r.status.value] = by_status.get(r.status.value, 0) + 1
    values = [r.reward for r in results if r.ok]
    stats = {"mean": sum(values) / len(values), "min": min(values), "max": max(values)} if values else {}
    return {
        "total": len(results),
        "by_status": by_status,
        "scored": len(values),
        "reward": {k: round(v, 6) for k, v in stats.items() if math.isfinite(v)},
        "invalid_lines": [r.reason.split(":", 1)[0] for r in results if r.status is Status.INVALID_INPUT][
            :20
        ],
    }
