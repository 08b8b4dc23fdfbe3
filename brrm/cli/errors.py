"""Error messages that name CLI flags: a :class:`~brrm.errors.ConfigError` carries the option it refuses
(:attr:`~brrm.errors.ConfigError.field`, and the option names it lists), and the CLI shows the same message with
the flag that sets each, looked up here (the judge options' flags come from their dataclasses,
:mod:`brrm.cli.flags`; the backends' from :mod:`brrm.backends.options`; the rest from the parser). The library's
text names keywords for Python callers (``temperature must be …``); the CLI's names flags (``--temperature must
be …``). Nothing is parsed out of the message.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from brrm.cli.flags import flag_of, judge_flags, python_names
from brrm.errors import ConfigError

BACKEND_ALIASES = {"base_urls": "base_url"}
"""Names the backends' constructors use for options that :mod:`brrm.backends.options` names otherwise
(``OpenAIBackend.connect`` takes its URLs as one list, ``base_urls``): constructor name -> option."""

NOT_OPTIONS = frozenset({"field", "status"})
"""Names that are flags' names but, as the field of the library's errors, name something else (a record's field, a
result's status)."""


def error_line(exc: BaseException, parser: argparse.ArgumentParser, command: str | None = None) -> str:
    """The message of ``exc`` with the options it names shown as the CLI flags that set them.

    A :class:`ConfigError` names its field (and the options it lists) by lookup (:meth:`ConfigError.naming`); an
    error raised without a field whose message opens with an option's Python name (one with an underscore, which
    is no English word: ``api_key must be …``) gets that name's flag.

    Args:
        exc: the error.
        parser: the ``brrm`` parser.
        command: the subcommand that ran (its own flags name plain words; None: every subcommand's).
    """
    names = option_names(parser, command)
    if isinstance(exc, ConfigError) and exc.field is not None:
        return exc.naming(lambda option: names.get(option, option))
    message = str(exc)
    first = message.split(" ", 1)[0]
    return names[first] + message[len(first):] if "_" in first and first in names else message


def option_names(parser: argparse.ArgumentParser, command: str | None) -> Mapping[str, str]:
    """Option names (Python keywords, dataclass fields, argparse destinations) -> the flag that sets each."""
    from brrm.backends.options import cli_fields

    every: dict[str, str] = {name: flag_of(option) for name, option in BACKEND_ALIASES.items()}
    every.update(python_names())
    for jf in judge_flags():
        for (_, kw), f in zip(jf.owners, jf.fields, strict=True):
            every.setdefault(kw, jf.flag)
            every.setdefault(f.name, jf.flag)
    for name in cli_fields():
        every.setdefault(name, "--" + name.replace("_", "-"))
    for action in _actions(parser, command):
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest != argparse.SUPPRESS:
            every.setdefault(action.dest, longs[0])
    return {k: v for k, v in every.items() if k not in NOT_OPTIONS}


def _actions(parser: argparse.ArgumentParser, command: str | None) -> list[argparse.Action]:
    """The actions of ``command``'s parser (and the top parser's), or of every subcommand's when None."""
    out = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if command is None or name == command:
                    out += _actions(sub, None)
    return out
