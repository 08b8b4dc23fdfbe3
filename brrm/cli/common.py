"""What every model-running subcommand shares: model / backend / judge flags, the one ``brrm.load`` call,
records with their bad-line report, output files, progress and error messages that name flags.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from brrm.errors import ConfigError
from brrm.load import EMBEDDED_BUDGETS
from brrm.progress import progress_bar  # noqa: F401 - the commands' bar
from brrm.types.protocols import RewardJudge

FLAG_ALIASES = {"max_new_tokens_per_turn": "--max-new-tokens", "base_urls": "--base-url",
                "judge_chunk_size": "--chunk-size", "strip_history_reasoning": "--history-reasoning",
                "strip_response_reasoning": "--keep-thinking", "strip_thinking": "--keep-thinking"}
"""Python names in error messages that the CLI shows as flags."""


def add_input_args(p: argparse.ArgumentParser, *, verb: str, fields: str,
                   input_help: str = "records file (.jsonl, .json, .parquet, .csv, .tsv)") -> None:
    """``--input``, ``--output``, ``--input-format``, ``--limit`` and ``--field`` of a record-reading command."""
    p.add_argument("--input", "-i", required=True, help=input_help)
    p.add_argument("--output", "-o", default="-", help="JSONL output path ('-' = stdout, the default)")
    p.add_argument("--input-format", choices=("jsonl", "json", "parquet", "csv", "tsv"), default=None,
                   help="default: from the file suffix")
    p.add_argument("--limit", type=int, default=None, help=f"{verb} only the first N records")
    p.add_argument("--field", action="append", default=None, metavar="FIELD=COLUMN",
                   help=f"remap an input column, e.g. --field prompt=instruction (fields: {fields})")


def add_model_args(p: argparse.ArgumentParser, *, default_kind: str = "auto", judge_flags: bool = True) -> None:
    """``--model``, ``--kind``, ``--backend`` and every backend and judge option of :func:`brrm.load`."""
    g = p.add_argument_group("model")
    g.add_argument("--model", "-m", default=None,
                   help="hub id or local dir (e.g. nvidia/Qwen3-Nemotron-14B-BRRM); default: the embedded "
                        "SmolLM2-135M-Instruct demo model (offline)")
    g.add_argument("--kind", choices=("auto", "brrm", "bt", "principle"), default=default_kind,
                   help="brrm: two-turn BR-RM judge; bt: Bradley-Terry scalar RM; principle: RLBFF principle RM; "
                        f"auto: from a known id or the model's config (default: {default_kind})")
    g.add_argument("--model-type", dest="kind", choices=("brrm", "bt", "principle"), help=argparse.SUPPRESS)
    g.add_argument("--backend", choices=("transformers", "vllm", "openai"), default="transformers",
                   help="model runner (default: transformers)")
    g.add_argument("--calibration", default=None, metavar="CALIB_JSON",
                   help="apply a calibration written by `brrm calibrate`: P(A>B) calibrated, the raw one kept")
    add_backend_args(p.add_argument_group("backend"))
    if judge_flags:
        add_judge_args(p)


def add_backend_args(group: Any) -> None:
    """One flag per backend option field (:mod:`brrm.backends.options`): its name, help, type and choices come
    from the field; unset (None) keeps the backend's default."""
    from brrm.backends.options import cli_fields

    for name, owners in cli_fields().items():
        f = owners[0][1]
        where = ", ".join(b for b, _ in owners)
        flag, kind = "--" + name.replace("_", "-"), str(f.type)
        extra: dict[str, Any] = {"choices": f.metadata["choices"]} if f.metadata.get("choices") else {}
        if kind.startswith("bool | str"):
            extra = {"type": _bool_or_auto, "metavar": "{true,false,auto}"}
        elif kind.startswith("bool"):
            extra = {"action": argparse.BooleanOptionalAction}
        elif kind.startswith("int"):
            extra["type"] = int
        elif kind.startswith("float"):
            extra["type"] = float
        elif "tuple[str" in kind:
            extra["action"] = "append"
        group.add_argument(flag, dest=name, default=None, help=f"{where}: {f.metadata['help']}", **extra)


def _bool_or_auto(text: str) -> bool | str:
    values: dict[str, bool | str] = {"true": True, "false": False, "auto": "auto"}
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"expected true, false or auto, got {text!r}")
    return values[text.lower()]


def add_judge_args(p: argparse.ArgumentParser) -> None:
    """Decoding, budgets, input policies and scalar-model options."""
    d = EMBEDDED_BUDGETS
    j = p.add_argument_group("judge (BR-RM)")
    j.add_argument("--decoding", choices=("constrained", "faithful"), default=None,
                   help="constrained: verdicts always parse, P(A>B) measured (default); faithful: the released "
                        "protocol end to end")
    j.add_argument("--swap", action="store_true", default=None, help="judge both orders; disagreement is a tie")
    j.add_argument("--samples", type=int, default=None, metavar="K",
                   help="self-consistency voting: K independent judgments per order, majority verdict (default 1)")
    j.add_argument("--thinking", choices=("auto", "on", "off"), default=None, help="default: auto")
    j.add_argument("--temperature", type=float, default=None, help="default 1.0 (published; principle models: 0)")
    j.add_argument("--top-p", type=float, default=None, help="default 1.0 (published)")
    j.add_argument("--top-k", type=int, default=None,
                   help="sample among the k most likely tokens; default 0 = off (principle models: the checkpoint's)")
    j.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"per turn; default 8192 (published), {d['max_new_tokens']} for the embedded demo")
    j.add_argument("--max-total-tokens", type=int, default=None,
                   help=f"whole sequence; default 16384, {d['max_total_tokens']} for the embedded demo")
    j.add_argument("--block-token-cap", type=int, default=None,
                   help=f"constrained free-text block cap; default 512, {d['block_token_cap']} for the demo")
    j.add_argument("--seed", type=int, default=None, help="base seed (default 0); each item's streams derive "
                                                          "from it and the item's own key")
    j.add_argument("--max-retries", type=int, default=None, help="re-runs of failed/truncated judgments (default 0)")
    j.add_argument("--system-messages", choices=("include", "drop"), default=None,
                   help="System: lines in the context (default: include; faithful: drop)")
    j.add_argument("--tool-messages", choices=("include", "drop"), default=None,
                   help="Tool: lines and tool calls in the context (default: include; faithful: drop)")
    j.add_argument("--history-reasoning", choices=("strip", "keep"), default=None,
                   help="<think> blocks of earlier assistant turns (default: strip; faithful: keep)")
    j.add_argument("--neutralize-markers", choices=("on", "off"), default=None,
                   help="rewrite BR-RM markers inside record text (default: on; faithful: off)")
    j.add_argument("--verdict", choices=("last_after_thinking", "first"), default=None,
                   help="which ranking block of turn 2 counts (default: last_after_thinking; faithful: first)")
    j.add_argument("--history-think", choices=("text", "markup"), default=None,
                   help="tags of a kept <think> block of an earlier assistant turn: text, or the template's think "
                        "tokens as the released evaluation gives them (default: text; faithful: markup)")
    j.add_argument("--shortcuts", action=argparse.BooleanOptionalAction, default=None,
                   help="decide identical responses (tie) and a blank one (it loses) without a model call "
                        "(default: on; faithful: off, as the released evaluation)")
    j.add_argument("--turn2-tokens", default=None,
                   help="how turn 2's prompt ids are formed: auto (default), retokenize or concat (see BRRMConfig)")
    s = p.add_argument_group("scalar models (bt, principle)")
    s.add_argument("--principle", action="append", default=None,
                   help="principle for a principle model (repeatable: several are averaged when judging pairs)")
    s.add_argument("--recipe", default=None,
                   help="bt: auto, sequence_classification, qwen3_nemotron, llama_nemotron; principle: auto, "
                        "qwen3_genrm, llama_reward (default: from the model id)")
    s.add_argument("--max-length", type=int, default=None, help="bt: most tokens per input (default: model context)")
    s.add_argument("--truncation-side", choices=("left", "none"), default=None,
                   help="bt: drop the oldest conversation tokens (left, default) or mark over-long inputs truncated")
    s.add_argument("--keep-thinking", action="store_true", default=None,
                   help="do not strip a leading <think> block from responses")
    s.add_argument("--margin", type=float, default=None, help="scalar models: |r_A - r_B| <= margin is a tie (0)")
    s.add_argument("--reward", default=None,
                   help="principle (qwen3_genrm): clamped (default; the card's) or logit_diff")
    s.add_argument("--question", default=None,
                   help="principle (llama_reward): the final user turn, with {principle} in it")


_FLAG_OF = {"strip_history_reasoning": "--history-reasoning", "strip_thinking": "--keep-thinking",
            "strip_response_reasoning": "--keep-thinking"}


def load_options(args: argparse.Namespace) -> tuple[str | None, dict[str, Any]]:
    """(model, ``brrm.load`` keyword options) from the flags the user set (unset flags keep load's defaults)."""
    from brrm.backends.options import cli_fields
    from brrm.load import JUDGE_OPTIONS

    opts: dict[str, Any] = {"kind": args.kind, "backend": args.backend}
    judge_names = dict.fromkeys(name for names in JUDGE_OPTIONS.values() for name in names)
    for flag in (*cli_fields(), *judge_names):  # flags named as the option; the others are mapped below
        value = getattr(args, flag, None)
        if value is not None:
            opts[flag] = value
    if getattr(args, "history_reasoning", None):
        opts["strip_history_reasoning"] = args.history_reasoning == "strip"
    if getattr(args, "neutralize_markers", None):
        opts["neutralize_markers"] = args.neutralize_markers == "on"
    if getattr(args, "keep_thinking", None):
        opts["strip_thinking" if args.kind in ("bt", "principle") else "strip_response_reasoning"] = False
    if getattr(args, "principle", None):
        opts["principle"] = args.principle if len(args.principle) > 1 else args.principle[0]
    opts = _fit_kind(opts)
    if getattr(args, "calibration", None):
        from brrm.calibration.model import read_calibration

        read_calibration(args.calibration)  # a missing or malformed file is named before anything is read
        opts["calibration"] = args.calibration  # a brrm.load keyword, not a judge or backend option
    return args.model, opts


def _fit_kind(opts: dict[str, Any]) -> dict[str, Any]:
    """For an explicitly chosen kind, refuse judge flags that do not apply to it (naming the flag); ``--swap`` is
    dropped for scalar kinds (σ(r_A − r_B) does not depend on the order)."""
    from brrm.load import BACKEND_OPTIONS, JUDGE_OPTIONS

    kind, backend = opts["kind"], opts["backend"]
    judge_keys = {k for names in JUDGE_OPTIONS.values() for k in names}
    for key in sorted(opts):
        if key not in judge_keys and key not in BACKEND_OPTIONS[backend]:
            others = [b for b, names in BACKEND_OPTIONS.items() if key in names]
            if others:
                flag = _FLAG_OF.get(key, "--" + key.replace("_", "-"))
                raise ConfigError(f"{flag} applies to --backend {' or '.join(others)}, not {backend}")
    if kind == "auto":
        return opts
    if kind in ("bt", "principle"):
        opts.pop("swap", None)
    for key in sorted(opts):
        if key in ("kind", "backend") or key in JUDGE_OPTIONS[kind] or key in BACKEND_OPTIONS[backend]:
            continue
        flag = _FLAG_OF.get(key, "--" + key.replace("_", "-"))
        if kind == "bt" and key == "principle":
            raise ConfigError("Bradley–Terry models take no principle; drop --principle or use --kind principle")
        others = [b for b, names in BACKEND_OPTIONS.items() if key in names]
        if others:
            raise ConfigError(f"{flag} applies to --backend {' or '.join(others)}, not {backend}")
        raise ConfigError(f"{flag} does not apply to --kind {kind}")
    return opts


def load_judge(args: argparse.Namespace, *, kind: str | None = None) -> Any:
    """Build the judge with :func:`brrm.load` (the only place the CLI constructs models)."""
    import brrm

    _quiet_libraries()
    model, opts = load_options(args)
    if kind is not None and opts["kind"] == "auto" and model is None:
        opts["kind"] = kind
    return brrm.load(model, **opts)


def check_output(path: str) -> None:
    """Refuse an output path whose folder does not exist, before any model loads.

    Raises:
        ConfigError: naming ``--output`` and the missing folder.
    """
    if path == "-":
        return
    parent = Path(path).expanduser().resolve().parent
    if not parent.is_dir():
        raise ConfigError(f"--output {path!r}: folder {str(parent)!r} does not exist (create it first)")
    if Path(path).is_dir():
        raise ConfigError(f"--output {path!r} is a folder; give a file path")


def report_bad_records(records: Sequence[Any], term: TextIO, *, show: int = 5) -> int:
    """Print the first bad records' reasons (line, field, valid options); returns how many are bad."""
    from brrm.records import RecordError

    bad = [r for r in records if isinstance(r, RecordError)]
    for r in bad[:show]:
        print(f"skipped: {printable(r.reason)}", file=term)
    if len(bad) > show:
        print(f"skipped: … and {len(bad) - show} more bad records (see the output file)", file=term)
    return len(bad)


def require_records(records: Sequence[Any], source: str) -> None:
    """Refuse input with no valid record (before any model loads).

    Raises:
        ConfigError: for an empty file, or one whose every record is bad.
    """
    from brrm.records import RecordError

    if not records:
        raise ConfigError(f"--input {source!r} holds no records")
    if all(isinstance(r, RecordError) for r in records):
        raise ConfigError(f"--input {source!r}: none of its {len(records)} records is valid (first: "
                          f"{records[0].reason})")


def translate(message: str, parser: argparse.ArgumentParser) -> str:
    """Rewrite Python option names in an error message as the CLI flags that set them."""
    names = dict(FLAG_ALIASES)
    for action in _all_actions(parser):
        for opt in action.option_strings:
            if opt.startswith("--") and "_" in action.dest:  # plain words ("principle") stay prose
                names.setdefault(action.dest, opt)
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    pattern = re.compile(r"(?<![\w-])(" + alternatives + r")(?![\w-])")
    after_flag = re.compile(r"--[\w-]+[ =]$")  # "--kind principle": a flag's value is not a name to rewrite

    def rewrite(m: re.Match[str]) -> str:
        return m.group(1) if after_flag.search(message, 0, m.start()) else names[m.group(1)]

    return pattern.sub(rewrite, message) if names else message


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    out = list(parser._actions)
    for action in parser._actions:
        for sub in (getattr(action, "choices", None) or {}).values() if isinstance(
                getattr(action, "choices", None), dict) else ():
            out += _all_actions(sub)
    return out


def terminal(output: str) -> TextIO:
    """Where human-readable lines go: stderr when JSONL goes to stdout, else stdout."""
    return sys.stderr if output == "-" else sys.stdout


def open_output(path: str, *, append: bool = False) -> Any:
    """The output stream (stdout for ``-``); ``append`` keeps what the file holds (``--resume``)."""
    from contextlib import nullcontext

    return nullcontext(sys.stdout) if path == "-" else open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115


class OrderedLines:
    """JSONL lines in input order, each written and flushed as soon as it and every earlier line are known, so a
    killed run keeps every line before the first unfinished record (resume with ``--resume``).

    Args:
        out: the output stream.
        skip: positions already in the file (a resumed run): not written again.
    """

    def __init__(self, out: TextIO, skip: int = 0) -> None:
        self.out, self.next, self.skip = out, 0, skip
        self.pending: dict[int, dict[str, Any]] = {}

    def put(self, position: int, row: dict[str, Any]) -> None:
        """Line ``position`` (0-based, in input order) is ``row``."""
        import json

        self.pending[position] = row
        while self.next in self.pending:
            line = self.pending.pop(self.next)
            if self.next >= self.skip:
                self.out.write(json.dumps(line, ensure_ascii=False) + "\n")
                self.out.flush()
            self.next += 1


def resumed_lines(args: argparse.Namespace) -> int:
    """With ``--resume``: how many complete lines the existing ``--output`` file holds (a torn last line is cut
    off); 0 without ``--resume`` or when the file does not exist.

    Raises:
        ConfigError: ``--resume`` with output to stdout.
    """
    if not getattr(args, "resume", False):
        return 0
    if args.output == "-":
        raise ConfigError("--resume needs --output FILE (the file a killed run left)")
    path = Path(args.output)
    if not path.exists():
        return 0
    data = path.read_bytes()
    keep = data[:data.rfind(b"\n") + 1]
    if len(keep) < len(data):
        path.write_bytes(keep)
    return keep.count(b"\n")


def add_resume_arg(p: argparse.ArgumentParser) -> None:
    """``--resume``: keep the complete lines of an existing ``--output`` file and run only the records after them."""
    p.add_argument("--resume", action="store_true",
                   help="continue a killed run: keep the complete lines already in --output and append the rest "
                        "(results depend only on record, options and seed, so the file equals an unbroken run's)")


def _quiet_libraries() -> None:
    """Keep the terminal for our own progress bar and verdict lines (no per-library loading bars)."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def header(term: TextIO, command: str, judge: RewardJudge, n_records: int, source: str) -> None:
    """What runs: model, kind, backend and budgets (the demo budgets said as such)."""
    info = judge.info
    sampling = info.options.get("sampling", {})
    demo = info.model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    print(f"brrm {command}: {n_records} records from {source}; model {info.model}"
          f"{' (embedded demo; pass --model for a real judge)' if demo else ''}; {info.describe()}", file=term)
    if sampling:
        print(f"budgets: temperature {sampling['temperature']}, top_p {sampling['top_p']}, "
              f"{sampling['max_new_tokens_per_turn']} new tokens per turn, {sampling['max_total_tokens']} total, seed "
              f"{sampling['seed']}" + (" (small demo budgets; published: 8192 per turn, 16384 total)" if demo else ""),
              file=term)
    if info.pairwise and info.options.get("decoding") == "constrained":
        print("note: the first constrained run for a tokenizer compiles its output grammar once (seconds to a "
              "minute); it is cached on disk for later runs", file=term)


Runner = Callable[[argparse.Namespace], int]


def with_id(result: Any, rid: str) -> Any:
    """A judgment (and its swap sub-judgments) or reward carrying the record's id for output."""
    import dataclasses

    from brrm.types import PairwiseJudgment

    subs = tuple(dataclasses.replace(s, id=rid) for s in result.sub_judgments) if isinstance(
        result, PairwiseJudgment) else ()
    return dataclasses.replace(result, id=rid, **({"sub_judgments": subs} if subs else {}))


def printable(text: str) -> str:
    """Record text made safe for a terminal line: control characters (newlines, ANSI escapes) shown escaped, so a
    record cannot forge output lines or recolour the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
