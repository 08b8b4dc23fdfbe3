"""mkdocs hook: the docstrings' Sphinx roles (``:func:`x```, ``:class:`~a.B```) read as plain code in the API pages.

mkdocstrings renders a role's backquoted target as inline code and leaves the role's name in front of it as
text; this drops the name (and the ``~`` that tells Sphinx to show the last component only).
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj|const|ref|doc):(<code>)~?")


def on_page_content(html: str, **_: Any) -> str:
    """Strip Sphinx role names before inline code in a rendered page."""
    return _ROLE.sub(r"\1", html)
