"""Every model flag of every subcommand reaches a ``brrm.load`` option (backend flags: a field of the backend's
options dataclass, with a value that validates), and every CLI-facing backend field has its flag everywhere."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from brrm import ConfigError
from brrm.backends.options import (
    OPTION_CLASSES,
    OpenAIOptions,
    TransformersOptions,
    VLLMOptions,
    cli_fields,
    set_options,
)
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
    assert set(SUBCOMMANDS) == {"judge", "score", "rank", "arena", "bench", "audit", "serve", "calibrate",
                                "probe"}


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
    assert set_options(VLLMOptions(engine_kwargs='{"max_num_seqs": 4}', chunk_size=8)) == {
        "engine_kwargs": {"max_num_seqs": 4}, "chunk_size": 8}  # from_options passes them on under these names
    assert set_options(OpenAIOptions(base_url=["http://a/v1", "http://b/v1"], http_retries=1)) == {
        "base_url": ("http://a/v1", "http://b/v1"), "http_retries": 1}
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


# ------------------------------------------------------------------------------- judge options written once
SURFACE_ONLY = {
    # records in, results out
    "input", "output", "input_format", "field", "limit", "resume", "overwrite", "retry_failed", "no_progress", "quiet",
    "shape",
    "split",
    # the model to load and how (brrm.load's own keywords, not options of a dataclass)
    "model", "kind", "backend", "calibration",
    "cascade", "cascade_kind", "cascade_margin", "cascade_band", "cascade_agree", "cascade_options",
    # audit
    "status_dir", "slice_by", "low_margin", "max_flagged", "chunk_size", "summary_every", "probes", "strategy",
    "ray", "actors", "num_gpus_per_actor", "num_cpus_per_actor",
    # bench
    "subset", "data", "data_dir", "protocol", "orders", "order_seed", "predictions", "revision", "weighting",
    "sweep_samples",
    # calibrate, probe
    "report", "heldout", "split_seed", "bootstrap", "confidence", "top", "cascade_rule", "target",
    # arena
    "baseline", "round_robin", "anchor", "outcomes", "single_order", "bootstrap_seed", "no_style_control", "adaptive",
    "budget", "target_ci", "battles", "battles_format",
    # serve (the server's own settings)
    "host", "port", "api_key", "cors_origin", "log_level", "no_access_log", "no_warmup", "factory", "concurrency",
    "max_batch", "max_wait_ms", "max_queue", "max_items", "max_body_bytes", "max_field_chars", "deadline",
    "drain_timeout", "stall_timeout", "max_abandoned", "breaker_failures", "breaker_cooldown",
    "max_judgments_per_request", "compare_strategy",
    "failed_reward", "get_reward_mode", "strip_text",
    # serve --ray (the Ray Serve application's sizing)
    "replicas", "autoscale", "gpus_per_replica", "cpus_per_replica", "ingress_replicas", "app_name", "print_config",
}
"""Flags of the surfaces themselves (files, the command's own settings): no option of a judge or backend."""


def _every_subcommand():
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_flag_of_every_subcommand_is_an_option_field_or_declared_surface_only():
    from brrm.cli.flags import judge_flags

    option_dests = {jf.dest for jf in judge_flags()} | set(cli_fields())
    seen = set()
    for name, parser in _every_subcommand().items():
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            seen.add(action.dest)
            assert action.dest in option_dests or action.dest in SURFACE_ONLY, (name, action.option_strings)
    assert option_dests <= seen
    assert len(seen & option_dests) >= 50


def test_every_user_facing_judge_field_has_its_flag_with_the_fields_help():
    from brrm.cli.flags import judge_flags
    from brrm.load import judge_option_classes
    from brrm.types.options import keyword, option_fields

    by_keyword = {kw: jf for jf in judge_flags() for _, kw in jf.owners}
    for kind in KINDS:
        for cls in judge_option_classes(kind):
            for f in option_fields(cls):
                assert f.metadata["cli"], f"{cls.__name__}.{f.name} has no flag"  # every judge option is user-facing
                jf = by_keyword[keyword(f)]
                assert (kind, keyword(f)) in jf.owners
                for parser in SUBCOMMANDS.values():
                    action = next((a for a in parser._actions if jf.flag in a.option_strings), None)
                    if any(g.title == "judge (BR-RM)" for g in parser._action_groups):
                        assert action is not None and action.dest == jf.dest, (kind, jf.flag)
    samples = next(a for a in SUBCOMMANDS["judge"]._actions if "--samples" in a.option_strings)
    from brrm.compose.options import VoteOptions

    assert samples.help == VoteOptions.__dataclass_fields__["samples"].metadata["help"] and samples.metavar == "K"
    budget = next(a for a in SUBCOMMANDS["judge"]._actions if "--max-new-tokens" in a.option_strings)
    assert budget.help.endswith("default 8192 (published), 400 for the embedded demo") and budget.type is int


def test_an_option_is_defined_once_no_flag_literal_in_the_cli_sources():
    """Option flags exist only as fields: no string literal in brrm/cli equals a judge or backend option's flag
    (an ``add_argument("--decoding", …)`` or a hand-written rename map would)."""
    import ast
    from pathlib import Path

    import brrm.cli
    from brrm.cli.flags import judge_flags

    flags = {jf.flag for jf in judge_flags()} | {"--" + n.replace("_", "-") for n in cli_fields()}
    found = []
    for path in sorted(Path(brrm.cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in flags:
                found.append(f"{path.name}:{node.lineno} {node.value}")
    assert found == []
    assert len(flags) >= 50


def test_judge_configs_validate_and_load_splits_flat_keywords_by_field():
    import brrm
    from brrm.compose.options import PrincipleOptions, ScalarOptions, VoteOptions
    from brrm.judges.brrm import BRRMConfig
    from brrm.judges.principle import PrincipleConfig
    from brrm.reward_models.bradley_terry import BTConfig
    from brrm.types import SamplingConfig
    from brrm.types.options import changed_keywords, split_keywords

    with pytest.raises(ConfigError, match="block_token_cap must be an integer >= 8, got 2"):
        BRRMConfig(block_token_cap=2)
    with pytest.raises(ConfigError, match="truncation_side 'right' is not valid"):
        BTConfig(truncation_side="right")
    with pytest.raises(ConfigError, match="samples"):
        VoteOptions(samples=0)
    with pytest.raises(ConfigError, match="margin must be a finite number >= 0"):
        ScalarOptions(margin=-1)
    with pytest.raises(ConfigError, match="principle must be a non-empty string or a list of them"):
        PrincipleOptions(principle=["ok", " "])
    assert PrincipleOptions(principle=["a", "b"]).principle == ("a", "b")
    flat = {"max_new_tokens": 40, "temperature": 0, "decoding": "faithful", "recipe": "llama_reward", "dtype": "x"}
    assert split_keywords(SamplingConfig, flat) == {"max_new_tokens": 40, "temperature": 0}
    assert split_keywords(BRRMConfig, flat) == {"decoding": "faithful"}
    assert split_keywords(PrincipleConfig, flat) == {"decoding": "faithful", "format": "llama_reward"}
    config = BRRMConfig(decoding="faithful", sampling=SamplingConfig(temperature=0.5, max_new_tokens=30))
    assert changed_keywords(config) == {"decoding": "faithful", "temperature": 0.5, "max_new_tokens": 30}
    assert changed_keywords(PrincipleConfig()) == {}
    with pytest.raises(ConfigError, match="config is a BTConfig, for kind 'bt', not 'brrm'"):
        brrm.load("/nonexistent-model-dir", kind="brrm", config=BTConfig())
    with pytest.raises(ConfigError, match="unknown option 'samples' for kind 'bt'"):
        brrm.load("/nonexistent-model-dir", config=BTConfig(), samples=2)


def test_a_flag_shared_by_kinds_offers_every_kinds_choices_and_load_checks_the_kinds_own(capsys):
    """``--decoding`` is BR-RM's constrained/faithful and the principle model's card/constrained: the flag takes
    all three, and a choice that is not the kind's is refused naming the kind's own."""
    from brrm.cli import main

    decoding = next(a for a in _every_subcommand()["score"]._actions if "--decoding" in a.option_strings)
    assert set(decoding.choices) == {"constrained", "faithful", "card"}
    assert main(["judge", "--input", "missing.jsonl", "--decoding", "card"]) == 2
    assert "invalid choice" not in capsys.readouterr().err  # the flag takes it; what follows refuses it by kind


def test_load_refuses_config_for_a_served_judge():
    import brrm
    from brrm.reward_models.bradley_terry import BTConfig

    with pytest.raises(brrm.ConfigError, match="config= does not apply to backend='serve'"):
        brrm.load("http://127.0.0.1:9", backend="serve", config=BTConfig())


def test_every_kind_has_one_options_entry_and_it_imports():
    """The kind registry of load_options names every kind of brrm.types.KINDS, and every entry resolves."""
    from brrm.load_options import KIND_OPTIONS, judge_option_classes, recipe_choices
    from brrm.types import KINDS

    assert set(KIND_OPTIONS) == set(KINDS)
    for kind in KINDS:
        assert all(isinstance(cls, type) for cls in judge_option_classes(kind))
    assert recipe_choices("brrm") == () and recipe_choices("bt")[0] == recipe_choices("principle")[0] == "auto"
    assert len(recipe_choices("bt")) > 1 and len(recipe_choices("principle")) > 1
