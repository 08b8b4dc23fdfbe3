"""The rating scale of brrm arena's leaderboards, shared by the plain and the style-controlled fits."""

from __future__ import annotations

import math

SCALE = 400.0 / math.log(10.0)
"""Elo points per Bradley–Terry logit (400 / ln 10, as Arena-Hard-Auto and LMArena)."""
ANCHOR_RATING = 1000.0
"""The anchor's rating."""
