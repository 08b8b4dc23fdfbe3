"""Hugging Face transformers backend: batched decoding with a slot KV cache, constraints and KV reuse.

The decoding loop is our own (not ``model.generate``) because it needs, per row: its own seeded
sampler (results independent of batch composition), outlines-core token masks, forced tokens, the raw
logits at verdict positions, and a prefix KV cache so that BR-RM turn 2 starts from turn 1's keys and
values. Every row keeps its keys and values in a slot of its own (:mod:`brrm.backends.transformers.slots`): one
contiguous run, written only at the row's real positions, with explicit position ids, so every row computes
exactly what it would compute alone. Batching is continuous by default
(:mod:`brrm.backends.transformers.continuous`: finished rows are replaced at the next step, a turn 2 joins as its turn
1 ends);
``scheduling="static"`` keeps the chunk-at-a-time loop of :mod:`brrm.backends.transformers.decode`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from brrm.backends.base import (
    BackendInfo,
    Capabilities,
    Completion,
    FollowUp,
    GenerationRequest,
    Next,
    OnStep,
    Score,
    common_prefix_length,
    end_of_turn_id,
)
from brrm.backends.options import DEVICES, DTYPES, TransformersOptions, set_options
from brrm.backends.options import SCHEDULINGS as SCHEDULING
from brrm.backends.transformers.steering import ProgramState
from brrm.constraints import CompiledProgram, Program
from brrm.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from brrm.backends.transformers.continuous import ContinuousDecoder
    from brrm.backends.transformers.rows import BatchingContext, Row
    from brrm.backends.transformers.slots import KV


class PrefixCache:
    """Per-sequence KV entries kept after a generation, reused by later prompts that extend them.

    A new prompt reuses an entry only when it extends that entry's whole prompt — a row's own earlier turn
    (turn 2 from turn 1), never a prefix it merely shares with another record (the BR-RM instructions):
    that KV was computed in another record's prefill, whose length changes the attention's summation order,
    so reusing it would make a result depend on which records ran before. Identical sequences (duplicate
    items in one chunk) each keep their own entry, so each reuses its turn 1 whatever the batch size. Within
    an entry the longest common token prefix is reused (the retokenized turn-2 prompt may differ from turn 1's
    sampled ids near the boundary). Entries are evicted on use and beyond ``capacity`` (LRU).
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[tuple[int, ...], list[tuple[int, KV]]] = OrderedDict()
        self.size = 0

    def put(self, ids: tuple[int, ...], kv: KV, prompt_length: int | None = None) -> None:
        """Keep ``kv`` (per layer ``(keys, values)``, each ``[H_kv, len(ids), D]``) for ``ids``, whose first
        ``prompt_length`` ids (default all) were the generation's prompt."""
        self.entries.setdefault(ids, []).append((len(ids) if prompt_length is None else prompt_length, kv))
        self.entries.move_to_end(ids)
        self.size += 1
        while self.size > self.capacity:
            self._pop(next(iter(self.entries)))

    def take(self, prompt: tuple[int, ...]) -> tuple[int, KV | None]:
        """Longest usable prefix (< len(prompt), so one token is always recomputed) of an entry whose whole
        prompt ``prompt`` extends, and its KV; ``(0, None)`` when there is none."""
        best, best_key = 0, None
        for key, stored in self.entries.items():
            n = common_prefix_length(key, prompt, limit=len(prompt) - 1)
            if n >= stored[0][0] and n > best:
                best, best_key = n, key
        if best_key is None:
            return 0, None
        _, kv = self._pop(best_key)
        return best, [(k[:, :best], v[:, :best]) for k, v in kv]

    def _pop(self, key: tuple[int, ...]) -> tuple[int, KV]:
        """Remove and return the oldest entry stored under ``key``."""
        stored = self.entries[key]
        entry = stored.pop(0)
        self.size -= 1
        if not stored:
            del self.entries[key]
        return entry

    def clear(self) -> None:
        self.entries.clear()
        self.size = 0


TASKS = ("auto", "generate", "classify")
CLASSIFY_MIN_BATCH = 64
"""Fewest rows a ``classify`` forward batch may hold: one forward pass per row is cheap next to decoding, and the
padded-token budget (``token_budget``), not the row count, bounds its memory."""
CONTINUOUS_CHUNK = 256
"""Judgments per call a continuously batching backend asks for: the running batch stays ``batch_size`` rows, the
rest wait in its queue (prompt ids only), so a call may hold many more items than the batch."""


def resolve_dtype(dtype: str, *, cuda: bool, device: str, config: Mapping[str, object] | None) -> str:
    """The weights dtype a load uses (one of ``float32``, ``bfloat16``, ``float16``).

    Args:
        dtype: the option: ``auto`` or a dtype name (returned as given).
        cuda: whether CUDA is available; ``device``: the device option (``auto``, ``cpu``, ``cuda``).
        config: the checkpoint's parsed ``config.json`` (None when unread).

    Returns:
        For ``auto`` on a GPU: the config's ``torch_dtype`` (or ``dtype``, as transformers 5 saves it) when it is
        float16 or bfloat16, else ``bfloat16`` (a float32 or undeclared checkpoint) — what vLLM's ``auto`` loads
        (:func:`brrm.backends.vllm.engine.resolve_dtype`); for ``auto`` on CPU: ``float32`` (half precision on
        CPU is slow and some kernels lack it). A known checkpoint's card dtype is set before
        this, as an explicit option (:func:`brrm.recipes.card_dtype`).
    """
    if dtype != "auto":
        return dtype
    if not cuda or device == "cpu":
        return "float32"
    declared = (config or {}).get("torch_dtype", (config or {}).get("dtype"))
    return declared if declared in ("float16", "bfloat16") else "bfloat16"


class TransformersBackend:
    """Runs a transformers model: a causal LM (generation, programs, vocabulary logits) or a one-label
    sequence classifier (``classify``).

    Args:
        model: a loaded ``PreTrainedModel`` in eval mode.
        tokenizer: its tokenizer; must have a chat template for the judges.
        model_id: recorded in results (the model's name: hub id, or the embedded model's id).
        batch_size: rows decoded together, >= 1.
        classify_batch_size: most rows per ``classify`` forward batch, >= 1; default max(batch_size, 64) (the
            padded-token budget ``token_budget`` bounds a batch's memory).
        prefix_cache: reuse KV across calls (turn 1 -> turn 2); False recomputes every prompt.
        cache_capacity: sequences kept in the prefix cache, >= 1 (raised to ``2 * batch_size``).
        token_budget: most padded tokens per ``classify`` forward batch, >= 1.
        padding_side, bucketing: ``classify`` batching (results never depend on them; see
            :class:`~brrm.backends.transformers.classify.HeadScorer`).
        jump_forward: feed the tokens a constraint program forces (fixed markers) in one forward pass; False feeds
            them one step at a time (same tokens, more forward passes; for measuring the saving).
        batch_invariant: ``"auto"`` (on CPU when the architecture takes a custom attention function, off on
            GPU), True or False: make a row's logits (a causal LM's) or score (a sequence classifier's, and any
            ``classify`` head) the same bits whatever batch it runs in (row-wise attention, every row-wise layer in
            fixed-shape tiles; see :mod:`brrm.backends.transformers.invariant`), so results are byte-identical at
            any ``batch_size`` and beside any other records (at a given thread count). Its wall time is measured
            against the stock forward in ``benchmarks/bench_judge.py``; ``info.details["batch_invariant"]`` records
            it.
        scheduling: ``continuous`` (default): one running batch of ``batch_size`` rows, refilled as rows finish,
            a BR-RM turn 2 joining as soon as its turn 1 ends (:mod:`brrm.backends.transformers.continuous`);
            ``static``:
            chunks of ``batch_size`` rows, each decoded to completion (the earlier loop, kept for comparison).
            Results are the same bits either way when ``batch_invariant`` is on. A subclass that overrides
            ``generate`` runs ``static`` (its override then sees every request, turn 2 included). Continuous
            scheduling takes concurrent calls (``capabilities.concurrent``): a call from another thread while a
            batch decodes joins it when its sampling settings are the batch's (else it waits for the batch to
            end), with the results it gets alone; its callbacks run in its own thread.

    Raises:
        ConfigError: on an invalid option, a tokenizer without pad/eos/end-of-turn tokens, or a causal LM the slot
            decoder cannot run (layers other than full or sliding-window attention; an attention kernel other than
            sdpa, eager or the batch-invariant one).
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, model_id: str = "",
                 batch_size: int = 8, prefix_cache: bool = True, cache_capacity: int = 64, token_budget: int = 16384,
                 padding_side: str = "right", bucketing: bool = True, jump_forward: bool = True,
                 classify_batch_size: int | None = None, batch_invariant: bool | str = "auto",
                 scheduling: str = "continuous") -> None:
        from brrm.backends.transformers.classify import HeadScorer
        from brrm.types import check_bool, check_choice, check_int

        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.scheduling = check_choice("scheduling", scheduling, SCHEDULING)
        check_bool("prefix_cache", prefix_cache)
        self.jump_forward = check_bool("jump_forward", jump_forward)
        self.model = model
        self.tokenizer = tokenizer
        self.end_of_turn_id = end_of_turn_id(tokenizer)
        self.stop_ids = {self.end_of_turn_id} | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None
                                                 else set())
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad if pad is not None else self.end_of_turn_id)
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        causal = model.get_output_embeddings() is not None and getattr(model, "score", None) is None
        # a chunk's turn-1 entries must outlive the chunk, or a larger batch would miss where a smaller one hits
        self.cache = PrefixCache(max(check_int("cache_capacity", cache_capacity, low=1), 2 * self.batch_size)) \
            if prefix_cache and causal else None
        self.batch_invariant = _invariant_wanted(batch_invariant, model)
        if self.batch_invariant:
            from brrm.backends.transformers.invariant import make_batch_invariant

            self.batch_invariant = make_batch_invariant(model, required=batch_invariant is True)
        if causal:  # a model the slot decoder cannot run is refused here, before any request (ConfigError)
            from brrm.backends.transformers.decode import mask_for

            self.mask = mask_for(model)
        if type(self).generate is not TransformersBackend.generate:  # a subclass wrapping generate sees every
            self.scheduling = "static"  # request (follow-ups of continuous batching never pass through generate)
        self.capabilities = self._capabilities(causal)
        self.info = BackendInfo("transformers", model_id or getattr(model.config, "_name_or_path", ""),
                                {"dtype": str(model.dtype).replace("torch.", ""), "device": str(model.device),
                                 "task": "generate" if causal else "classify",
                                 "batch_invariant": self.batch_invariant, "scheduling": self.scheduling})
        self.scorer = HeadScorer(model, pad_id=self.pad_id, token_budget=token_budget,
                                 max_batch_size=classify_batch_size or max(self.batch_size, CLASSIFY_MIN_BATCH),
                                 padding_side=padding_side, bucketing=bucketing, invariant=self.batch_invariant)
        if not causal:
            self.scorer.head(None)  # a classifier wider than one label is refused now, not at the first batch
        self._compiled: dict[Program, CompiledProgram] = {}
        self._engine = threading.Condition()  # guards _running: the continuous batch calls join
        self._running: ContinuousDecoder | None = None
        self.stats = {"prefill_tokens": 0, "cached_tokens": 0, "generated_tokens": 0, "forward_calls": 0,
                      "shared_prompt_tokens": 0, "retired_rows": 0}

    def _capabilities(self, causal: bool) -> Capabilities:
        """What the model does: a causal LM generates (continuously batched when so scheduled); a classifier scores."""
        continuous = causal and self.scheduling == "continuous"
        return Capabilities(generate=causal, programs=causal, classify=not causal, vocab_logit=causal,
                            kv_reuse=self.cache is not None,
                            chunk_size=max(self.batch_size, CONTINUOUS_CHUNK) if continuous else self.batch_size,
                            continuous=continuous, concurrent=continuous, seeded=True)

    @classmethod
    def from_options(cls, source: str, options: TransformersOptions, *, name: str | None = None,
                     task: str = "auto") -> TransformersBackend:
        """The backend :func:`brrm.load` builds: ``options`` (:class:`~brrm.backends.options.TransformersOptions`)
        as :meth:`from_pretrained` takes them, under the same names.

        Raises:
            ConfigError: as :meth:`from_pretrained`.
        """
        return cls.from_pretrained(source, task=task, name=name, **set_options(options))

    @classmethod
    def from_pretrained(cls, model_id: str, *, task: str = "auto", dtype: str = "auto", device: str = "auto",
                        trust_remote_code: bool = False, name: str | None = None, progress_bars: bool = False,
                        **kwargs: Any) -> TransformersBackend:
        """Load a model by hub id or local directory.

        Args:
            model_id: hub id (e.g. ``nvidia/Qwen3-Nemotron-14B-BRRM``) or a local directory.
            task: ``generate`` (``AutoModelForCausalLM``), ``classify`` (``AutoModelForSequenceClassification``)
                or ``auto`` (``classify`` when the config's architectures name a sequence classifier).
            dtype: ``auto`` (:func:`resolve_dtype`: on GPU the config's ``torch_dtype``, else bf16; fp32 on CPU),
                ``float32``, ``bfloat16`` or ``float16``.
            device: ``auto`` (``device_map="auto"`` when CUDA is available, else CPU), ``cpu``, ``cuda``.
            name: the model name recorded in results (default ``model_id``).
            progress_bars: show transformers' loading bars ("Loading weights"); off by default, so loading from
                Python prints nothing.
            **kwargs: passed to the constructor (batch_size, prefix_cache, token_budget, …).

        Raises:
            ConfigError: on an unknown task, dtype or device.
        """
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

        from brrm.recipes import model_config
        from brrm.types import check_bool, check_choice

        check_choice("task", task, TASKS)
        check_choice("dtype", dtype, DTYPES)
        check_choice("device", device, DEVICES)
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        cuda = torch.cuda.is_available()
        if device == "cuda" and not cuda:
            raise ConfigError("device 'cuda' was asked for, but CUDA is not available here (this torch build or "
                              "machine has no GPU); use device 'auto' or 'cpu'")
        gpu_auto = dtype == "auto" and cuda and device != "cpu"  # only then does the config's dtype matter
        torch_dtype = dtypes[resolve_dtype(dtype, cuda=cuda, device=device,
                                           config=model_config(model_id) if gpu_auto else None)]
        device_map = "auto" if device == "auto" and cuda else ("cuda" if device == "cuda" else "cpu")
        if task == "auto":
            config = AutoConfig.from_pretrained(model_id, trust_remote_code=trust_remote_code)
            archs = " ".join(getattr(config, "architectures", None) or [])
            task = "classify" if "ForSequenceClassification" in archs else "generate"
        auto_cls = AutoModelForSequenceClassification if task == "classify" else AutoModelForCausalLM
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=trust_remote_code)
        with _loading_bars(check_bool("progress_bars", progress_bars)):
            model = auto_cls.from_pretrained(model_id, dtype=torch_dtype, device_map=device_map,
                                             trust_remote_code=trust_remote_code)
        model.eval()
        return cls(model, tokenizer, model_id=name or model_id, **kwargs)

    def classify(self, sequences: Sequence[Sequence[int]], *, token_id: int | None = None) -> list[Score]:
        """One float32 score per sequence (see :class:`~brrm.backends.transformers.classify.HeadScorer`).

        Raises:
            ConfigError: without the head asked for, or on an empty sequence.
        """
        out = self.scorer.scores(sequences, token_id)
        for key, value in self.scorer.stats.items():
            self.stats[key] = value
        return out

    def close(self) -> None:
        """Drop cached KV and compiled programs; the model is freed when the backend is."""
        if self.cache is not None:
            self.cache.clear()
        self._compiled.clear()

    def compiled(self, program: Program) -> CompiledProgram:
        """The program compiled for this tokenizer (cached)."""
        if program not in self._compiled:
            vocab = int(self.model.get_output_embeddings().weight.shape[0])
            self._compiled[program] = CompiledProgram.build(program, self.tokenizer, self.end_of_turn_id, vocab)
        return self._compiled[program]

    def generate(self, requests: Sequence[GenerationRequest], *, temperature: float = 1.0,
                 top_p: float = 1.0, keep_kv: bool = False, on_complete: Callable[[int], None] | None = None,
                 then: FollowUp | None = None, on_step: OnStep | None = None, top_k: int = 0) -> list[Completion]:
        """Generate for every request; see :class:`brrm.backends.base.Backend`.

        Args:
            keep_kv: store each row's KV in the prefix cache for a follow-up prompt (turn 2).
            on_complete: called with a request's index as soon as its row finishes.
            top_k: sample among the k most likely tokens (0 = no cut).
            then: continuous scheduling only: request ``i``'s follow-up (:func:`brrm.backends.base.generate_chains`),
                run in the same batch; the result is then each chain's last completion.
            on_step: continuous scheduling only: ``on_step(rows, tokens)`` after every decoding step.

        Raises:
            ConfigError: for a sequence classifier, a request without prompt or budget, or ``then`` with
                ``scheduling="static"``.
        """
        if not self.capabilities.generate:
            raise ConfigError(f"{self.info.model!r} is a sequence classifier; it cannot generate (use classify)")
        for r in requests:
            _check_request(r)
        if self.capabilities.continuous:
            return self._continuous([Next(r, keep_kv) for r in requests], on_complete, then, temperature, top_p,
                                    on_step, top_k)
        if then is not None:
            raise ConfigError("follow-up requests (then=) need scheduling='continuous'")
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
        out: list[Completion | None] = [None] * len(requests)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            try:
                done = None if on_complete is None else _remap(on_complete, chunk)
                results = self._generate_chunk([requests[i] for i in chunk], temperature, top_p, keep_kv, done, top_k)
            except RuntimeError as exc:  # a model/device failure (e.g. OOM) loses only this chunk; bugs raise
                results = [Completion.failed(f"{type(exc).__name__}: {exc}")] * len(chunk)
            for i, res in zip(chunk, results, strict=True):
                out[i] = res
        return [c for c in out if c is not None]

    def _continuous(self, firsts: list[Next], on_complete: Callable[[int], None] | None, then: FollowUp | None,
                    temperature: float, top_p: float, on_step: OnStep | None = None,
                    top_k: int = 0) -> list[Completion]:
        """Every chain through one continuously refilled batch (:mod:`brrm.backends.transformers.continuous`):
        the running one when another thread's call is decoding with the same sampling settings, else a batch of
        this call's own (after a running batch with other settings has ended)."""
        from brrm import cancellation
        from brrm.backends.transformers.continuous import ContinuousDecoder, Job

        def follow(i: int, comp: Completion) -> Next | None:
            if on_complete is not None:
                on_complete(i)
            return then(i, comp) if then is not None else None

        if not firsts:
            return []
        job = Job(firsts, follow, on_step, token=cancellation.current())
        while True:
            with self._engine:
                running = self._running
                if running is None:
                    running = self._running = ContinuousDecoder(self._context(), temperature=temperature, top_p=top_p,
                                                                make_row=self._row, top_k=top_k)
                    running.add(job)
                    threading.Thread(target=self._drive, args=(running,), name="brrm-decode", daemon=True).start()
                    break
                if running.settings == (temperature, top_p, top_k) and running.add(job):
                    break
                self._engine.wait()
        try:
            running.serve(job)
        except BaseException:
            if running.alone(job):  # e.g. Ctrl-C in a CLI run: its rows are retired; let the forward in flight end
                with self._engine:
                    self._engine.wait_for(lambda: self._running is not running, timeout=30)
            raise
        return job.results()

    def _drive(self, running: ContinuousDecoder) -> None:
        """The running batch's own thread: decode until its calls have ended (a failure reaches each call)."""
        import torch

        try:
            with torch.inference_mode():
                running.run()
        except BaseException:  # noqa: BLE001 - run() has handed it to every call still waiting
            pass
        finally:
            with self._engine:
                if self._running is running:
                    self._running = None
                self._engine.notify_all()

    def _context(self) -> BatchingContext:
        """What the decoders read from this backend (:mod:`brrm.backends.transformers.rows`)."""
        from brrm.backends.transformers.rows import BatchingContext

        return BatchingContext(self.model, self.cache, self.pad_id, frozenset(self.stop_ids), self.jump_forward,
                               self.stats, self.mask, batch_size=self.batch_size, completion=self._completion)

    def _row(self, index: int, step: Next) -> Row:
        """A decoding row for ``step``'s request: its own seeded sampler and program state."""
        import torch

        from brrm.backends.transformers.rows import Row

        r = _check_request(step.request)
        gen = torch.Generator(device="cpu").manual_seed(r.seed)
        state = ProgramState(self.compiled(r.program)) if r.program is not None else None
        return Row(index, r, gen, state, keep_kv=step.keep_kv and self.cache is not None)

    def _generate_chunk(self, reqs: list[GenerationRequest], temperature: float, top_p: float,
                        keep_kv: bool, on_done: Callable[[int], None] | None, top_k: int = 0) -> list[Completion]:
        import torch

        from brrm.backends.transformers.decode import Decoder

        rows = [self._row(i, Next(r)) for i, r in enumerate(reqs)]
        with torch.inference_mode():
            Decoder(self._context(), temperature=temperature, top_p=top_p, keep_kv=keep_kv, on_done=on_done,
                    top_k=top_k).run(rows)
        return [self._completion(row) for row in rows]

    def _completion(self, row: Row) -> Completion:
        ids = row.generated
        if row.finish == "stop" and ids and ids[-1] in self.stop_ids:
            ids = ids[:-1]
        if row.finish == "error":
            return Completion.failed(row.error)
        state = row.state
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return Completion(
            token_ids=tuple(ids),
            text=text if isinstance(text, str) else "".join(text),
            finish_reason="stop" if row.finish == "stop" else "length",
            choice_logits=tuple(row.choice_logits),
            think_budget_hit=bool(state and state.think_budget_hit),
            forced_caps=state.forced_caps if state else 0,
            cached_prompt_tokens=row.cached,
        )


@contextmanager
def _loading_bars(show: bool) -> Iterator[None]:
    """transformers' progress bars on (``show``) or off while a model loads; the previous setting comes back."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if show else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def _check_request(r: GenerationRequest) -> GenerationRequest:
    """``r``, refused when it has no prompt or no budget.

    Raises:
        ConfigError: for an empty ``prompt_ids`` or ``max_new_tokens`` < 1.
    """
    if not r.prompt_ids or r.max_new_tokens < 1:
        raise ConfigError("a request needs >= 1 prompt token and max_new_tokens >= 1")
    return r


def _invariant_wanted(value: object, model: PreTrainedModel) -> bool:
    """The ``batch_invariant`` option resolved for ``model`` ("auto": on when the model is on the CPU).

    Raises:
        ConfigError: for anything but True, False or "auto".
    """
    from brrm.types import check_bool_or_auto

    value = check_bool_or_auto("batch_invariant", value)
    return str(model.device.type) == "cpu" if value == "auto" else bool(value)


def _remap(callback: Callable[[int], None], indices: list[int]) -> Callable[[int], None]:
    """A callback of chunk-local row indices that reports the requests' own indices."""
    return lambda j: callback(indices[j])
