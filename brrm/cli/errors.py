"""Error messages that name CLI flags: a Python option name in a :class:`~brrm.errors.BrrmError` is shown as the
flag that sets it (the judge options' names come from their dataclasses, :mod:`brrm.cli.flags`).
"""

from __future__ import annotations

import argparse
import re

from brrm.cli.flags import flag_of, python_names

BACKEND_ALIASES = {"base_urls": "base_url", "judge_chunk_size": "chunk_size"}
"""Names the backends' constructors use for options that :mod:`brrm.backends.options` names otherwise
(``OpenAIOptions.backend_kwargs``, ``VLLMOptions.backend_kwargs``): constructor name -> option."""


def translate(message: str, parser: argparse.ArgumentParser) -> str:
    """Rewrite Python option names in an error message as the CLI flags that set them."""
    names = {**{name: flag_of(option) for name, option in BACKEND_ALIASES.items()}, **python_names()}
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
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _all_actions(sub)
    return out


