"""The BR-RM judge's settings: :class:`BRRMConfig` (its decoding mode, sampling, input policies and verdict
selection) and each decoding mode's policy defaults (:data:`POLICY_DEFAULTS`). :mod:`brrm.judges.brrm` runs them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from brrm.errors import ConfigError
from brrm.judges import brrm_format as fmt
from brrm.templates import HISTORY_THINK, ContextPolicy
from brrm.types import SamplingConfig, check_choice, check_int
from brrm.types.config import check_options
from brrm.types.options import Flag, PerRequest, build, option, option_fields

DECODING_MODES = ("constrained", "faithful")
THINKING_MODES = ("auto", "on", "off")
TURN2_TOKENS = ("auto", "retokenize", "concat")

POLICY_DEFAULTS = {
    "constrained": {"system_messages": "include", "tool_messages": "include", "strip_history_reasoning": True,
                    "neutralize_markers": True, "strip_response_reasoning": True,
                    "verdict": "last_after_thinking", "history_think": "text", "shortcuts": True},
    "faithful": {"system_messages": "drop", "tool_messages": "drop", "strip_history_reasoning": False,
                 "neutralize_markers": False, "strip_response_reasoning": False, "verdict": "official",
                 "history_think": "markup", "shortcuts": False},
}
"""Input policies and verdict selection of each decoding mode when not set explicitly (``faithful``: what the
released evaluation does — every pair reaches the model, a kept history ``<think>`` block gets the think tokens;
``constrained``: brrm's safer defaults — identical or blank pairs are decided without a model call)."""


@dataclass(frozen=True)
class BRRMConfig:
    """Settings of the BR-RM judge; each field's help gives its values, default and source. The input policies
    (``system_messages`` … ``shortcuts``) default to None: the decoding mode's value (:data:`POLICY_DEFAULTS`).

    Raises:
        ConfigError: naming the field and its valid options (bools must be bools, ints ints).
    """

    decoding: str = option("constrained", choices=DECODING_MODES,
                           help="constrained: verdicts always parse, P(A>B) measured (default); faithful: the "
                                "released protocol end to end", per_request=PerRequest())
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    thinking: str = option("auto", choices=THINKING_MODES,
                           help="auto (on when the tokenizer has single <think>/</think> tokens and the chat "
                                "template uses them; the default), on or off; only affects the constrained program")
    block_token_cap: int = option(512, help=f"constrained free-text block cap in tokens, int >= {fmt.MIN_BLOCK_CAP}; "
                                            "default 512")
    system_messages: str | None = option(None, choices=("include", "drop"),
                                         help="System: lines in the context (default: include; faithful: drop)")
    tool_messages: str | None = option(None, choices=("include", "drop"),
                                       help="Tool: lines and tool calls in the context (default: include; faithful: "
                                            "drop)")
    strip_history_reasoning: bool | None = option(
        None, flag=Flag("--history-reasoning", words={"strip": True, "keep": False}),
        help="<think> blocks of earlier assistant turns (default: strip; faithful: keep)")
    neutralize_markers: bool | None = option(
        None, flag=Flag(words={"on": True, "off": False}),
        help="rewrite BR-RM markers inside record text (default: on; faithful: off)")
    strip_response_reasoning: bool | None = option(
        None, flag=Flag("--keep-thinking", store=False, help="do not strip a leading <think> block from responses"),
        help="drop a leading <think> block of each response (default: on; faithful: off)")
    verdict: str | None = option(None, choices=fmt.VERDICT_SELECTIONS,
                                 help="which ranking block of turn 2 counts (default: last_after_thinking; "
                                      "faithful: official, the released parser and rule)")
    history_think: str | None = option(None, choices=HISTORY_THINK,
                                       help="tags of a kept <think> block of an earlier assistant turn: text, or the "
                                            "template's think tokens as the released evaluation gives them "
                                            "(default: text; faithful: markup)")
    shortcuts: bool | None = option(None, help="decide identical responses (tie) and a blank one (it loses) without "
                                               "a model call (default: on; faithful: off, as the released "
                                               "evaluation)")
    swap: bool = option(False, flag=Flag(store=True), help="judge both orders; disagreement is a tie (default off)")
    max_retries: int = option(0, help="re-runs of an ordered judgment that ended backend_error, or (sampled decoding "
                                      "only: greedy would repeat it) parse_failure or truncated, each from fresh "
                                      "sampler streams, int >= 0 (default 0)")
    turn2_tokens: str = option("auto", help="how turn 2's prompt ids are formed: retokenize (the released "
                                            "evaluation), concat (turn 1's ids as generated; turn 2 reuses its KV) "
                                            "or auto (the default: retokenize when faithful, else concat)")

    def __post_init__(self) -> None:
        check_options(self)  # the words among each field's choices, the bools
        if not isinstance(self.sampling, SamplingConfig):
            raise ConfigError(f"sampling must be a SamplingConfig, got {type(self.sampling).__name__}")
        check_int("block_token_cap", self.block_token_cap, low=fmt.MIN_BLOCK_CAP)
        check_int("max_retries", self.max_retries, low=0)
        check_choice("turn2_tokens", self.turn2_tokens, TURN2_TOKENS)

    def _flag(self, value: bool | None, name: str) -> bool:
        """An on/off input policy: as set, else the decoding mode's default (:data:`POLICY_DEFAULTS`)."""
        return bool(POLICY_DEFAULTS[self.decoding][name]) if value is None else value

    def _word(self, value: str | None, name: str) -> str:
        """A named input policy: as set, else the decoding mode's default (:data:`POLICY_DEFAULTS`)."""
        return str(POLICY_DEFAULTS[self.decoding][name]) if value is None else value

    @property
    def shortcuts_on(self) -> bool:
        """``shortcuts`` resolved for the decoding mode."""
        return self._flag(self.shortcuts, "shortcuts")

    @property
    def strips_response_reasoning(self) -> bool:
        """``strip_response_reasoning`` resolved for the decoding mode."""
        return self._flag(self.strip_response_reasoning, "strip_response_reasoning")

    @property
    def neutralizes_markers(self) -> bool:
        """``neutralize_markers`` resolved for the decoding mode."""
        return self._flag(self.neutralize_markers, "neutralize_markers")

    @property
    def verdict_selection(self) -> str:
        """``verdict`` resolved for the decoding mode."""
        return self._word(self.verdict, "verdict")

    @property
    def context(self) -> ContextPolicy:
        """How earlier turns are flattened, with every policy resolved."""
        history = self._flag(self.strip_history_reasoning, "strip_history_reasoning")
        return ContextPolicy(strip_history_reasoning=history,
                             system_messages=self._word(self.system_messages, "system_messages"),
                             tool_messages=self._word(self.tool_messages, "tool_messages"),
                             neutralize_markers=self.neutralizes_markers,
                             history_think=self._word(self.history_think, "history_think"))

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> BRRMConfig:
        """The settings a judge's record holds (``options`` of ``GET /v1/models``: the fields, ``sampling`` and the
        applied ``policies``), as values that judge the same way.

        Raises:
            ConfigError: on a missing or invalid entry (naming it).
        """
        names = {f.name for f in option_fields(cls)}
        policies = record.get("policies")
        given = {**(policies if isinstance(policies, Mapping) else {}), **record}
        return build(cls, {**{k: v for k, v in given.items() if k in names},
                           "sampling": SamplingConfig.from_record(record.get("sampling"))})

    def policies(self) -> dict[str, bool | str]:
        """Every input policy as applied (recorded in each result's provenance)."""
        return {**self.context.to_dict(), "neutralize_markers": self.neutralizes_markers,
                "strip_response_reasoning": self.strips_response_reasoning,
                "verdict": self.verdict_selection, "thinking": self.thinking, "turn2_tokens": self.p2_tokenization,
                "shortcuts": self.shortcuts_on}

    @property
    def p2_tokenization(self) -> str:
        """``turn2_tokens`` with ``auto`` resolved for the decoding mode."""
        if self.turn2_tokens != "auto":
            return self.turn2_tokens
        return "retokenize" if self.decoding == "faithful" else "concat"
