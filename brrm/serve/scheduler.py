"""Moved to :mod:`brrm.service.scheduler` (the service layer every batching surface shares); re-exported here."""

from __future__ import annotations

from brrm.service import scheduler as _moved
from brrm.service.scheduler import *  # noqa: F403 - every public name of the moved module

__all__ = _moved.__all__
