"""Error messages that name CLI flags: a Python option name in a :class:`~brrm.errors.BrrmError` is shown as the
flag that sets it (the judge options' names come from their dataclasses, :mod:`brrm.cli.flags`).

The library's messages name keywords for Python callers (``temperature must be …``, ``recipe 'x' is not valid``,
``pass recipe= one of …``, ``unknown option 'principle' …; valid options: device, dtype, …``); the CLI shows the
same message with the flags its user typed (``--temperature must be …``). A name with an underscore is rewritten
wherever it stands; a plain word (``principle``, ``device``) only where it is used as an option's name — opening a
clause before ``must`` or a quoted value, before ``=``, quoted after ``option``, or in a ``valid options:`` list —
so prose such as "principle models" stays prose.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping

from brrm.cli.flags import flag_of, judge_flags, python_names

BACKEND_ALIASES = {"base_urls": "base_url"}
"""Names the backends' constructors use for options that :mod:`brrm.backends.options` names otherwise
(``OpenAIBackend.connect`` takes its URLs as one list, ``base_urls``): constructor name -> option."""

NOT_OPTIONS = frozenset({"field", "status"})
"""Plain words that are flags' names but, in the library's messages, name something else (a record's field, a
result's status)."""

_AFTER_FLAG = re.compile(r"--[\w-]+[ =]$")  # "--kind principle": a flag's value is not a name to rewrite
_ON_THE_COMMAND_LINE = re.compile(r" \((--[\w-]+) on the command line\)")


def translate(message: str, parser: argparse.ArgumentParser, command: str | None = None) -> str:
    """Rewrite Python option names in an error message as the CLI flags that set them.

    Args:
        message: the library's message.
        parser: the ``brrm`` parser.
        command: the subcommand that ran (its own flags name plain words; None: every subcommand's).
    """
    names, plain = option_names(parser, command)
    out = _rewrite_assignments(message, {**names, **plain})
    out = _rewrite_lists(out, {**names, **plain})
    if names:
        out = _sub(_names_pattern(names, r""), out, names)
    if plain:
        clause = re.compile(r"(?:^|(?<=; )|(?<=: )|(?<=\())(" + _alternatives(plain) + r")(?=\s+(?:must\b|'))")
        out = _sub(clause, out, plain)
        quoted = re.compile(r"(?<=option )'(" + _alternatives(plain) + r")'")
        out = quoted.sub(lambda m: plain[m.group(1)], out)
    # "pass --kind (--kind on the command line) one of …": the flag once
    return _ON_THE_COMMAND_LINE.sub(lambda m: "" if m.group(1) in out[:m.start()] else m.group(0), out)


def option_names(parser: argparse.ArgumentParser, command: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(names with an underscore, plain-word names) of options -> the flag that sets each."""
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
    plain = {k: v for k, v in every.items() if "_" not in k and k not in NOT_OPTIONS}
    return {k: v for k, v in every.items() if "_" in k}, plain


def _alternatives(names: Mapping[str, str]) -> str:
    return "|".join(sorted(map(re.escape, names), key=len, reverse=True))


def _names_pattern(names: Mapping[str, str], after: str) -> re.Pattern[str]:
    # not part of a longer word, a flag, a path or a dotted field ("items[0].principle", "options.seed")
    return re.compile(r"(?<![\w\-./{\[])(" + _alternatives(names) + r")(?![\w\-/}\]])" + after)


def _sub(pattern: re.Pattern[str], message: str, names: Mapping[str, str]) -> str:
    def rewrite(m: re.Match[str]) -> str:
        return m.group(1) if _AFTER_FLAG.search(message, 0, m.start()) else names[m.group(1)]

    return pattern.sub(rewrite, message)


def _rewrite_assignments(message: str, names: Mapping[str, str]) -> str:
    """``recipe='x'`` -> ``--recipe x``; ``recipe=`` before a space -> ``--recipe``."""
    if not names:
        return message
    pattern = re.compile(r"(?<![\w\-./{\[])(" + _alternatives(names) + r")=(?:'([^']*)'|(?=[\s,;)]|$))")
    return pattern.sub(lambda m: names[m.group(1)] + (f" {m.group(2)}" if m.group(2) is not None else ""), message)


def _rewrite_lists(message: str, names: Mapping[str, str]) -> str:
    """Each name in a ``valid options: a, b, c`` (or ``valid: …``) list -> its flag."""
    def each(m: re.Match[str]) -> str:
        items = [names.get(item.strip(), item.strip()) for item in m.group(2).split(",")]
        return m.group(1) + ", ".join(items)

    return re.sub(r"(valid(?: options)?: )([\w\-]+(?:, [\w\-]+)*)", each, message)


def _actions(parser: argparse.ArgumentParser, command: str | None) -> list[argparse.Action]:
    """The actions of ``command``'s parser (and the top parser's), or of every subcommand's when None."""
    out = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if command is None or name == command:
                    out += _actions(sub, None)
    return out
