"""A decoder in ONNX Runtime GenAI: teacher-forced logits and greedy generation, with or without an adapter file.

Torch-free: the serving process runs the same class. One Decoder is one model folder (the INT8 base, or its FP32 twin)
with the adapters loaded into it by name; a generator runs one sequence on one adapter from start to end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelcd_assets.lib.causal_lm.build import GENAI_CONFIG
from modelcd_assets.lib.errors import BadCandidate


@dataclass(frozen=True)
class Generation:
    tokens: list[int]  # generated ids, the EOS token excluded
    stopped_at_eos: bool
    first_token_s: float  # time to first token: the prompt's prefill and one token
    decode_s: float  # time for the tokens after the first
    finite: bool  # every step's logits were finite

    @property
    def decode_tokens_per_s(self) -> float:
        return (len(self.tokens) - 1) / self.decode_s if len(self.tokens) > 1 and self.decode_s > 0 else float("nan")


class Decoder:
    def __init__(self, folder: Path, threads: int | None = None):
        import onnxruntime_genai as og

        folder = Path(folder)
        if not (folder / GENAI_CONFIG).is_file():
            raise BadCandidate(f"{folder} is not an ONNX Runtime GenAI model folder (no {GENAI_CONFIG}); build the base first")
        self._og = og
        config = og.Config(str(folder))
        if threads:
            config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": int(threads)}}}}))
        self.model = og.Model(config)
        self.tokenizer = og.Tokenizer(self.model)
        genai = json.loads((folder / GENAI_CONFIG).read_text())["model"]
        self.context_length = int(genai["context_length"])
        self.vocab_size = int(genai["vocab_size"])
        eos = genai["eos_token_id"]
        self.eos_ids = tuple(eos) if isinstance(eos, list) else (int(eos),)
        self.adapters = og.Adapters(self.model)
        self._loaded: set[str] = set()

    def load_adapter(self, path: Path, name: str) -> None:
        if name not in self._loaded:
            self.adapters.load(str(path), name)
            self._loaded.add(name)

    def unload_adapter(self, name: str) -> None:
        if name in self._loaded:
            self.adapters.unload(name)
            self._loaded.discard(name)

    def _generator(self, max_length: int, adapter: str | None):
        params = self._og.GeneratorParams(self.model)
        params.set_search_options(max_length=int(max_length), do_sample=False, batch_size=1)
        generator = self._og.Generator(self.model, params)
        if adapter is not None:
            generator.set_active_adapter(self.adapters, adapter)
        return generator

    def logits(self, ids: list[int], adapter: str | None = None) -> np.ndarray:
        """Next-token logits at every position of ids, [len(ids), vocab], in one prefill."""
        if not 0 < len(ids) <= self.context_length:
            raise ValueError(f"{len(ids)} tokens: a sequence needs 1 to {self.context_length} tokens (the context)")
        generator = self._generator(len(ids), adapter)
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
                raise ValueError(f"a reply must start after its prompt, inside at most {self.context_length} tokens (the context): start {start} of {len(ids)}")
        first = sequences[0][0]
        shared = min(start for _, start in sequences) - 1  # the position before each reply is computed after the rewind
        shared = next((i for i in range(shared) if any(ids[i] != first[i] for ids, _ in sequences)), shared)
        generator = self._generator(max(len(ids) for ids, _ in sequences), adapter)
        if shared:
            generator.append_tokens(np.asarray(first[:shared], np.int32))
        for ids, start in sequences:
            generator.append_tokens(np.asarray(ids[shared:], np.int32))
            out = np.array(generator.get_output("logits"), dtype=np.float32, copy=True).reshape(len(ids) - shared, -1)
            yield out[start - 1 - shared : len(ids) - 1 - shared]
            generator.rewind_to(shared)

    def generate(self, prompt: list[int], max_new_tokens: int, adapter: str | None = None) -> Generation:
        """Greedy tokens after prompt, up to EOS or max_new_tokens; the caller has checked the length (lib/inference/tokens)."""
        generator = self._generator(len(prompt) + max_new_tokens, adapter)
        start = time.perf_counter()
        generator.append_tokens(np.asarray(prompt, np.int32))
        tokens: list[int] = []
        finite, stopped, first = True, False, 0.0
        while not generator.is_done() and len(tokens) < max_new_tokens:
            generator.generate_next_token()
            finite = finite and bool(np.isfinite(generator.get_logits()).all())
            token = int(generator.get_next_tokens()[0])
            if not tokens and not first:
                first = time.perf_counter() - start
            if token in self.eos_ids:
                stopped = True
                break
            tokens.append(token)
        end = time.perf_counter()
        return Generation(tokens, stopped, first or end - start, end - start - (first or end - start), finite)

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of messages in the model's own chat template."""
        text = self.tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=add_generation_prompt)
        return [int(i) for i in self.tokenizer.encode(text)]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(np.asarray(ids, np.int32))
