"""A decoder in ONNX Runtime GenAI: teacher-forced logits and greedy generation, with or without an adapter file.

Torch-free: the serving process runs the same class. One Decoder is one model folder (the INT8 base, or its FP32 twin)
with the adapters loaded into it by name; a generator runs one sequence on one adapter from start to end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelcd_assets.lib.causal_lm.tool_calls import tool_form
from modelcd_assets.lib.causal_lm.turns import Turns
from modelcd_assets.lib.errors import BadCandidate

GENAI_CONFIG = "genai_config.json"  # what makes a folder an ONNX Runtime GenAI model (lib/causal_lm/build.py writes it)
# What a gated build's probe logits are, recorded with them: the logits each probe's first token was chosen from. modelcd
# before this marker recorded the second token's (read one step late), which a server must not compare with its own.
PROBE_LOGITS_OF = "first-token"


@dataclass(frozen=True)
class Generation:
    tokens: list[int]  # generated ids, the EOS token excluded
    stopped_at_eos: bool
    first_token_s: float  # time to first token: the prompt's prefill and one token
    decode_s: float  # time for the tokens after the first
    finite: bool  # every step's logits were finite
    first_logits: np.ndarray | None = None  # the logits the first token was chosen from, [vocab]

    @property
    def decode_tokens_per_s(self) -> float:
        return (len(self.tokens) - 1) / self.decode_s if len(self.tokens) > 1 and self.decode_s > 0 else float("nan")


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from the logits the model computed, which nothing here changes: temperature 0 (or top_p
    0, a nucleus of one token) is greedy search; otherwise sampling from the top_p nucleus, seeded. Before the choice,
    logit_bias is added and the presence and frequency penalties subtracted (OpenAI's definitions, over the tokens this
    generation made), and guidance (llguidance's (kind, grammar): "json_schema", "regex" or "lark_grammar") masks every
    token that cannot continue the grammar. top_logprobs (None: none) asks for each chosen token's log-probability and
    the most likely alternatives, from the model's own logits."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    min_new_tokens: int = 0  # EOS is not chosen before this many tokens (GenAI's min_length; vLLM's min_tokens)
    logit_bias: tuple[tuple[int, float], ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    guidance: tuple[str, str] | None = None
    top_logprobs: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_p == 0

    @property
    def moves_logits(self) -> bool:
        """Whether the choice is made from logits other than the model's (bias and penalties added)."""
        return bool(self.logit_bias) or bool(self.presence_penalty) or bool(self.frequency_penalty)

    @property
    def plain(self) -> bool:
        """Greedy search over the model's logits and nothing else: the decoding the gates and the probe judge."""
        return self.greedy and not self.min_new_tokens and not self.moves_logits and self.guidance is None and self.top_logprobs is None

    def moved(self, logits: np.ndarray, counts: dict[int, int]) -> np.ndarray:
        """The logits the choice is made from: a copy, logit_bias added, penalties subtracted for the tokens made so far."""
        out = np.array(logits, np.float32, copy=True).reshape(-1)
        for token, bias in self.logit_bias:
            out[token] += bias
        for token, count in counts.items():
            out[token] -= self.presence_penalty + self.frequency_penalty * count
        return out.reshape(np.shape(logits))


@dataclass(frozen=True)
class Chosen:
    """A generated token, with its log-probability and the top alternatives' (token, log-probability), most likely first,
    under the model's own logits, when asked for."""

    token: int
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()


def log_probabilities(logits: np.ndarray) -> np.ndarray:
    """log softmax, in float64 so that the most likely token's is exactly representable to its float32 bits' precision."""
    x = np.asarray(logits, np.float64).reshape(-1)
    shifted = x - x.max()
    return shifted - np.log(np.exp(shifted).sum())


def chosen(logits: np.ndarray, token: int, top: int | None) -> Chosen:
    """token with its log-probability and the top alternatives', or alone when top is None."""
    if top is None:
        return Chosen(token)
    lp = log_probabilities(logits)
    best = np.argpartition(-lp, top)[:top] if 0 < top < lp.size else np.arange(lp.size if top else 0)
    best = best[np.argsort(-lp[best], kind="stable")]
    return Chosen(token, float(lp[token]), tuple((int(t), float(lp[t])) for t in best))


GREEDY = Sampling()
# ONNX Runtime GenAI's random_seed is a signed 32-bit int, and -1 asks it for a random seed.
_GENAI_SEEDS = 2**31


def genai_seed(seed: int) -> int:
    """The GenAI random_seed a request's seed (any integer, as OpenAI takes it) runs with: the seed itself from 0 to
    2**31 - 1; any other integer mapped to that range by the SHA-256 of its decimal form, so that the same seed samples
    the same answer, and no seed means GenAI's own random one (-1)."""
    seed = int(seed)
    if 0 <= seed < _GENAI_SEEDS:
        return seed
    return int.from_bytes(hashlib.sha256(str(seed).encode()).digest()[:8], "big") % _GENAI_SEEDS


class NonFinite(Exception):
    """A generation step's logits held NaN or Inf: nothing more is generated from it."""


def cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container's cpuset narrows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# How long an idle intra-op thread of a causal-LM session spins for work before it sleeps, in microseconds. A decode step
# runs hundreds of small parallel sections, and waking a sleeping thread for each costs more than a short spin; a long
# spin (ONNX Runtime's default) takes the core from whatever else runs there. Measured on the demo's INT8 build, a decode
# step of the batched session (AMD EPYC, 2 cores), ms at batch 1 / batch 8: idle, no spinning 9.24 / 19.07, 10 us
# 6.78 / 16.89, ONNX Runtime's default 6.08 / 14.50 (another run, no spinning 7.62 / 17.30); beside a core held busy, no
# spinning 10.51 / 24.13, 10 us 9.36 / 23.00, the default 13.49 / 31.47. So 10 us, faster both idle and beside a busy
# core, and no thread spins once a step is done (force_spinning_stop), while the server's own threads stream its tokens.
SPIN_US = 10
# The session config entries every causal-LM session runs with (ONNX Runtime GenAI's decoder and the batched session), so
# that the two run their threads alike: spinning SPIN_US before they sleep. Spinning changes when a thread looks for
# work, not what it computes, and the thread count changes no logit either (tests/lib/causal_lm/test_decoder.py).
SPIN_OPTIONS = {
    "session.intra_op.allow_spinning": "1",
    "session.intra_op.spin_duration_us": str(SPIN_US),
    "session.force_spinning_stop": "1",
    "session.inter_op.allow_spinning": "0",
}


def chat_template(*folders: Path | None) -> str:
    """The chat template of the first folder that has one (chat_template.jinja, or tokenizer_config.json's)."""
    for folder in folders:
        if folder is None:
            continue
        if (f := Path(folder) / "chat_template.jinja").is_file():
            return f.read_text()
        if (f := Path(folder) / "tokenizer_config.json").is_file() and (t := json.loads(f.read_text()).get("chat_template")):
            return t if isinstance(t, str) else json.dumps(t, sort_keys=True)
    return ""


class Decoder:
    """threads: ONNX Runtime's intra-op threads; None is every core this process may run on. Set here, because ONNX Runtime
    GenAI 0.18 left to itself ran one thread on this 2-core machine (measured: 1.00 CPU seconds per second). Idle threads
    spin only briefly (SPIN_OPTIONS): beside a busy core, ONNX Runtime's default spinning made 2 threads 1.3x slower
    than 1, where without it 2 threads are 1.3x faster idle and as fast beside a busy core (24 greedy answers of the
    causal-LM demo, Intel Xeon, 2 cores). The logits are the same bits at any thread count (tests/test_decoder)."""

    def __init__(self, folder: Path, threads: int | None = None, turns: Turns | None = None):
        """turns: shared with the other session on this base build's cores (lib/causal_lm/turns.py), whose runs this
        decoder's then take turns with; without it, runs go as they are asked, concurrent ones side by side."""
        import onnxruntime_genai as og

        folder = Path(folder)
        if not (folder / GENAI_CONFIG).is_file():
            raise BadCandidate(f"{folder} is not an ONNX Runtime GenAI model folder (no {GENAI_CONFIG}); build the base first")
        self._og = og
        self.turns = turns or contextlib.nullcontext()
        self.threads = int(threads or cores())
        config = og.Config(str(folder))
        # Keys that are not GenAI's own pass through to ONNX Runtime as session config entries.
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": self.threads, **SPIN_OPTIONS}}}}))
        self.model = og.Model(config)
        self.tokenizer = og.Tokenizer(self.model)
        self._genai = genai = json.loads((folder / GENAI_CONFIG).read_text())["model"]
        self.context_length = int(genai["context_length"])
        self.vocab_size = int(genai["vocab_size"])
        eos = genai["eos_token_id"]
        self.eos_ids = tuple(eos) if isinstance(eos, list) else (int(eos),)
        self.adapters = og.Adapters(self.model)
        self._loaded: set[str] = set()
        # Whether and how the chat template renders tool definitions, calls and results (the OpenAI API's tools and role
        # "tool"): tool_calls.HERMES, tool_calls.UNREAD, or None where it does not.
        self.tool_form = tool_form(chat_template(folder))

    def load_adapter(self, path: Path, name: str) -> None:
        if name not in self._loaded:
            self.adapters.load(str(path), name)
            self._loaded.add(name)

    def unload_adapter(self, name: str) -> None:
        if name in self._loaded:
            self.adapters.unload(name)
            self._loaded.discard(name)

    def _generator(self, max_length: int, adapter: str | None, sampling: Sampling = GREEDY, min_length: int = 0):
        params = self._og.GeneratorParams(self.model)
        options = {"max_length": int(max_length), "batch_size": 1, "do_sample": not sampling.greedy}
        if min_length:
            options["min_length"] = int(min_length)
        if not sampling.greedy:
            options.update(temperature=float(sampling.temperature), top_p=float(sampling.top_p), top_k=0)
            if sampling.seed is not None:
                options["random_seed"] = genai_seed(sampling.seed)
        params.set_search_options(**options)
        if sampling.guidance is not None:
            params.set_guidance(*sampling.guidance)
        generator = self._og.Generator(self.model, params)
        if adapter is not None:
            generator.set_active_adapter(self.adapters, adapter)
        return generator

    def check_guidance(self, kind: str, grammar: str) -> None:
        """ValueError with llguidance's own message when grammar (of kind "json_schema", "regex" or "lark_grammar") cannot
        guide this model's tokens; checked on a generator that holds no tokens, so it costs no model run."""
        params = self._og.GeneratorParams(self.model)
        params.set_search_options(max_length=1, batch_size=1)
        try:
            params.set_guidance(kind, grammar)
            self._og.Generator(self.model, params)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ValueError(str(e)) from None

    def token_text(self, token: int) -> str:
        """The text of one token alone (a piece of a character decodes to U+FFFD, as OpenAI's logprobs show it)."""
        return self.tokenizer.decode(np.asarray([token], np.int32))

    def logits(self, ids: list[int], adapter: str | None = None) -> np.ndarray:
        """Next-token logits at every position of ids, [len(ids), vocab], in one prefill."""
        if not 0 < len(ids) <= self.context_length:
            raise ValueError(f"{len(ids)} tokens: a sequence needs 1 to {self.context_length} tokens (the context)")
        generator = self._generator(len(ids), adapter)
        with self.turns:
            generator.append_tokens(np.asarray(ids, np.int32))
        out = np.array(generator.get_output("logits"), dtype=np.float32, copy=True)
        return out.reshape(len(ids), -1) if out.shape[-2] == len(ids) else out[0]

    def reply_logits(self, sequences: list[tuple[list[int], int]], adapter: str | None = None) -> Iterator[np.ndarray]:
        """For each (ids, reply_start): the logits that predict its reply tokens, [len(ids) - reply_start, vocab].

        The prefix every sequence shares (the system prompt, in the chat template) is prefilled once, and each sequence
        is appended after it and rewound off again: the same logits as one prefill per sequence (a test checks it), a
        third less work on the demo's chats."""
        if not sequences:
            return
        for ids, start in sequences:
            if not 0 < start < len(ids) <= self.context_length:
                raise ValueError(
                    f"a reply must start after its prompt, inside at most {self.context_length} tokens (the context): start {start} of"
                    f" {len(ids)}"
                )
        first = sequences[0][0]
        shared = min(start for _, start in sequences) - 1  # the position before each reply is computed after the rewind
        shared = next((i for i in range(shared) if any(ids[i] != first[i] for ids, _ in sequences)), shared)
        generator = self._generator(max(len(ids) for ids, _ in sequences), adapter)
        if shared:
            with self.turns:
                generator.append_tokens(np.asarray(first[:shared], np.int32))
        for ids, start in sequences:
            with self.turns:
                generator.append_tokens(np.asarray(ids[shared:], np.int32))
            out = np.array(generator.get_output("logits"), dtype=np.float32, copy=True).reshape(len(ids) - shared, -1)
            yield out[start - 1 - shared : len(ids) - 1 - shared]
            generator.rewind_to(shared)

    def _steps(self, generator, max_new_tokens: int, sampling: Sampling = GREEDY) -> Iterator[tuple[int, np.ndarray]]:
        """(token, the model's logits it was chosen from) for each generated token, the EOS token included, up to
        max_new_tokens; with sampling's bias and penalties written over the logits (set_logits) before GenAI chooses.

        The logits are read before generate_next_token(), which chooses from them: GenAI runs the model on the last token
        when its logits are first asked for (get_logits() of a decode step took 24 ms and generate_next_token() 0.04 on
        SmolLM2's INT8 build), so get_logits() after it would hold the next token's logits. get_logits() returns an array
        of its own (the next step leaves it unchanged), so it is not copied again."""
        counts: dict[int, int] = {}
        for _ in range(max_new_tokens):
            if generator.is_done():
                return
            with self.turns:  # the model run, and the choice from its logits
                logits = generator.get_logits()
                if sampling.moves_logits:
                    generator.set_logits(sampling.moved(logits, counts))
                generator.generate_next_token()
            token = int(generator.get_next_tokens()[0])
            yield token, logits
            if token in self.eos_ids:
                return
            counts[token] = counts.get(token, 0) + 1

    def generate(self, prompt: list[int], max_new_tokens: int, adapter: str | None = None) -> Generation:
        """Greedy tokens after prompt, up to EOS or max_new_tokens; the caller has checked the length (lib/inference/tokens)."""
        generator = self._generator(len(prompt) + max_new_tokens, adapter)
        start = time.perf_counter()
        with self.turns:
            generator.append_tokens(np.asarray(prompt, np.int32))
        tokens: list[int] = []
        finite, stopped, first, first_logits = True, False, 0.0, None
        for token, logits in self._steps(generator, max_new_tokens):
            finite = finite and bool(np.isfinite(logits).all())
            if not first:
                first = time.perf_counter() - start
                first_logits = np.array(logits, np.float32, copy=True).reshape(-1)
            if token in self.eos_ids:
                stopped = True
                break
            tokens.append(token)
        end = time.perf_counter()
        return Generation(tokens, stopped, first or end - start, end - start - (first or end - start), finite, first_logits)

    def stream(self, prompt: list[int], max_new_tokens: int, adapter: str | None = None, sampling: Sampling = GREEDY) -> Iterator[Chosen]:
        """The tokens after prompt as they are made (EOS not included), chosen as sampling says; NonFinite when a step's
        logits are not all finite. The KV cache is allocated for prompt + max_new_tokens and freed with the iterator.

        Plain greedy search runs as the gates judged it: GenAI's own choice from the model's logits. Bias and penalties are
        written over the logits (set_logits) before GenAI chooses, and guidance masks them there; the logits a token's
        log-probabilities come from are the model's, read before either."""
        least = len(prompt) + min(sampling.min_new_tokens, max_new_tokens) if sampling.min_new_tokens else 0
        generator = self._generator(len(prompt) + max_new_tokens, adapter, sampling, least)
        with self.turns:
            generator.append_tokens(np.asarray(prompt, np.int32))
        for made, (token, logits) in enumerate(self._steps(generator, max_new_tokens, sampling), 1):
            if not np.isfinite(logits).all():
                raise NonFinite(f"the model's logits held NaN or Inf at generated token {made}")
            if token in self.eos_ids:
                return
            yield chosen(logits, token, sampling.top_logprobs)

    def text_stream(self):
        """Incremental detokenizing of one generation: .decode(token) gives the text that token adds."""
        return self.tokenizer.create_stream()

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache one token of context holds: keys and values of every layer (float32 on CPU)."""
        d = self._genai["decoder"]
        return 2 * int(d["num_hidden_layers"]) * int(d["num_key_value_heads"]) * int(d["head_size"]) * 4

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True, tools: list[dict] | None = None) -> list[int]:
        """Token ids of messages in the model's own chat template; with tools (OpenAI's tool objects) handed to it, for a
        template that renders them (tool_form)."""
        if tools is not None and self.tool_form is None:
            raise ValueError("this base's chat template does not render tools")
        extra = {"tools": json.dumps(tools)} if tools is not None else {}
        text = self.tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=add_generation_prompt, **extra)
        return [int(i) for i in self.tokenizer.encode(text)]

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text (a completion prompt), no template."""
        return [int(i) for i in self.tokenizer.encode(text)]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(np.asarray(ids, np.int32))
