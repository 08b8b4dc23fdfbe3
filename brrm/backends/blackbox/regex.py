"""Regex continuation by Brzozowski derivatives: the regex of what may follow a given prefix.

Engines that take a structured-output regex (vLLM, OpenAI-compatible servers) always match it from the
start of the generated text. When a constraint program must go on from the middle of a pattern (a
pattern's token cap was reached where its forced completion does not apply yet), the backend sends
``continuation(regex, text_so_far)``: a regex ``R'`` with ``text + s`` in L(R) exactly when ``s`` is in
L(R'). Derivatives of a regex are regexes again, so this needs no automaton.

Supported syntax (what constraint regexes use): literals, ``.``, character classes (ranges, negation,
``\\d \\s \\w`` and their negations), groups, alternation and bounded/unbounded repetition. Anchors,
look-around, back-references and flags raise ``ValueError``. Parsing uses Python's own regex parser
(``re._parser``), so escapes mean what they mean to ``re``.
"""

from __future__ import annotations

import functools
import re
from types import ModuleType
from typing import Any

Node = tuple[Any, ...]
"""A regex tree node: ``("seq", nodes)``, ``("alt", nodes)``, ``("rep", node, lo, hi)`` or ``("set", items, negate)``
with items ``("lit", code)``, ``("range", lo, hi)``, ``("cat", class regex)``."""
EPS: Node = ("seq", ())
"""Matches only the empty string."""
EMPTY: Node = ("alt", ())
"""Matches nothing."""


def _seq(parts: list[Node] | tuple[Node, ...]) -> Node:
    flat: list[Node] = []
    for p in parts:
        if p == EMPTY:
            return EMPTY
        flat.extend(p[1] if p[0] == "seq" else (p,))
    return flat[0] if len(flat) == 1 else ("seq", tuple(flat))


def _alt(parts: list[Node] | tuple[Node, ...]) -> Node:
    seen: dict[Node, None] = {}
    for p in parts:
        for q in p[1] if p[0] == "alt" else (p,):
            seen.setdefault(q, None)
    opts = tuple(seen)
    return opts[0] if len(opts) == 1 else ("alt", opts)


def _rep(node: Node, lo: int, hi: int | None) -> Node:
    if nullable(node):
        lo = 0
    if hi == 0 or node == EPS:
        return EPS
    return ("rep", node, lo, hi)


@functools.lru_cache(maxsize=256)
def parse(regex: str) -> Node:
    """The derivative-ready tree of ``regex``.

    Raises:
        ValueError: on syntax this module does not support (anchors, look-around, flags, …).
    """
    import importlib

    c = importlib.import_module("re._constants")  # Python's own regex parser (3.11+)
    p = importlib.import_module("re._parser")
    tree = p.parse(regex)
    if tree.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE):
        raise ValueError(f"regex flags are not supported in {regex!r}")
    return _convert(tree, c)


def _convert(sub: Any, c: ModuleType) -> Node:
    """The node of ``re._parser``'s parsed ``sub`` (``c``: ``re._constants``)."""
    items = []
    for op, av in sub:
        if op is c.LITERAL:
            items.append(("set", (("lit", av),), False))
        elif op is c.NOT_LITERAL:
            items.append(("set", (("lit", av),), True))
        elif op is c.ANY:
            items.append(("set", (("lit", 10),), True))
        elif op is c.IN:
            items.append(_class(av, c))
        elif op is c.BRANCH:
            items.append(_alt([_convert(s, c) for s in av[1]]))
        elif op is c.SUBPATTERN:
            items.append(_convert(av[-1], c))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT)):  # 3.11+ has it
            lo, hi, inner = av
            items.append(_rep(_convert(inner, c), lo, None if hi is c.MAXREPEAT else hi))
        else:
            raise ValueError(f"unsupported regex construct {op}")
    return _seq(items)


_CATEGORIES = {
    "CATEGORY_DIGIT": r"\d",
    "CATEGORY_NOT_DIGIT": r"\D",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w",
    "CATEGORY_NOT_WORD": r"\W",
}


def _class(av: Any, c: ModuleType) -> Node:
    """The ``set`` node of a parsed character class ``av``."""
    negate, items = False, list[tuple[object, ...]]()
    for op, v in av:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            items.append(("lit", v))
        elif op is c.RANGE:
            items.append(("range", v[0], v[1]))
        elif op is c.CATEGORY and str(v) in _CATEGORIES:
            items.append(("cat", _CATEGORIES[str(v)]))
        else:
            raise ValueError(f"unsupported character-class item {op} {v}")
    return ("set", tuple(items), negate)


def _set_matches(node: Node, ch: str) -> bool:
    return any(_item_matches(item, ch) for item in node[1]) != node[2]


def _item_matches(item: tuple[Any, ...], ch: str) -> bool:
    """Whether a character-class item (a literal, a range or a category) matches ``ch``."""
    if item[0] == "lit":
        return ord(ch) == item[1]
    if item[0] == "range":
        return bool(item[1] <= ord(ch) <= item[2])
    return re.fullmatch(item[1], ch) is not None


def nullable(node: Node) -> bool:
    """Whether ``node`` matches the empty string."""
    kind = node[0]
    if kind == "set":
        return False
    if kind == "seq":
        return all(nullable(n) for n in node[1])
    if kind == "alt":
        return any(nullable(n) for n in node[1])
    return node[2] == 0 or nullable(node[1])


def derive(node: Node, ch: str) -> Node:
    """The derivative of ``node`` by one character."""
    kind = node[0]
    if kind == "set":
        return EPS if _set_matches(node, ch) else EMPTY
    if kind == "alt":
        return _alt([derive(n, ch) for n in node[1]])
    if kind == "rep":
        inner, lo, hi = node[1], node[2], node[3]
        return _seq([derive(inner, ch), _rep(inner, max(lo - 1, 0), None if hi is None else hi - 1)])
    parts = node[1]
    if not parts:
        return EMPTY
    first = _seq([derive(parts[0], ch), *parts[1:]])
    return _alt([first, derive(_seq(parts[1:]), ch)]) if nullable(parts[0]) else first


def _char(code: int, in_class: bool) -> str:
    ch = chr(code)
    named = {"\n": r"\n", "\r": r"\r", "\t": r"\t", "\f": r"\f", "\v": r"\v"}
    if ch in named:
        return named[ch]
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    special = "\\]^-[" if in_class else "\\.^$*+?{}[]|()"
    return "\\" + ch if ch in special else ch


def to_regex(node: Node) -> str:
    """Regex text of ``node`` (groups are plain parentheses; valid for Python ``re`` and vLLM)."""
    kind = node[0]
    if kind == "set":
        items, neg = node[1], node[2]
        if len(items) == 1 and items[0][0] == "lit" and not neg:
            return _char(items[0][1], False)
        body = "".join(
            _char(i[1], True)
            if i[0] == "lit"
            else i[1]
            if i[0] == "cat"
            else f"{_char(i[1], True)}-{_char(i[2], True)}"
            for i in items
        )
        return f"[{'^' if neg else ''}{body}]"
    if kind == "seq":
        return "".join(to_regex(n) if n[0] != "alt" else f"({to_regex(n)})" for n in node[1])
    if kind == "alt":
        return "|".join(to_regex(n) for n in node[1]) if node[1] else "[^\\s\\S]"
    inner, lo, hi = node[1], node[2], node[3]
    atom = to_regex(inner) if inner[0] == "set" else f"({to_regex(inner)})"
    quant = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
    return atom + (quant or (f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"))


def continuation(regex: str, text: str) -> Node:
    """The derivative of ``regex`` by ``text`` (``EMPTY`` when ``text`` starts no match)."""
    node = parse(regex)
    for ch in text:
        node = derive(node, ch)
        if node == EMPTY:
            break
    return node


def viable(regex: str, text: str) -> bool:
    """Whether ``text`` is a prefix of some match of ``regex``."""
    return continuation(regex, text) != EMPTY


def matches(regex: str, text: str) -> bool:
    """Whether ``regex`` matches all of ``text`` (same answer as ``re.fullmatch`` on supported syntax)."""
    return nullable(continuation(regex, text))
