"""Typed results back from their stored JSON; moved to :mod:`brrm.types.codec` (used below the audit too)."""

from brrm.types.codec import (
    group_from_dict,
    judgment_from_dict,
    provenance_from_dict,
    result_from_dict,
    reward_from_dict,
)

__all__ = ["group_from_dict", "judgment_from_dict", "provenance_from_dict", "result_from_dict", "reward_from_dict"]
