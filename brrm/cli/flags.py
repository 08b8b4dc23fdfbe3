"""The model flags of every model-running subcommand, derived from the options dataclasses, and the one
``brrm.load`` call.

Backend flags come from :mod:`brrm.backends.options`, judge flags from the option fields of each kind's
dataclasses (:func:`brrm.load.judge_option_classes`): a flag's name, help, type, choices and command-line form
(:class:`~brrm.types.options.Flag`) are the field's, and one flag serves every kind that has the option. Adding an
option is one field; no flag is written here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, replace
from functools import cache
from typing import TypedDict, cast

from brrm.errors import ConfigError
from brrm.load import EMBEDDED_BUDGETS
from brrm.load_options import LoadOptions
from brrm.registry import KIND_REGISTRY
from brrm.types import BACKENDS, KINDS, JudgeSpec, RewardJudge
from brrm.types.options import Flag, keyword, option_fields
from brrm.types.protocols import kind_trait

KIND_GROUPS: Mapping[str, str] = KIND_REGISTRY.view(lambda entry: entry.group)
"""The help group of a judge flag: that of the first kind that has its option (each kind's
:class:`~brrm.registry.KindEntry` names its group)."""


class LoadKeywords(LoadOptions, total=False):
    """What :func:`load_options` gives :func:`brrm.load`: its options and its own keywords."""

    kind: str
    backend: str
    calibration: str
    cascade: str
    cascade_kind: str
    cascade_margin: float
    cascade_band: float
    cascade_agree: bool
    cascade_options: Mapping[str, object]


class _ArgKeywords(TypedDict, total=False):
    """The ``add_argument`` keywords a field's flag takes beyond its name, dest, default and help."""

    action: str | type[argparse.Action]
    choices: tuple[str, ...]
    type: Callable[[str], object]
    metavar: str
    const: bool


@dataclass(frozen=True)
class JudgeFlag:
    """One judge flag: its form, and the (kind, keyword) of every option it sets.

    Attributes:
        flag: the flag (``--history-reasoning``).
        form: its command-line form (the first owner field's :class:`~brrm.types.options.Flag`).
        owners: (kind, :func:`brrm.load` keyword) of each option it sets, kinds in :data:`~brrm.types.KINDS`
            order.
        fields: the option field of each owner (same order).
    """

    flag: str
    form: Flag
    owners: tuple[tuple[str, str], ...]
    fields: tuple[Field[object], ...]

    @property
    def dest(self) -> str:
        """The argparse destination (the flag without dashes)."""
        return self.flag[2:].replace("-", "_")

    def keyword_for(self, kind: str) -> str:
        """The keyword this flag sets for ``kind`` (``auto`` or a kind without the option: the first owner's)."""
        return next((k for owner, k in self.owners if owner == kind), self.owners[0][1])

    def help(self) -> str:
        """The fields' help (one text per distinct meaning, each with the kinds it is for), with the embedded
        demo's budget when it has one."""
        texts: dict[str, list[str]] = {}
        for (kind, _), f in zip(self.owners, self.fields, strict=True):
            form = f.metadata.get("flag")
            text = form.help if isinstance(form, Flag) and form.help else str(f.metadata["help"])
            texts.setdefault(text, []).append(kind)
        out = next(iter(texts)) if len(texts) == 1 else "; ".join(f"{', '.join(k)}: {t}" for t, k in texts.items())
        demo = EMBEDDED_BUDGETS.get(self.owners[0][1])
        return out + (f", {demo} for the embedded demo" if demo is not None else "")

    def value(self, raw: object) -> object:
        """The option's value from the parsed flag value (a word's meaning; one repeat's value itself)."""
        if self.form.words is not None and isinstance(raw, str):
            return self.form.words[raw]
        if self.form.repeat and isinstance(raw, list) and len(raw) == 1:
            return raw[0]
        return raw


def judge_flags() -> tuple[JudgeFlag, ...]:
    """Every judge flag, in definition order (brrm's options first, then those of kinds other packages add).

    Raises:
        AssertionError: when two fields of one keyword declare different command-line forms (a programming
            error: an option's flag is written once).
    """
    return _judge_flags(tuple(KINDS))


@cache
def _judge_flags(kinds: tuple[str, ...]) -> tuple[JudgeFlag, ...]:
    from brrm.load_options import judge_option_classes

    found: dict[str, list[tuple[str, str, Field[object]]]] = {}
    for kind in kinds:
        for cls in judge_option_classes(kind):
            for f in option_fields(cls):
                if f.metadata.get("cli", True):
                    form = f.metadata.get("flag") or Flag()
                    flag = form.name or "--" + keyword(f).replace("_", "-")
                    found.setdefault(flag, []).append((kind, keyword(f), f))
    out = []
    for flag, owners in found.items():
        assert all(_form(f) == _form(owners[0][2]) for _, _, f in owners), f"{flag}: fields declare different forms"
        out.append(JudgeFlag(flag, _form(owners[0][2]), tuple((k, kw) for k, kw, _ in owners),
                             tuple(f for _, _, f in owners)))
    return tuple(out)


def _form(f: Field[object]) -> Flag:
    """The field's command-line form without its help (fields of one flag may word their help apart)."""
    form = f.metadata.get("flag")
    return replace(form, help="") if isinstance(form, Flag) else Flag()


def flag_of(keyword_name: str) -> str:
    """The CLI flag that sets the :func:`brrm.load` keyword ``keyword_name``."""
    for jf in judge_flags():
        if any(kw == keyword_name for _, kw in jf.owners):
            return jf.flag
    return "--" + keyword_name.replace("_", "-")


def python_names() -> dict[str, str]:
    """Python names of judge options (field names and keywords with an underscore) -> the flag that sets them,
    for error messages (plain words such as ``principle`` stay prose)."""
    out: dict[str, str] = {}
    for jf in judge_flags():
        for (_, kw), f in zip(jf.owners, jf.fields, strict=True):
            for name in (f.name, kw):
                if "_" in name:
                    out.setdefault(name, jf.flag)
    return out


# ------------------------------------------------------------------------------------------------ parser
def add_model_args(p: argparse.ArgumentParser, *, default_kind: str = "auto", judge_flags: bool = True) -> None:
    """``--model``, ``--kind``, ``--backend`` and every backend and judge option of :func:`brrm.load`."""
    g = p.add_argument_group("model")
    g.add_argument("--model", "-m", default=None,
                   help="hub id or local dir (e.g. nvidia/Qwen3-Nemotron-14B-BRRM); default: the embedded "
                        "SmolLM2-135M-Instruct demo model (offline)")
    g.add_argument("--kind", choices=("auto", *KINDS), default=default_kind,
                   help="brrm: two-turn BR-RM judge; bt: Bradley-Terry scalar RM; principle: RLBFF principle RM; "
                        f"auto: from a known id or the model's config (default: {default_kind})")
    g.add_argument("--model-type", dest="kind", choices=KINDS, help=argparse.SUPPRESS)
    g.add_argument("--backend", choices=BACKENDS, default="transformers", help="model runner (default: transformers)")
    g.add_argument("--calibration", default=None, metavar="CALIB_JSON",
                   help="apply a calibration written by `brrm calibrate`: P(A>B) calibrated, the raw one kept")
    add_cascade_args(p.add_argument_group("cascade"))
    add_backend_args(p.add_argument_group("backend"))
    if judge_flags:
        add_judge_args(p)


CASCADE_KEYWORDS = ("cascade", "cascade_kind", "cascade_margin", "cascade_band", "cascade_agree", "cascade_options")
"""The :func:`brrm.load` keywords of a judge cascade (:mod:`brrm.load_cascade`), each set by its own flag."""


def add_cascade_args(g: argparse._ArgumentGroup) -> None:
    """``--cascade MODEL`` and its rule and second-judge flags (:data:`CASCADE_KEYWORDS`); unset keeps no cascade."""
    g.add_argument("--cascade", default=None, metavar="MODEL",
                   help="a judge cascade: this second judge (hub id, local dir or brrm serve URL) decides every pair "
                        "the --model judge is not confident about or fails on; give one rule: --cascade-margin, "
                        "--cascade-band or --cascade-agree")
    g.add_argument("--cascade-kind", choices=("auto", *KINDS), default=None,
                   help="the second judge's kind, where its checkpoint does not tell (default: auto)")
    g.add_argument("--cascade-margin", type=float, default=None, metavar="M",
                   help="cascade rule: confident when a Bradley-Terry margin |r_A - r_B| > M (reward units, >= 0)")
    g.add_argument("--cascade-band", type=float, default=None, metavar="D",
                   help="cascade rule: confident when P(A>B) is outside [0.5 - D, 0.5 + D] (D in [0, 0.5))")
    g.add_argument("--cascade-agree", action="store_true", default=None,
                   help="cascade rule: confident when every swap order and voting sample of the first judge agrees "
                        "(needs --swap or --samples > 1)")
    g.add_argument("--cascade-options", type=_json_object, default=None, metavar="JSON",
                   help="the second judge's brrm.load options as a JSON object, e.g. "
                        "'{\"thinking\": \"off\", \"max_new_tokens\": 2048}' (default: its own; backend: --backend's)")


def _json_object(text: str) -> dict[str, object]:
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object of brrm.load options, got {text!r}")
    return value


def _cascade_keywords(given: Mapping[str, object]) -> dict[str, object]:
    """The cascade keywords the flags set.

    Raises:
        ConfigError: for a cascade flag without ``--cascade``.
    """
    chosen = {k: given[k] for k in CASCADE_KEYWORDS if given.get(k) is not None}
    if chosen and "cascade" not in chosen:
        flag = "--" + next(iter(chosen)).replace("_", "-")
        raise ConfigError(f"{flag} applies to a judge cascade: name its second judge with --cascade MODEL")
    return chosen


def add_backend_args(group: argparse._ArgumentGroup) -> None:
    """One flag per backend option field (:mod:`brrm.backends.options`): its name, help, type and choices come
    from the field; unset (None) keeps the backend's default."""
    from brrm.backends.options import cli_fields

    for name, owners in cli_fields().items():
        f = owners[0][1]
        where = ", ".join(b for b, _ in owners)
        group.add_argument("--" + name.replace("_", "-"), dest=name, default=None,
                           help=f"{where}: {f.metadata['help']}", **_typed(f, str(f.type)))


def add_judge_args(p: argparse.ArgumentParser) -> None:
    """One flag per judge option (:func:`judge_flags`), in its kind's group; unset (None) keeps load's default."""
    groups = {title: p.add_argument_group(title) for title in dict.fromkeys(KIND_GROUPS.values())}
    for jf in judge_flags():
        f, form = jf.fields[0], jf.form
        extra: _ArgKeywords
        if form.store is not None:
            extra = {"action": "store_const", "const": form.store}
        elif form.words is not None:
            extra = {"choices": tuple(form.words)}
        elif form.repeat:
            extra = {"action": "append"}
        else:
            extra = _typed(f, str(f.type))
            # one flag for every kind that has the option: its choices are all kinds' (load checks the kind's own)
            choices = tuple(dict.fromkeys(c for g in jf.fields for c in g.metadata.get("choices") or ()))
            if choices:
                extra["choices"] = choices
        if form.metavar:
            extra["metavar"] = form.metavar
        groups[KIND_GROUPS[jf.owners[0][0]]].add_argument(jf.flag, dest=jf.dest, default=None, help=jf.help(),
                                                          **extra)


def _typed(f: Field[object], kind: str) -> _ArgKeywords:
    """argparse keywords for a field of type ``kind`` (its annotation) and declared choices."""
    extra: _ArgKeywords = {"choices": f.metadata["choices"]} if f.metadata.get("choices") else {}
    if kind.startswith("bool | str"):
        return {"type": _bool_or_auto, "metavar": "{true,false,auto}"}
    if kind.startswith("bool"):
        return {"action": argparse.BooleanOptionalAction}
    if kind.startswith("int"):
        extra["type"] = int
    elif kind.startswith("float"):
        extra["type"] = float
    elif "tuple[str" in kind:
        extra["action"] = "append"
    return extra


def _bool_or_auto(text: str) -> bool | str:
    values: dict[str, bool | str] = {"true": True, "false": False, "auto": "auto"}
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"expected true, false or auto, got {text!r}")
    return values[text.lower()]


# ------------------------------------------------------------------------------------------------ options
def load_options(args: argparse.Namespace) -> tuple[str | None, LoadKeywords]:
    """(model, ``brrm.load`` keyword options) from the flags the user set (unset flags keep load's defaults).

    Raises:
        ConfigError: for a flag that does not apply to the chosen kind or backend (naming the flag), or a
            calibration file that is missing or malformed.
    """
    from brrm.backends.options import cli_fields

    given = vars(args)
    kind = str(given["kind"])
    opts: dict[str, object] = {"kind": kind, "backend": given["backend"]}
    for name in cli_fields():
        if given.get(name) is not None:
            opts[name] = given[name]
    for jf in judge_flags():
        if given.get(jf.dest) is not None:
            opts[jf.keyword_for(kind)] = jf.value(given[jf.dest])
    model = given.get("model")
    opts = fit_kind(opts, model=None if model is None else str(model))
    if given.get("calibration"):
        from brrm.types.calibration import read_calibration

        read_calibration(given["calibration"])  # a missing or malformed file is named before anything is read
        opts["calibration"] = given["calibration"]  # a brrm.load keyword, not a judge or backend option
    opts.update(_cascade_keywords(given))  # brrm.load's own keywords too (load_cascade.py checks them)
    # argparse's values are untyped: the options dataclasses check each one's type and range when loading
    return (None if model is None else str(model)), cast(LoadKeywords, opts)


def fit_kind(opts: dict[str, object], *, model: str | None = None) -> dict[str, object]:
    """Refuse judge flags that do not apply to the kind (naming the flag): the chosen one, or under ``--kind auto``
    the one ``model``'s config or known id tells (read from disk, before any weights load; :func:`detected_kind`).

    Raises:
        ConfigError: for a backend flag of another backend, a judge flag of another kind, or a ``--recipe`` value
            the kind does not take (:func:`brrm.load_options.recipe_choices`).
    """
    from brrm.load_options import BACKEND_OPTIONS, judge_option_names, recipe_choices
    from brrm.types import check_choice

    kind, backend = str(opts["kind"]), str(opts["backend"])
    judge_keys = {k for each in KINDS for k in judge_option_names(each)}
    for key in sorted(opts):
        if key not in judge_keys and key not in BACKEND_OPTIONS[backend]:
            _refuse_backend_flag(key, backend, BACKEND_OPTIONS)
    detected = kind == "auto"
    kind = detected_kind(model) if detected else kind
    if kind == "auto":
        return opts
    if "recipe" in opts and recipe_choices(kind):  # one flag, two kinds' values: checked once the kind is known
        check_choice("recipe", str(opts["recipe"]), recipe_choices(kind))
    for key in sorted(opts):
        if key in ("kind", "backend") or key in judge_option_names(kind) or key in BACKEND_OPTIONS[backend]:
            continue
        if not kind_trait(kind, "pairwise") and not kind_trait(kind, "takes_principle") and key in _principle_only():
            raise ConfigError(principle_refusal(model if detected else None, key))
        _refuse_backend_flag(key, backend, BACKEND_OPTIONS)
        raise ConfigError(f"{flag_of(key)} does not apply to " + (f"{model!r}, a kind {kind} model (from its "
                                                                  "config)" if detected else f"--kind {kind}"))
    return opts


def detected_kind(model: str | None) -> str:
    """The kind of ``model`` from its known id or the ``config.json`` of its folder or hub cache (never the network,
    no weights); ``auto`` when that does not tell (:func:`brrm.load` decides, or says why it cannot)."""
    from brrm.recipes import detect_kind, model_config

    if model is None:
        return "auto"
    try:
        return detect_kind(model, model_config(model))[0]
    except (ConfigError, OSError, ValueError):  # unreadable or ambiguous: brrm.load reports it with the fix
        return "auto"


def principle_refusal(model: str | None, key: str = "principle") -> str:
    """The one-line refusal of ``--principle`` (or another principle model's option) for a Bradley–Terry model:
    the explicit ``--kind bt``'s, or that of ``model`` when its config told the kind."""
    if model is None:
        return f"Bradley–Terry models take no {key}; drop {flag_of(key)} or use --kind principle"
    return (f"{model!r} is a Bradley–Terry model (kind bt) and Bradley–Terry models take no {key}; drop "
            f"{flag_of(key)} (only principle models, --kind principle, take one)")


def _principle_only() -> set[str]:
    """The options a principle model's composition adds over any scalar model's (its principles)."""
    from brrm.compose.options import PrincipleOptions, ScalarOptions

    return {keyword(f) for f in option_fields(PrincipleOptions)} - {keyword(f) for f in option_fields(ScalarOptions)}


def _refuse_backend_flag(key: str, backend: str, options: Mapping[str, tuple[str, ...]]) -> None:
    others = [b for b, names in options.items() if key in names]
    if others:
        raise ConfigError(f"{flag_of(key)} applies to --backend {' or '.join(others)}, not {backend}")


def load_judge(args: argparse.Namespace, *, kind: str | None = None) -> RewardJudge:
    """Build the judge with :func:`brrm.load` (the only place the CLI constructs models)."""
    import brrm

    quiet_libraries()
    model, opts = _judge_options(args, kind)
    return brrm.load(model, **opts)


def check_judge(args: argparse.Namespace, *, kind: str | None = None) -> None:
    """Check what :func:`load_judge` would load, without loading it (:func:`brrm.load.check`).

    Raises:
        ConfigError, BackendUnavailable: naming the flag or the model, as loading would.
    """
    from brrm.load import check

    model, opts = _judge_options(args, kind)
    check(model, **opts)


def judge_spec(args: argparse.Namespace, *, kind: str | None = None) -> JudgeSpec:
    """What :func:`load_judge` would load, as a :class:`~brrm.JudgeSpec` (what each Ray actor or replica loads; this
    process loads no model); the options are checked by ``JudgeSpec``."""
    from brrm.types import JudgeSpec

    model, opts = _judge_options(args, kind)
    return JudgeSpec.from_load(model, **opts)


def _judge_options(args: argparse.Namespace, kind: str | None) -> tuple[str | None, LoadKeywords]:
    """:func:`load_options`, with ``kind`` for the embedded demo when the flags leave it ``auto``."""
    model, opts = load_options(args)
    if kind is not None and opts["kind"] == "auto" and model is None:
        opts["kind"] = kind
    return model, opts


def quiet_libraries() -> None:
    """Keep the terminal for our own progress bar and verdict lines (no per-library loading bars)."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
