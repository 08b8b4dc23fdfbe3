"""Model backends (transformers, vLLM, OpenAI-compatible servers, a scripted fake), all behind
:class:`~brrm.backends.base.Backend`. :func:`brrm.load` builds them; importing this package is cheap (torch,
vllm and the HTTP client stay unimported until a backend module is). Their names are
:data:`brrm.types.BACKENDS`; their options are :mod:`brrm.backends.options`."""
