"""The service layer under every surface: :class:`RemoteJudge`, a judge over a running ``brrm serve``."""

from brrm.service.remote import RemoteJudge

__all__ = ["RemoteJudge"]
