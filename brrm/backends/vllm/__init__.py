"""vLLM's offline engine behind :class:`~brrm.backends.base.Backend` (:mod:`~brrm.backends.vllm.backend`;
engine construction and feature detection in :mod:`~brrm.backends.vllm.engine`), a black-box backend of
:mod:`brrm.backends.blackbox`. Importing this package does not import vllm."""

from brrm.backends.vllm.backend import VLLM_HINT, Features, VLLMBackend, detect_features, import_vllm

__all__ = ["VLLM_HINT", "Features", "VLLMBackend", "detect_features", "import_vllm"]
