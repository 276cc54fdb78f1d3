"""Greedy decoding of many sequences of one base build's weights together, each with its own adapter: continuous
batching in plain ONNX Runtime over the graph ONNX Runtime GenAI runs, its LoRA slots taken per row.

Each sequence is prefilled alone, the batch-1 computation the gates judged, and then decoded in one batch with the
others at each step, every row at its own length: the keys and values are kept right-padded, and the graph's
GroupQueryAttention reads each row's length from its attention mask. A sequence joins the batch between two steps and
leaves it when it ends, so a request never waits for another to finish.

The session's graph is the build's own with two changes: its LoRA slots are inputs with a rows axis (per_row_lora), so
each row multiplies by its own version's adapter (or the build's own slots), as LoRAX's and punica's kernels do, and the
versions of one base share a batch; and its head computes the last position's logits only (last_position_head), the
only ones a prefill reads.

A row decoded in a batch is the row decoded alone with its adapter, bit for bit, for three reasons, each checked by a
test (tests/lib/causal_lm/test_batched.py): MatMulNBits quantizes each row's activations on its own; each row's LoRA
product is a matrix product of its own, the GEMM of one row a step that the row alone runs, so no other row changes the
order it sums in (lib/causal_lm/variants.py); and attention runs per row. At batch 1 the logits are ONNX Runtime
GenAI's own, to the bit (the same graph but for the head's last-position Slice, the same inputs), so the probe and the
gates judge exactly what a batch serves.
Sampled generations stay on GenAI's own generator (lib/causal_lm/decoder.py), whose random draws a batch could not
reproduce.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelcd_assets.lib.causal_lm.decoder import GENAI_CONFIG, SPIN_OPTIONS, cores
from modelcd_assets.lib.causal_lm.turns import Turns
from modelcd_assets.lib.causal_lm.variants import lora_matmuls
from modelcd_assets.lib.errors import BadCandidate


@dataclass(eq=False)
class Row:
    """One sequence in a batch: the adapter it decodes with (None: the base build's own slots), its keys and values
    ([1, kv heads, length, head size] per layer, until it joins), its length, and the logits its next token is chosen from."""

    length: int
    logits: np.ndarray
    kv: list[np.ndarray] | None = None
    adapter: Adapter | None = None


class Adapter:
    """An adapter file's LoRA weights, one float32 array per LoRA slot of the base build (a slot the file does not hold
    keeps the build's own weights)."""

    def __init__(self, path: Path, slots: dict[str, np.ndarray]):
        import onnxruntime as ort

        file = ort.AdapterFormat.read_adapter(str(path))  # its arrays are views of the file's buffers: copied while it is held
        params = {n: np.array(v.numpy(), copy=True) for n, v in file.get_parameters().items()}
        del file
        if unknown := sorted(set(params) - set(slots)):
            raise BadCandidate(f"{path} holds {unknown[0]} and {len(unknown) - 1} more weights that are not LoRA slots of the base build")
        for name, array in params.items():
            if array.shape != slots[name].shape or array.dtype != slots[name].dtype:
                raise BadCandidate(
                    f"{path}: {name} is {array.dtype}{list(array.shape)}, but the base build's LoRA slot is "
                    f"{slots[name].dtype}{list(slots[name].shape)}; build the adapter file for this base"
                )
        self.arrays = {n: params.get(n, default) for n, default in slots.items()}


def per_row_lora(model, folder: Path) -> dict[str, np.ndarray]:
    """The model's LoRA slots made graph inputs with a leading rows axis ([rows, in, rank] and [rows, rank, out]), in
    place, so that each row of a batch multiplies by its own adapter's weights; the slots' own weights, by name (read
    from folder's external data file where the model keeps them there).

    Each row's LoRA product is then a matrix product of its own ([1, in] by [in, rank] at a decode step), the product a
    row alone computes, whatever else the batch holds."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    lora = set(lora_matmuls(graph))
    names = {n.input[1] for n in graph.node if n.name in lora}
    inits, inputs = {i.name: i for i in graph.initializer}, {i.name: i for i in graph.input}
    if missing := sorted(names - set(inits)):
        raise BadCandidate(
            f"the base build's LoRA MatMuls read {missing[0]}, which is not one of its weights (a build made by an older modelcd "
            f"computes them through casts); rebuild the base: run 'modelcd gate' on its adapter again"
        )
    slots = {}
    for name in sorted(names):
        tensor = inits[name]
        if tensor.data_type != TensorProto.FLOAT:
            raise BadCandidate(f"the base build's LoRA slot {name} is not float32; rebuild the base")
        slots[name] = numpy_helper.to_array(tensor, base_dir=str(folder))
        info = helper.make_tensor_value_info(name, TensorProto.FLOAT, ["lora_rows", *tensor.dims])
        if name in inputs:  # an overridable initializer is a graph input as well
            inputs[name].CopyFrom(info)
        else:
            graph.input.append(info)
        graph.initializer.remove(tensor)
    return slots


def last_position_head(graph, logits: str) -> None:
    """The graph's head (the node that makes logits) made to compute the last position's logits only, in place: a prefill's
    first token is chosen from them and no earlier position's are read, and a decode step has one position. The head
    computes each row on its own, so the last position's logits are the bits a prefill of every position gives it (a
    test checks it against ONNX Runtime GenAI's); measured on the demo's INT8 build, six prompts of 43 to 55 tokens
    prefilled in 184 ms instead of 215 (AMD EPYC, 2 cores)."""
    from onnx import TensorProto, helper

    head = next((n for n in graph.node if logits in n.output), None)
    if head is None or head.op_type not in ("MatMulNBits", "MatMul"):
        made = f"its {head.op_type} node {head.name} makes" if head else "no node makes"
        raise BadCandidate(f"the base build's head is not a MatMul of its last hidden states: {made} its {logits}; rebuild the base")
    names = ("last_position_start", "last_position_end", "last_position_axis")
    graph.initializer.extend(
        helper.make_tensor(name, TensorProto.INT64, [1], [value]) for name, value in zip(names, (-1, 2**62, 1), strict=True)
    )
    last = helper.make_node("Slice", [head.input[0], *names], ["/model/last_position/output_0"], name="/model/last_position/Slice")
    head.input[0] = last.output[0]
    nodes = list(graph.node)
    nodes.insert(nodes.index(head), last)
    graph.ClearField("node")
    graph.node.extend(nodes)


class BatchedSession:
    """One session on a decoder folder (a weight variant of a base build), shared by every batch on it: its LoRA slots are
    inputs with a rows axis (per_row_lora), so the rows of one batch may each decode with another version's adapter."""

    def __init__(self, folder: Path, threads: int | None = None, turns: Turns | None = None):
        """turns: shared with the other sessions on this base build's cores (lib/causal_lm/turns.py); by default its own."""
        import onnx
        import onnxruntime as ort

        folder = Path(folder)
        if not (folder / GENAI_CONFIG).is_file():
            raise BadCandidate(f"{folder} is not an ONNX Runtime GenAI model folder (no {GENAI_CONFIG}); build the base first")
        genai = json.loads((folder / GENAI_CONFIG).read_text())["model"]
        decoder = genai["decoder"]
        self.layers, self.kv_heads, self.head_size = (
            int(decoder["num_hidden_layers"]),
            int(decoder["num_key_value_heads"]),
            int(decoder["head_size"]),
        )
        names = decoder["inputs"]
        self._past = [names[f"past_{kind}_names"] % i for i in range(self.layers) for kind in ("key", "value")]
        outputs = decoder["outputs"]
        self._present = [outputs[f"present_{kind}_names"] % i for i in range(self.layers) for kind in ("key", "value")]
        self._ids, self._mask, self._logits = names["input_ids"], names["attention_mask"], outputs["logits"]
        # The graph alone (its weights stay in the folder's external data file, which ONNX Runtime reads as it reads the
        # build's own model: a copy of the weights in this process's heap would stay there, freed, for good).
        model = onnx.load(str(folder / decoder["filename"]), load_external_data=False)
        self.slots = per_row_lora(model, folder)
        last_position_head(model.graph, self._logits)
        options = ort.SessionOptions()
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
        options.intra_op_num_threads = int(threads or cores())
        for key, value in SPIN_OPTIONS.items():
            options.add_session_config_entry(key, value)
        options.log_severity_level = 3
        self._ort = ort
        self.turns = turns or Turns()
        self.session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        del model
        self._stacked: tuple[tuple, dict] = ((), {})  # the LoRA inputs of the last batch's rows, while its rows stay
        types = {i.name: i.type for i in self.session.get_inputs()}
        self._int = {n: np.int32 if types[n] == "tensor(int32)" else np.int64 for n in (self._ids, self._mask)}

    def adapter(self, path: Path) -> Adapter:
        return Adapter(path, self.slots)

    def _lora_inputs(self, adapters: list[Adapter | None]) -> dict:
        """The LoRA inputs for rows decoding with adapters, in order: each slot's arrays stacked."""
        ort = self._ort
        return {
            n: ort.OrtValue.ortvalue_from_numpy(np.stack([a.arrays[n] if a else own for a in adapters])) for n, own in self.slots.items()
        }

    def _lora(self, adapters: list[Adapter | None]) -> dict:
        """_lora_inputs for a batch's rows, kept while its rows do not change (a prefill's are made for it alone). Read and
        replaced whole, once: the server's probe steps its own batch on this session from another thread."""
        key, cached = tuple(adapters), self._stacked
        if len(key) != len(cached[0]) or any(a is not b for a, b in zip(key, cached[0])):
            cached = self._stacked = (key, self._lora_inputs(adapters))
        return cached[1]

    def _run(self, ids: np.ndarray, mask: np.ndarray, past: list, adapters: list[Adapter | None]):
        ort = self._ort
        feed = {
            self._ids: ort.OrtValue.ortvalue_from_numpy(ids.astype(self._int[self._ids])),
            self._mask: ort.OrtValue.ortvalue_from_numpy(mask.astype(self._int[self._mask])),
            **dict(zip(self._past, past)),
            **self._lora_inputs(adapters),
        }
        with self.turns:
            out = self.session.run_with_ort_values([self._logits, *self._present], feed)
        return out[0].numpy(), out[1:]

    def prefill(self, prompt: list[int], adapter: Adapter | None) -> Row:
        """prompt run alone, as the gates ran it: a row not yet in a batch, with the logits of its first token."""
        empty = np.zeros((1, self.kv_heads, 0, self.head_size), np.float32)
        logits, present = self._run(
            np.asarray([prompt]), np.ones((1, len(prompt))), [self._ort.OrtValue.ortvalue_from_numpy(empty) for _ in self._past], [adapter]
        )
        return Row(len(prompt), logits[0, -1].copy(), [p.numpy() for p in present], adapter)

    def step(self, batch: Batch, tokens: list[int]) -> None:
        """One decode step of every row of batch, each on its token (in the batch's order) and with its own adapter: each
        row's logits for the next. Each row's new keys and values are written into the batch's buffers in place, at the
        row's own length (GroupQueryAttention with its past and present bound to one buffer, as GenAI runs it)."""
        if len(tokens) != len(batch.rows) or not tokens:
            raise ValueError(f"{len(tokens)} tokens for a batch of {len(batch.rows)} rows")
        longest = max(r.length for r in batch.rows)
        buffers = batch.room(longest + 1)
        mask = np.zeros((len(batch.rows), longest + 1), self._int[self._mask])
        for i, row in enumerate(batch.rows):
            mask[i, : row.length + 1] = 1
        ort = self._ort
        binding = self.session.io_binding()
        binding.bind_ortvalue_input(self._ids, ort.OrtValue.ortvalue_from_numpy(np.asarray(tokens, self._int[self._ids]).reshape(-1, 1)))
        binding.bind_ortvalue_input(self._mask, ort.OrtValue.ortvalue_from_numpy(mask))
        for name, value in self._lora([r.adapter for r in batch.rows]).items():
            binding.bind_ortvalue_input(name, value)
        for past, present, buffer in zip(self._past, self._present, buffers):
            binding.bind_ortvalue_input(past, buffer)
            binding.bind_ortvalue_output(present, buffer)
        binding.bind_output(self._logits)
        with self.turns:
            self.session.run_with_iobinding(binding)
        logits = binding.get_outputs()[-1].numpy()
        for i, row in enumerate(batch.rows):
            row.length += 1
            row.logits = logits[i, -1].copy()


class Batch:
    """The rows decoded together, and their keys and values: per layer and kind, a buffer [slots, kv heads, capacity, head
    size] whose first len(rows) slots are the rows', in the rows' order, each right-padded; the steps write into them in
    place. A row joins into the first free slot; a row that leaves gives its slot to the last row, so one row's keys and
    values are copied and the rows' order changes, where copying every row's on each join and leave cost more than a
    decode step (8 rows of SmolLM2 at about 140 positions: 21 to 32 ms a join or leave, a step of 8 rows about 17 ms).
    When a join needs another slot the slots double, and when a join or a step needs more positions the capacity grows by
    half, and at least GROW positions past the longest row, copying the buffers once; the last row to leave takes them
    with it, so an idle batch holds no memory."""

    GROW = 32

    def __init__(self):
        self.rows: list[Row] = []
        self.kv: list[np.ndarray] | None = None
        self._values: list | None = None  # the rows' slots of the buffers as OrtValues (wrapping the same memory)

    def __len__(self) -> int:
        return len(self.rows)

    def _wrap(self) -> None:
        import onnxruntime as ort

        n = len(self.rows)
        self._values = [ort.OrtValue.ortvalue_from_numpy(b[:n]) for b in self.kv] if n else None

    def _reserve(self, slots: int, positions: int, like: list[np.ndarray]) -> bool:
        """Buffers of at least slots slots and positions positions, the rows' keys and values in them (like: a row's arrays,
        for their shape, when there are no buffers yet); whether they were made anew."""
        have = self.kv[0].shape if self.kv else (0, 0, 0, 0)
        if have[0] >= slots and have[2] >= positions:
            return False
        slots = max(slots, have[0] if have[0] >= slots else 2 * have[0])
        capacity = have[2] if have[2] >= positions else max(positions + self.GROW, have[2] + have[2] // 2)
        n, grown = len(self.rows), []
        for a in self.kv or like:
            b = np.zeros((slots, a.shape[1], capacity, a.shape[3]), np.float32)
            if self.kv and n:
                width = min(a.shape[2], capacity)
                b[:n, :, :width] = a[:n, :, :width]
            grown.append(b)
        self.kv = grown
        return True

    def room(self, positions: int) -> list:
        """The rows' buffers as OrtValues, with room for positions in every row (grown, and copied, when they have less)."""
        if self._reserve(len(self.rows), positions, self.kv):
            self._wrap()
        return self._values

    def join(self, row: Row) -> None:
        """row into the batch from the next step on (a prefilled row, or one that left keeping its keys and values)."""
        n = len(self.rows)
        self._reserve(n + 1, row.length + 1, row.kv)
        for buffer, mine in zip(self.kv, row.kv):
            buffer[n, :, : row.length] = mine[0, :, : row.length]
            buffer[n, :, row.length :] = 0  # what a row that had the slot before left there
        row.kv = None
        self.rows.append(row)
        self._wrap()

    def leave(self, row: Row, keep: bool = False) -> None:
        """row out of the batch (it ended, its client went away, or, with keep, it waits for its client to read): with keep,
        the row takes its keys and values with it, to join again. The last row takes its slot."""
        i, last = self.rows.index(row), len(self.rows) - 1
        if keep:
            row.kv = [a[i : i + 1, :, : row.length].copy() for a in self.kv]
        if i != last:
            for a in self.kv:
                a[i] = a[last]
            self.rows[i] = self.rows[last]
        self.rows.pop()
        if not self.rows:
            self.kv = None
        self._wrap()


def batched_greedy(
    session: BatchedSession, prompts: list[list[int]], max_new_tokens: int, adapters: list[Adapter | None], eos_ids: tuple[int, ...]
) -> list[tuple[list[int], np.ndarray]]:
    """Every prompt decoded greedily in one batch, prompt i with adapters[i], each up to EOS or max_new_tokens: its tokens
    (EOS excluded) and the logits its first token was chosen from. What the server's probe checks a batch against
    (serving/lm/pool.py)."""
    if len(adapters) != len(prompts):
        raise ValueError(f"{len(adapters)} adapters for {len(prompts)} prompts")
    batch, runs, going = Batch(), [], []
    for prompt, adapter in zip(prompts, adapters):
        row = session.prefill(prompt, adapter)
        runs.append(([], row.logits))
        going.append(row)
        batch.join(row)
    last = {id(row): -1 for row in going}
    while batch.rows:
        for row in list(batch.rows):
            tokens = runs[going.index(row)][0]
            token = int(np.argmax(row.logits))
            if token in eos_ids or not np.isfinite(row.logits).all():
                batch.leave(row)
                continue
            tokens.append(token)
            last[id(row)] = token
            if len(tokens) >= max_new_tokens:
                batch.leave(row)
        if batch.rows:
            session.step(batch, [last[id(row)] for row in batch.rows])
    return runs


def probe_in_batch(
    session: BatchedSession, prompts: list[list[int]], max_new_tokens: int, adapter: Adapter, eos_ids: tuple[int, ...]
) -> list[tuple[list[int], np.ndarray]]:
    """Every probe prompt decoded greedily with adapter in one batch beside a row on other LoRA weights (the base build's
    own slots), as other versions' rows share the batch when it serves: each prompt's tokens and first-token logits. The
    fidelity gate (lib/tasks/causal_lm.py) and the server's load probe (serving/lm/pool.py) both judge this batch."""
    return batched_greedy(session, [*prompts[:1], *prompts], max_new_tokens, [None, *[adapter] * len(prompts)], eos_ids)[1:]
