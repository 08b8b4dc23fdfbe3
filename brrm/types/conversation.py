"""Conversations: the turns before the judged response(s), validated once at the boundary."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brrm.errors import ConfigError
from brrm.types.config import check_text

ROLES = ("system", "user", "assistant", "tool")
"""Valid message roles. ``tool`` holds a tool's observation; it is never judged as the assistant's text."""


@dataclass(frozen=True)
class Message:
    """One chat message.

    Attributes:
        role: one of ``system``, ``user``, ``assistant``, ``tool``.
        content: the message text (may be empty only for an assistant turn that carries tool calls).
        tool_calls: tool calls made by an assistant turn, as ``{"name": str, "arguments": dict | str}``.

    Raises:
        ConfigError: on an unknown role, a non-string content, or tool calls on a non-assistant turn.
    """

    role: str
    content: str
    tool_calls: tuple[Mapping[str, object], ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"message role {self.role!r} is not valid; expected one of {', '.join(ROLES)}")
        if not isinstance(self.content, str):
            raise ConfigError(
                f"message content must be a string, got {type(self.content).__name__} (role {self.role!r})"
            )
        check_text(f"message content (role {self.role!r})", self.content)
        if self.tool_calls and self.role != "assistant":
            raise ConfigError(f"tool_calls are only valid on assistant messages, not role {self.role!r}")
        if not all(isinstance(call, Mapping) for call in self.tool_calls):
            raise ConfigError("each tool call must be an object like {\"name\": ..., \"arguments\": ...}")

    @classmethod
    def from_dict(cls, data: object, *, where: str = "message") -> Message:
        """Build a message from ``{"role": ..., "content": ..., "tool_calls"?: [...]}``.

        Raises:
            ConfigError: naming ``where`` and the missing or invalid field.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be an object with 'role' and 'content', got {type(data).__name__}")
        for key in ("role", "content"):
            if key not in data:
                raise ConfigError(f"{where} is missing field {key!r}")
        content = data["content"]
        if content is None and data.get("tool_calls"):
            content = ""
        calls = data.get("tool_calls") or ()
        if not isinstance(calls, list | tuple):
            raise ConfigError(f"{where}.tool_calls must be a list")
        for k, call in enumerate(calls):
            if not isinstance(call, Mapping):
                raise ConfigError(f"{where}.tool_calls[{k}] must be an object like {{\"name\": ..., \"arguments\": "
                                  f"...}}, got {type(call).__name__}")
        try:
            return cls(role=data["role"], content=content, tool_calls=tuple(calls))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [dict(c) for c in self.tool_calls]
        return out


@dataclass(frozen=True)
class Conversation:
    """The turns before the judged response(s); the last turn must be a user (or tool) turn.

    Attributes:
        messages: the turns, oldest first; at least one user turn.

    Raises:
        ConfigError: when empty, when there is no user turn, or when it ends with an assistant turn
            (the response under judgment is passed separately, never as the last message).
    """

    messages: tuple[Message, ...]

    def __post_init__(self) -> None:
        if not self.messages:
            raise ConfigError("conversation is empty; it needs at least one user message")
        if not any(m.role == "user" for m in self.messages):
            raise ConfigError("conversation has no user message")
        if self.messages[-1].role not in ("user", "tool"):
            raise ConfigError(
                f"conversation must end with a user or tool turn (the judged responses are passed "
                f"separately), but it ends with role {self.messages[-1].role!r}"
            )

    @classmethod
    def from_prompt(cls, prompt: str) -> Conversation:
        """A single-turn conversation from a user prompt string."""
        return cls((Message("user", prompt),))

    @classmethod
    def coerce(cls, value: object, *, where: str = "conversation") -> Conversation:
        """Accept a Conversation, a prompt string, or a list of message dicts / Messages.

        Raises:
            ConfigError: naming ``where`` and the problem.
        """
        if isinstance(value, Conversation):
            return value
        if isinstance(value, str):
            return cls.from_prompt(value)
        if isinstance(value, list | tuple):
            msgs = tuple(
                m if isinstance(m, Message) else Message.from_dict(m, where=f"{where}[{i}]")
                for i, m in enumerate(value)
            )
            try:
                return cls(msgs)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        raise ConfigError(
            f"{where} must be a prompt string or a list of messages, got {type(value).__name__}"
        )

    def to_list(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self.messages]

    def content_hash(self) -> str:
        """sha256 (hex) of the messages as canonical JSON: a stable key of the conversation's content."""
        text = json.dumps(self.to_list(), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


ConversationLike = Conversation | str | Sequence[Mapping[str, object] | Message]
"""What a judge method takes as a conversation: a :class:`Conversation`, a prompt string, or a list of
``{"role", "content"}`` messages (or :class:`Message` s) ending with a user (or tool) turn
(:meth:`Conversation.coerce` checks it)."""
