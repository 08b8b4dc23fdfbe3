"""The black-box, request-level room shared by vLLM and OpenAI-compatible servers: a constraint program is
interpreted phase by phase (:mod:`~brrm.backends.blackbox.phases`), each phase one engine request under a
regex or choice constraint compiled by :mod:`~brrm.backends.blackbox.regex`."""
