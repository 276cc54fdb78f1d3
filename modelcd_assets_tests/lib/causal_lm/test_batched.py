"""Continuous batching of greedy generations (lib/causal_lm/batched.py): a row decoded in a batch, whatever joins or leaves
it, is the row decoded alone by ONNX Runtime GenAI, the computation the gates judged."""

import numpy as np
import onnx
import pytest

from modelcd_assets.faults.llm_builders import scaled_lora_b
from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
from modelcd_assets.lib.causal_lm.batched import Batch, BatchedSession, Row, batched_greedy, per_row_lora
from modelcd_assets.lib.causal_lm.build import MODEL_FILE
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.variants import lora_matmuls
from modelcd_assets.lib.errors import BadCandidate

LIMIT = 1e-4  # the server's probe bound (serving.max_abs_logit_diff), and the for a batched step
ASKS = (
    "my invoice is wrong",
    "hello, the export button keeps crashing in the app since monday",
    "refund please",
    "where is my order",
    "i was charged twice for my subscription fee. thanks.",
    "cancel my plan",
)
TOKENS = 10


@pytest.fixture(scope="module")
def served(tiny_lm, tmp_path_factory):
    path = write_adapter_file(
        adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())[0], tmp_path_factory.mktemp("batched") / "a.onnx_adapter"
    )
    decoder = Decoder(tiny_lm.build.int8, threads=2)
    decoder.load_adapter(path, "a")
    session = BatchedSession(tiny_lm.build.int8, threads=2)
    prompts = [decoder.encode_chat([{"role": "user", "content": t}]) for t in ASKS]
    return decoder, session, session.adapter(path), prompts


def alone(decoder: Decoder, prompt: list[int], n: int) -> tuple[list[int], list[np.ndarray]]:
    """ONNX Runtime GenAI's greedy tokens and the logits each was chosen from, prompt alone."""
    generator = decoder._generator(len(prompt) + n, "a")
    generator.append_tokens(np.asarray(prompt, np.int32))
    steps = list(decoder._steps(generator, n))
    return [t for t, _ in steps], [np.asarray(lg, np.float32).reshape(-1) for _, lg in steps]


@pytest.mark.parametrize("grow", [1, Batch.GROW])  # buffers grown (and copied) by the least, or by GROW positions more
def test_rows_joining_parking_and_leaving_a_batch_are_each_the_row_decoded_alone(served, grow, monkeypatch):
    monkeypatch.setattr(Batch, "GROW", grow)
    decoder, session, adapter, prompts = served
    expected = [alone(decoder, p, TOKENS) for p in prompts]
    batch, got, parked, waiting, step, widest = Batch(), {}, [], list(range(len(prompts))), 0, 0
    index = {}
    while waiting or batch.rows or parked:
        if waiting:  # one arrives between every two steps
            i = waiting.pop(0)
            row = session.prefill(prompts[i], adapter)
            got[i], index[id(row)] = [row.logits], i
            batch.join(row)
        if step == 3 and len(batch) > 2:  # one waits for its client for a few steps, keeping its keys and values
            row = batch.rows[1]
            batch.leave(row, keep=True)
            parked.append((step + 3, row))
        for until, row in list(parked):
            if step >= until:
                parked.remove((until, row))
                batch.join(row)
        if batch.rows:
            widest = max(widest, len(batch))
            session.step(batch, [int(np.argmax(r.logits)) for r in batch.rows])
            for row in list(batch.rows):
                got[index[id(row)]].append(row.logits)
                if len(got[index[id(row)]]) == len(expected[index[id(row)]][1]):
                    batch.leave(row)
        step += 1
    assert widest >= 4  # rows of different lengths shared steps
    for i, (tokens, logits) in enumerate(expected):
        assert [int(np.argmax(x)) for x in got[i]] == tokens, ASKS[i]
        assert max(float(np.max(np.abs(a - b))) for a, b in zip(got[i], logits)) <= LIMIT, ASKS[i]


def test_a_prefill_makes_the_last_positions_logits_only_the_bits_genai_chooses_its_first_token_from(served):
    decoder, session, adapter, prompts = served
    for prompt in prompts:
        empty = np.zeros((1, session.kv_heads, 0, session.head_size), np.float32)
        past = [session._ort.OrtValue.ortvalue_from_numpy(empty) for _ in session._past]
        logits, _ = session._run(np.asarray([prompt]), np.ones((1, len(prompt))), past, [adapter])
        assert logits.shape[:2] == (1, 1), logits.shape  # the head ran on the last position alone
        row = session.prefill(prompt, adapter)
        tokens, logits = alone(decoder, prompt, 1)
        assert int(np.argmax(row.logits)) == tokens[0]  # (the same bits on the AMD EPYC it was written on)
        assert float(np.max(np.abs(row.logits - logits[0]))) <= LIMIT


def test_a_batch_keeps_each_rows_keys_and_values_in_its_slot_through_joins_leaves_parks_and_growth(monkeypatch):
    """Batch's bookkeeping alone, on made-up keys and values: each row's stay in the slot the rows' order gives it, zeros
    past its length, whatever left before it, was parked while the buffers grew, or joined a slot another row had."""
    monkeypatch.setattr(Batch, "GROW", 1)
    rng = np.random.default_rng(0)

    def made(length: int) -> Row:
        return Row(length, np.zeros(3, np.float32), [rng.standard_normal((1, 2, length, 4)).astype(np.float32) for _ in range(3)])

    def check(batch: Batch, kept: dict) -> None:
        for i, row in enumerate(batch.rows):
            for j, buffer in enumerate(batch.kv):
                assert np.array_equal(buffer[i, :, : row.length], kept[id(row)][j][0, :, : row.length])
                assert not buffer[i, :, row.length :].any()
        if batch.rows:  # what a step binds: the rows' slots of the buffers themselves, which it writes into in place
            for value, buffer in zip(batch._values, batch.kv, strict=True):
                assert value.shape() == [len(batch.rows), *buffer.shape[1:]] and value.data_ptr() == buffer.ctypes.data
        else:
            assert batch.kv is None and batch._values is None

    batch, kept = Batch(), {}
    rows = [made(n) for n in (5, 9, 3, 7, 4)]
    for row in rows:
        kept[id(row)] = [a.copy() for a in row.kv]
        batch.join(row)
        check(batch, kept)
    batch.leave(rows[0])  # the last row takes its slot
    assert batch.rows == [rows[4], rows[1], rows[2], rows[3]]
    check(batch, kept)
    batch.leave(rows[2], keep=True)  # parked with its keys and values
    assert all(np.array_equal(a, b[:, :, :3]) for a, b in zip(rows[2].kv, kept[id(rows[2])]))
    assert batch.rows == [rows[4], rows[1], rows[3]]
    batch.join(rows[2])  # back, into the slot rows[3] had, which holds 7 positions of rows[3]'s: 4 past its own 3
    assert batch.rows == [rows[4], rows[1], rows[3], rows[2]]
    check(batch, kept)
    batch.leave(rows[1], keep=True)
    capacity = batch.kv[0].shape[2]
    batch.room(capacity + 1)  # a step needs one more position than the buffers hold: they grow, rows[1] parked
    assert batch.kv[0].shape[2] > capacity
    check(batch, kept)
    batch.join(rows[1])
    check(batch, kept)
    for row in list(batch.rows):
        batch.leave(row)
        check(batch, kept)


def test_greedy_answers_decoded_in_one_batch_are_the_answers_alone(served):
    decoder, session, adapter, prompts = served
    runs = batched_greedy(session, prompts, 24, [adapter] * len(prompts), decoder.eos_ids)
    for prompt, (tokens, first) in zip(prompts, runs):
        alone_run = decoder.generate(prompt, 24, "a")
        assert tokens == alone_run.tokens
        assert float(np.max(np.abs(first - alone_run.first_logits))) <= LIMIT


def test_every_lora_product_of_the_served_weights_is_a_float32_matmul_of_a_slot_the_session_takes_per_row(tiny_lm):
    graph = onnx.load(str(tiny_lm.build.int8 / MODEL_FILE), load_external_data=False).graph
    lora = [n for n in graph.node if n.name in set(lora_matmuls(graph))]
    inits = {i.name: i for i in graph.initializer}
    assert len(lora) == 2 * 2 * 2  # 2 layers x (q, v) x (A, B)
    assert all(inits[n.input[1]].data_type == onnx.TensorProto.FLOAT for n in lora)
    slots = per_row_lora(onnx.load(str(tiny_lm.build.int8 / MODEL_FILE), load_external_data=False), tiny_lm.build.int8)
    assert set(slots) == {n.input[1] for n in lora} and all(a.dtype == np.float32 for a in slots.values())


def test_a_build_whose_lora_products_go_through_casts_is_refused_by_name(tiny_lm):
    """Build recipe 3 computed the products in float64, each weight read through a Cast: the session cannot take those
    weights per row, and says which and what to do."""
    model = onnx.load(str(tiny_lm.build.int8 / MODEL_FILE), load_external_data=False)
    first = next(n for n in model.graph.node if n.name in set(lora_matmuls(model.graph)))
    weight = first.input[1]
    cast = onnx.helper.make_node("Cast", [weight], [f"{weight}/f64"], name=f"{first.name}/CastW64", to=onnx.TensorProto.DOUBLE)
    first.input[1] = cast.output[0]
    model.graph.node.insert(0, cast)
    with pytest.raises(BadCandidate, match=r"LoRA MatMuls read .*/f64, which is not one of its weights .*rebuild the base"):
        per_row_lora(model, tiny_lm.build.int8)


def test_rows_of_different_adapters_in_one_batch_are_each_the_row_decoded_alone_with_its_own(served, tiny_lm, tmp_path):
    """What lets the versions of one base share a batch: each row's LoRA product is its own adapter's, so a batch of
    three adapters and the base's own weights decodes every row as GenAI decodes it alone with that row's adapter."""
    decoder, session, adapter, prompts = served
    slots = tiny_lm.build.slots()
    files = {"a": None}
    for name, factor in (("strong", 4.0), ("negated", -1.0)):
        edited = scaled_lora_b(tiny_lm.adapter, tmp_path / name, factor)
        files[name] = write_adapter_file(adapter_parameters(edited, slots)[0], tmp_path / f"{name}.onnx_adapter")
        decoder.load_adapter(files[name], name)
    adapters = {"a": adapter, **{n: session.adapter(f) for n, f in files.items() if f}, None: None}
    names = ["a", "strong", None, "negated", "a", "strong"]
    runs = batched_greedy(session, prompts, 24, [adapters[n] for n in names], decoder.eos_ids)
    for prompt, name, (tokens, first) in zip(prompts, names, runs):
        alone_run = decoder.generate(prompt, 24, name)
        assert tokens == alone_run.tokens, name
        assert float(np.max(np.abs(first - alone_run.first_logits))) <= LIMIT, name
    # the adapters do change the answers: the same prompt under two adapters is not one computation
    base_alone = decoder.generate(prompts[2], 24, None)
    assert any(decoder.generate(prompts[2], 24, n).first_logits.tolist() != base_alone.first_logits.tolist() for n in ("a", "strong"))


def test_an_adapter_file_whose_slot_shapes_are_not_the_bases_is_refused_by_name(served, tiny_lm, tmp_path):
    decoder, session, adapter, prompts = served
    params = dict(adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())[0])
    name = sorted(params)[0]
    params[name] = np.zeros((params[name].shape[0] + 1, *params[name].shape[1:]), params[name].dtype)
    path = write_adapter_file(params, tmp_path / "wrong.onnx_adapter")
    with pytest.raises(BadCandidate, match=name):
        session.adapter(path)
