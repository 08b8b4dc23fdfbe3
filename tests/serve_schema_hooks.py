"""schemathesis hooks for ``tests/test_serve_schema.py`` (loaded with ``SCHEMATHESIS_HOOKS=tests.serve_schema_hooks``).

The served schema states every rule of ``brrm serve`` that JSON Schema can express (:mod:`brrm.serve.openapi`).
Two cannot be: a conversation ends with a user or tool turn (JSON Schema cannot name an array's last item), and
``/get_reward``'s ``prompts`` / ``labels`` have one entry per ``query`` (nor compare two arrays' lengths). The
schema states both in its descriptions and the server answers them 422 naming the field (tested in
``tests/test_serve_api.py``); here generated bodies that break them are left out, for positive and negative cases
alike, so every other rule is checked against the schema.
"""

from __future__ import annotations

import schemathesis

LAST_ROLES = ("user", "tool")


def _ends_well(messages: object) -> bool:
    """False only for a list of messages whose last one is an object with a role other than user or tool."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return True
    return messages[-1].get("role", "user") in LAST_ROLES


def _conversations(body: object) -> list[object]:
    """Every ``conversation`` / ``conversation_history`` value in a request body."""
    if not isinstance(body, dict):
        return []
    found = [body.get("conversation"), body.get("conversation_history")]
    for key in ("pairs", "items"):
        parts = body.get(key)
        if isinstance(parts, list):
            found += [p.get("conversation") for p in parts if isinstance(p, dict)]
    return found


def _one_per_query(body: object) -> bool:
    if not isinstance(body, dict) or not isinstance(body.get("query"), list):
        return True
    n = len(body["query"])
    return all(not isinstance(body.get(k), list) or len(body[k]) == n for k in ("prompts", "labels"))


@schemathesis.hook
def filter_case(ctx: object, case: schemathesis.Case) -> bool:
    """Keep a case unless its body breaks one of the two rules (``filter_case``: the coverage phase applies it
    too, unlike ``filter_body``)."""
    body = case.body
    return all(_ends_well(c) for c in _conversations(body)) and _one_per_query(body)


@schemathesis.hook
def map_case(ctx: object, case: schemathesis.Case) -> schemathesis.Case:
    """A schema-valid ``Idempotency-Key`` is made a digest of its request (method, path, body), so a key is never
    reused with another body: that is a rule no schema can state either (the server refuses it 422 naming the key,
    tested in ``tests/test_single_flight.py``). Schema-violating keys stay as generated (the server answers 400)."""
    import hashlib
    import json

    meta = getattr(case, "meta", None)
    positive = meta is None or meta.generation.mode.is_positive
    if positive and case.headers and "Idempotency-Key" in case.headers:
        request = json.dumps([case.method, case.path, case.body], sort_keys=True, default=str)
        case.headers["Idempotency-Key"] = hashlib.sha256(request.encode()).hexdigest()
    return case
