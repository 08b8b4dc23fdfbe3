"""Every model flag of every subcommand reaches a ``brrm.load`` option (backend flags: a field of the backend's
options dataclass, with a value that validates), and every CLI-facing backend field has its flag everywhere."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from brrm import ConfigError
from brrm.backends.options import OPTION_CLASSES, OpenAIOptions, TransformersOptions, VLLMOptions, cli_fields
from brrm.cli import build_parser
from brrm.cli.common import load_options
from brrm.load import BACKEND_OPTIONS, judge_option_names
from brrm.types import KINDS

JUDGE_OPTIONS = {kind: judge_option_names(kind) for kind in KINDS}  # the option fields of each kind's dataclasses

MODEL_GROUPS = ("model", "backend", "judge (BR-RM)", "scalar models (bt, principle)")


def _subcommands():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in sub.choices.items() if any(g.title == "backend" for g in p._action_groups)}


def _flag_actions(parser):
    for group in parser._action_groups:
        if group.title in MODEL_GROUPS:
            for action in group._group_actions:
                if action.option_strings and action.help != argparse.SUPPRESS:
                    yield group.title, action


def _argv(parser, action):
    """The subcommand's required flags plus ``action`` set to a valid value."""
    argv = []
    for a in parser._actions:
        if a.required and a.option_strings:
            argv += [a.option_strings[0], "x"]
        elif not a.option_strings and a.nargs is None and a.dest != "help":
            argv.append(sorted(a.choices)[0] if a.choices else "x")
    flag = action.option_strings[-1 if isinstance(action, argparse.BooleanOptionalAction) else 0]
    if action.nargs == 0:
        return [*argv, flag]
    if action.choices:
        value = list(action.choices)[-1]
    elif action.type is int:
        value = "2"
    elif action.type is float:
        value = "0.5"
    elif action.dest == "engine_kwargs":
        value = '{"max_num_seqs": 4}'
    elif action.dest == "batch_invariant":
        value = "true"
    else:
        value = "x"
    return [*argv, flag, value]


SUBCOMMANDS = _subcommands()


def test_the_model_running_subcommands_are_found():
    assert set(SUBCOMMANDS) == {"judge", "score", "rank", "bench", "audit", "serve", "calibrate", "probe"}


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_model_flag_reaches_a_load_option(name):
    parser = SUBCOMMANDS[name]
    seen = 0
    for group, action in _flag_actions(parser):
        if action.dest in ("model", "kind", "backend", "calibration"):  # calibration: load's own keyword, a file
            continue
        args = parser.parse_args(_argv(parser, action))
        if group == "backend":
            owners = [b for b, names in BACKEND_OPTIONS.items() if action.dest in names]
            assert owners, f"{action.option_strings[0]} is no field of a backend options class"
            args.backend = owners[0]
            value = getattr(args, action.dest)
            OPTION_CLASSES[owners[0]](**{action.dest: value})  # the flag's value validates in the dataclass
        _, opts = load_options(args)
        keys = set(opts) - {"kind", "backend"}
        assert len(keys) == 1, (action.option_strings, opts)
        valid = {o for names in (*BACKEND_OPTIONS.values(), *JUDGE_OPTIONS.values()) for o in names}
        assert keys <= valid, (action.option_strings, keys)
        seen += 1
    assert seen >= 40


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_cli_facing_backend_field_has_its_flag(name):
    dests = {a.dest for g, a in _flag_actions(SUBCOMMANDS[name]) if g == "backend"}
    assert dests == set(cli_fields())
    every = {f.name for cls in (TransformersOptions, VLLMOptions, OpenAIOptions) for f in fields(cls)}
    assert every - dests == {"api_key", "chunk_size"}  # a secret and a Python-only tuning knob


def test_backend_options_validate_before_anything_loads():
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1, got 0"):
        TransformersOptions(batch_size=0)
    with pytest.raises(ConfigError, match=r"gpu_memory_utilization must be a finite number in \(0, 1\]"):
        VLLMOptions(gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError, match="engine_kwargs must be a JSON object"):
        VLLMOptions(engine_kwargs="[1]")
    assert VLLMOptions(engine_kwargs='{"max_num_seqs": 4}', chunk_size=8).backend_kwargs() == {
        "engine_kwargs": {"max_num_seqs": 4}, "judge_chunk_size": 8}
    assert OpenAIOptions(base_url=["http://a/v1", "http://b/v1"], http_retries=1).backend_kwargs() == {
        "base_urls": ["http://a/v1", "http://b/v1"], "max_retries": 1}
    with pytest.raises(ConfigError, match="unexpected keyword|prefix_cach"):
        import brrm

        brrm.load("/nonexistent-model-dir", backend="transformers", prefix_cach=True)


def test_a_backend_flag_of_another_backend_is_refused_naming_it():
    parser = SUBCOMMANDS["judge"]
    args = parser.parse_args(["--input", "x", "--backend", "openai", "--no-prefix-cache"])
    with pytest.raises(ConfigError, match="--prefix-cache applies to --backend transformers, not openai"):
        load_options(args)


def test_load_options_typed_dict_names_every_option_once():
    from brrm.load import LoadOptions

    every = {o for names in (*BACKEND_OPTIONS.values(), *JUDGE_OPTIONS.values()) for o in names}
    assert set(LoadOptions.__annotations__) == every


def test_every_load_option_has_a_flag():
    """Every judge option of every kind and every CLI-facing backend option is reachable from a flag."""
    reached: set[str] = set()
    for parser in SUBCOMMANDS.values():
        for _, action in _flag_actions(parser):
            if action.dest in ("model", "kind", "backend", "calibration"):
                continue
            args = parser.parse_args(_argv(parser, action))
            args.backend = next((b for b, names in BACKEND_OPTIONS.items() if action.dest in names), args.backend)
            reached |= set(load_options(args)[1]) - {"kind", "backend"}
    judge = SUBCOMMANDS["judge"]
    reached |= set(load_options(judge.parse_args(["--input", "x", "--kind", "bt", "--keep-thinking"]))[1])
    every = {o for names in JUDGE_OPTIONS.values() for o in names} | set(cli_fields())
    assert every - reached == set()
