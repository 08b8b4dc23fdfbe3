"""What every model-running subcommand shares, gathered from the modules of each concept: the model flags and the
one ``brrm.load`` call (:mod:`brrm.cli.flags`), records in and JSONL out (:mod:`brrm.cli.records`), error messages
that name flags (:mod:`brrm.cli.errors`), the progress bar, and the header line of what runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from brrm.backends.registry import BACKEND_REGISTRY
from brrm.cli.errors import error_line
from brrm.cli.flags import add_backend_args, add_judge_args, add_model_args, check_judge, load_judge, load_options
from brrm.cli.records import (
    OrderedLines,
    WrittenCount,
    add_input_args,
    add_overwrite_arg,
    add_resume_arg,
    add_retry_failed_arg,
    check_output,
    interrupted,
    note_ignored_principles,
    open_output,
    printable,
    refuse_overwrite,
    report_bad_records,
    report_duplicate_ids,
    report_resume,
    require_records,
    resumed_lines,
    terminal,
    with_id,
)
from brrm.progress import progress_bar
from brrm.types.protocols import RewardJudge

__all__ = ["OrderedLines", "WrittenCount", "add_backend_args", "add_input_args", "add_judge_args", "add_model_args",
           "add_overwrite_arg", "add_resume_arg", "add_retry_failed_arg", "check_judge", "check_output", "header",
           "interrupted", "load_judge", "load_options", "note_ignored_principles", "open_output", "printable",
           "progress_bar", "refuse_overwrite", "report_bad_records", "report_duplicate_ids", "report_resume",
           "require_records", "resumed_lines", "terminal", "error_line", "with_id"]


def header(term: TextIO, command: str, judge: RewardJudge, n_records: int, source: str, *, detail: str = "") -> None:
    """What runs: model, kind, backend and budgets (the demo budgets said as such). ``n_records``: the input's
    records (its rows); ``detail``: what they hold when that differs (``4 responses``), said in brackets."""
    info = judge.info
    sampling = info.sampling
    demo = info.model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    records = f"{n_records} {'record' if n_records == 1 else 'records'}" + (f" ({detail})" if detail else "")
    print(f"brrm {command}: {records} from {source}; model {info.model}"
          f"{' (embedded demo; pass --model for a real judge)' if demo else ''}; {info.describe()}", file=term)
    if sampling is not None:
        print(f"budgets: temperature {sampling.temperature}, top_p {sampling.top_p}, "
              f"{sampling.max_new_tokens} new tokens per turn, {sampling.max_total_tokens} total, seed "
              f"{sampling.seed}" + (" (small demo budgets; published: 8192 per turn, 16384 total)" if demo else ""),
              file=term)
    entry = BACKEND_REGISTRY.get(info.backend)
    if entry is not None and entry.in_process:
        from brrm.threads import CHOICE

        print(f"cpu: {CHOICE.describe()}", file=term)
    if info.pairwise and info.decoding == "constrained":
        _note_first_compile(term)


_COMPILE_NOTE: list[Callable[[], None]] = []
"""The remover of the one compile-note listener the running command registered; it lives as long as the command."""


def end_compile_note() -> None:
    """Remove the running command's compile-note listener (``brrm.cli.main`` calls it when the command returns or
    raises): a later compile in the same process, after the command and its terminal stream are gone, says nothing."""
    while _COMPILE_NOTE:
        _COMPILE_NOTE.pop()()


def _note_first_compile(term: TextIO) -> None:
    """Say once, when it happens, that an output grammar is being compiled (neither in memory nor on disk yet):
    a run whose grammars are cached prints nothing."""
    from brrm.constraints.compile import on_compile

    end_compile_note()

    def note() -> None:
        from brrm.progress import note as write_note

        end_compile_note()  # through tqdm's writer: a running bar is cleared first and redrawn below the line
        write_note("note: compiling the output grammar for this tokenizer once (seconds to a minute); it is cached "
                   "on disk for later runs", file=term)

    _COMPILE_NOTE.append(on_compile(note))
