"""Golden and safety tests of the BR-RM prompt templates."""

from __future__ import annotations

import zipfile

from brrm.templates import (
    ContextPolicy,
    prompts_dir,
    render_brrm_turn1,
    render_brrm_turn2,
    render_context,
    render_responses,
    template_hash,
)
from brrm.types import Conversation


def _reference_turn1(shared, context: str, responses: str) -> str:
    return (shared / "reference/brrm/turn1_template.txt").read_text().format(context=context, responses=responses)


def test_turn1_renders_reference_byte_for_byte(shared):
    conv = Conversation.from_prompt("What is the capital of France?")
    ours = render_brrm_turn1(conv, "Paris.", "Lyon.")
    context = "[The Begin of Context]\nUser: What is the capital of France?\n[The End of Context]\n"
    responses = ("[The Begin of Response 1]\nParis.\n[The End of Response 1]\n\n"
                 "[The Begin of Response 2]\nLyon.\n[The End of Response 2]\n")
    assert ours == _reference_turn1(shared, context, responses)
    assert ours.encode() == _reference_turn1(shared, context, responses).encode()
    assert "**Context:** \n" in ours  # trailing space of the trained prompt kept
    assert not ours.endswith("\n")


def test_turn2_renders_reference_byte_for_byte(shared):
    assert render_brrm_turn2().encode() == (shared / "reference/brrm/turn2_prompt.txt").read_bytes()


def test_shipped_qwen3_chat_template_is_the_reference(shared):
    assert (prompts_dir() / "qwen3_chat_template.jinja").read_bytes() == \
        (shared / "reference/qwen3/chat_template.jinja").read_bytes()


def test_multi_turn_context_flattening():
    conv = Conversation.coerce([
        {"role": "user", "content": "Translate 'good morning' to Spanish."},
        {"role": "assistant", "content": "Buenos días."},
        {"role": "user", "content": "And 'good night'?"},
    ])
    assert render_context(conv) == ("[The Begin of Context]\nUser: Translate 'good morning' to Spanish.\n"
                                    "Assistant: Buenos días.\nUser: And 'good night'?\n[The End of Context]\n")


def test_history_reasoning_policy_is_explicit():
    """C14: stripping <think> from history is a recorded setting, never silent."""
    conv = Conversation.coerce([
        {"role": "user", "content": "What is 12 squared?"},
        {"role": "assistant", "content": "<think>12*12 = 144</think>144"},
        {"role": "user", "content": "And 13 squared?"},
    ])
    stripped = render_context(conv, ContextPolicy(strip_history_reasoning=True))
    kept = render_context(conv, ContextPolicy(strip_history_reasoning=False))
    assert "144" in stripped and "12*12 = 144" not in stripped
    assert "12*12 = 144" in kept and "Assistant: <think>12*12 = 144</think>144" in kept
    assert ContextPolicy(strip_history_reasoning=False).to_dict()["strip_history_reasoning"] is False


def test_system_and_tool_turns_are_labelled():
    """C20/C23: tool output is a labelled context line; system text is kept (or dropped) by policy."""
    conv = Conversation.coerce([
        {"role": "system", "content": "Answer in exactly one sentence."},
        {"role": "user", "content": "What is the capital of Australia?"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "search", "arguments": {"q": "capital"}}]},
        {"role": "tool", "content": "Canberra is the capital city of Australia."},
    ])
    text = render_context(conv)
    assert "System: Answer in exactly one sentence." in text
    assert 'Assistant: [tool call] search({"q": "capital"})' in text
    assert "Tool: [tool output] Canberra is the capital city of Australia." in text
    dropped = render_context(conv, ContextPolicy(system_messages="drop"))
    assert "System:" not in dropped and dropped.startswith("[The Begin of Context]\nUser: What is")


def test_user_text_is_never_evaluated_as_jinja():
    """C29: template syntax, emoji and accents in data are rendered verbatim."""
    prompt = "In Jinja, what does {{ 7*7 }} print, and what is {% raw %}? Also: 😀 — naïve café."
    a = "It prints 49; {% raw %} ... {% endraw %} stops Jinja from interpreting {{ }} inside it."
    b = "{{ config.__class__ }} {% for x in range(3) %}loop{% endfor %} {% if"
    text = render_brrm_turn1(Conversation.from_prompt(prompt), a, b)
    for s in (prompt, a, b, "😀", "naïve café", "{{ 7*7 }}", "{{ config.__class__ }}"):
        assert s in text
    assert "looplooploop" not in text and "49" not in text.replace(a, "")


def test_responses_wrapping_exact():
    assert render_responses("x", "y") == ("[The Begin of Response 1]\nx\n[The End of Response 1]\n\n"
                                          "[The Begin of Response 2]\ny\n[The End of Response 2]\n")


def test_template_hash_is_stable_hex():
    h = template_hash()
    assert len(h) == 16 and int(h, 16) >= 0 and h == template_hash()


def test_built_wheel_ships_the_prompts(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(REPO)], check=True)
    wheel = next(tmp_path.glob("brrm-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("brrm_turn1.jinja", "brrm_turn2.jinja", "brrm_context.jinja", "brrm_responses.jinja",
                 "qwen3_chat_template.jinja"):
        assert f"brrm/prompts/{name}" in names
    assert "brrm/py.typed" in names
