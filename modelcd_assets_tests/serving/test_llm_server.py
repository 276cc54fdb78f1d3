"""A causal LM's server, as `modelcd serve` runs it, spoken to by the official `openai` client: chat and text
completions, streaming, usage, sampling, stop sequences, which versions answer, the bounds, and a client that goes away.

One module-scoped state: a tiny pre-trained Llama's adapter gated twice (v1, then v2 in production), and a third
version blocked by its perplexity gate."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import jsonschema
import numpy as np
import openai
import pytest

from modelcd_assets.faults.llm_builders import scaled_lora_b
from modelcd_assets.launch import BLOCKED, PROMOTED, run_gate
from modelcd_assets.lib.causal_lm.chats import Chat
from modelcd_assets.lib.causal_lm.decoder import Decoder, Sampling, log_probabilities
from modelcd_assets.lib.operations import traffic_log
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import ROLLED_BACK
from modelcd_assets.lib.release.rollout import read_state
from modelcd_assets.lib.release.rollout_state import RolloutState, sign_state
from modelcd_assets.lib.release.signing import Keys
from modelcd_assets.serving import ARTIFACT_HEADER, HASH_HEADER
from modelcd_assets.serving.lm.openai_api import fingerprint
from modelcd_assets_tests.conftest import module_state_fixtures
from modelcd_assets_tests.serving.conftest import ADMIN_TOKEN, gated_decoder, of_name, openai_client, ready_server, samples, wait_for
from modelcd_assets_tests.serving.hermes import ROUTE
from modelcd_assets_tests.tiny_lm import TINY_LM_POLICY

pytestmark = pytest.mark.slow
MODEL = "tiny-reply"
# Bounds small enough to reach with the tiny model: its KV cache is 512 bytes a token (2 layers, 2 KV heads of 16). A
# prompt of 210 tokens holds two functions described to the model (about 1 token a character of JSON, in the tiny tokenizer).
POLICY = (
    TINY_LM_POLICY
    + """\
serving:
  poll_seconds: 0.5
  max_completion_tokens: 200
  max_prompt_tokens: 210
  max_kv_cache_mb: 0.122
  sample_ratio: 1.0
drift:
  live_window: 200
  live_min_records: 50
"""
)
MESSAGES = [
    {"role": "system", "content": "You are a support assistant."},
    {"role": "user", "content": "i was charged twice for my invoice."},
]

env, instance = module_state_fixtures("llm-serving", {MODEL: POLICY})


@pytest.fixture(scope="module")
def versions(env, instance, tiny_lm, tmp_path_factory):
    """v1 and v2 promoted in turn (v2 is production); v3 blocked by perplexity."""
    env.registry.register(tiny_lm.base, "tiny-lm-base", role="base")
    work = tmp_path_factory.mktemp("llm-serving-adapters")
    refs = []
    for folder in (
        tiny_lm.adapter,
        scaled_lora_b(tiny_lm.adapter, work / "x1001", 1.001),
        scaled_lora_b(tiny_lm.adapter, work / "x4", 4.0),
    ):
        ref = env.registry.register(folder, MODEL)
        refs.append((ref, run_gate(ref, instance=instance)))
    assert [run.outcome for _, run in refs] == [PROMOTED, PROMOTED, BLOCKED], [(run.outcome, run.error) for _, run in refs]
    return [ref for ref, _ in refs]


@pytest.fixture(scope="module")
def server(env, versions, tmp_path_factory):
    with ready_server(env, tmp_path_factory.mktemp("llm-server") / "server.log", versions[1].version, model=MODEL) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai_client(server)


@pytest.fixture(scope="module")
def reference(env, versions):
    """The gated INT8 base build with v2's gated adapter file, run directly: what the server must answer, token for token."""
    return gated_decoder(env, versions[1], "v2")


def metric(server, name: str, **labels) -> float:
    return of_name(samples(httpx.get(f"{server.url}/metrics", timeout=30).text), name, **labels)


def test_a_chat_completion_is_the_gated_build_greedy_answer_with_its_usage(client, reference):
    done = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0)
    prompt = reference.encode_chat(MESSAGES)
    expected = reference.generate(prompt, 40, "v2")
    assert done.model == f"{MODEL}:2" and done.object == "chat.completion"
    assert done.choices[0].message.role == "assistant"
    assert done.choices[0].message.content == reference.decode(expected.tokens)
    assert done.choices[0].finish_reason == ("stop" if expected.stopped_at_eos else "length")
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (len(prompt), len(expected.tokens) + expected.stopped_at_eos)


def test_streamed_chunks_join_to_the_whole_answer_and_usage_comes_as_openai_streams_it(client):
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0, stream=True))
    assert all(c.object == "chat.completion.chunk" for c in chunks) and len(chunks) > 3
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(c.usage is None for c in chunks)  # no usage unless stream_options.include_usage asks for it
    counted = list(
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    # usage on a last chunk of its own, with no choices; null on every other
    assert counted[-1].choices == [] and counted[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert counted[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None and len(c.choices) == 1 for c in counted[:-1])
    assert counted[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    with pytest.raises(openai.BadRequestError, match="stream_options is only allowed when stream is true"):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, stream_options={"include_usage": True})


def test_concurrent_greedy_answers_are_decoded_in_batches_and_each_is_its_answer_alone(server, client, reference, env, versions):
    """Greedy generations of one base decode in one batch, whichever version each is for (lm/batching.py); each answer is
    its version's gated answer to its prompt alone, token for token, whichever rows and adapters it shared its steps with."""
    from concurrent.futures import ThreadPoolExecutor

    q = CandidateRecord.of(env.home, versions[0]).quantization()
    reference.load_adapter(CandidateRecord.of(env.home, versions[0]).build.dir / q["artifact"], "v1")
    asks = [  # as many as serving.max_generations lets run at once (4 by default), on production (v2) and on v1 by turns
        ("v2", MODEL, "i was charged twice for my invoice."),
        ("v1", f"{MODEL}:{versions[0].version}", "hello team, the export button keeps crashing in the app since the update on monday."),
        ("v2", MODEL, "refund please"),
        ("v1", f"{MODEL}:{versions[0].version}", "where is my order?"),
    ]
    chats = [(adapter, model, [MESSAGES[0], {"role": "user", "content": t}]) for adapter, model, t in asks]
    before = metric(server, "modelcd_llm_decode_batch_rows_count", model=MODEL)
    with ThreadPoolExecutor(len(chats)) as pool:
        done = list(pool.map(lambda c: client.chat.completions.create(model=c[1], messages=c[2], max_tokens=40, temperature=0), chats))
    differ = False
    for (adapter, _, messages), answer in zip(chats, done):
        expected = reference.generate(reference.encode_chat(messages), 40, adapter)
        assert answer.choices[0].message.content == reference.decode(expected.tokens), messages[1]["content"]
        assert answer.usage.completion_tokens == len(expected.tokens) + expected.stopped_at_eos
        other = reference.generate(reference.encode_chat(messages), 40, "v1" if adapter == "v2" else "v2")
        differ |= other.first_logits.tolist() != expected.first_logits.tolist()
    assert differ  # the two versions compute differently: a row decoded with the other's adapter would have been caught
    assert metric(server, "modelcd_llm_decode_batch_rows_count", model=MODEL) > before  # the batches decoded them


def test_the_raw_stream_is_server_sent_events_ending_in_done(server):
    with httpx.stream(
        "POST",
        f"{server.url}/v1/completions",
        json={"model": MODEL, "prompt": "hello team, the export", "max_tokens": 8, "temperature": 0, "stream": True},
        timeout=60,
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        data = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]" and json.loads(data[-2])["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(json.loads(d)["object"] == "text_completion" for d in data[:-1])


def test_a_text_completion_names_the_version_that_answered(client, versions):
    done = client.completions.create(
        model=f"{MODEL}:{versions[0].version}", prompt="hello team, the export button", max_tokens=8, temperature=0
    )
    assert done.model == f"{MODEL}:1" and done.object == "text_completion" and done.usage.completion_tokens <= 8
    assert isinstance(done.choices[0].text, str)


def test_seeded_sampling_repeats_and_greedy_ignores_the_seed(client):
    def ask(**kw):
        return client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24, **kw).choices[0].message.content

    assert ask(temperature=1.2, top_p=0.95, seed=7) == ask(temperature=1.2, top_p=0.95, seed=7)
    assert ask(temperature=0, seed=1) == ask(temperature=0, seed=2)


def test_a_stop_sequence_cuts_the_answer_before_it(client):
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0).choices[0].message.content
    assert len(whole) > 6, whole
    stop = whole[4:7]
    cut = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == whole[: whole.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0, stop=stop, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == whole[: whole.index(stop)]


def test_models_lists_what_is_served_and_other_names_are_404(client, versions):
    listed = {m.id for m in client.models.list()}
    assert {MODEL, f"{MODEL}:2"} <= listed
    for name in ("another-model", f"{MODEL}:99", f"{MODEL}:x", f"{MODEL}:{versions[2].version}"):  # v3 was blocked: no verdict
        with pytest.raises(openai.NotFoundError) as e:
            client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=4)
        assert e.value.body["code"] == "model_not_found", e.value.body
    assert f"{MODEL}:{versions[2].version}" not in {m.id for m in client.models.list()}


def test_every_error_is_the_openai_error_body_with_openai_status_codes(server, client):
    fields = {"message", "type", "param", "code"}
    r = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("the request body is not JSON"), r.text
    r = httpx.get(f"{server.url}/v1/nowhere")
    assert r.status_code == 404 and set(r.json()["error"]) == fields and "GET /v1/nowhere" in r.json()["error"]["message"], r.text
    r = httpx.get(f"{server.url}/v1/chat/completions")
    assert r.status_code == 405 and "POST" in r.headers["allow"], r.text
    assert set(r.json()["error"]) == fields and r.json()["error"]["type"] == "invalid_request_error", r.text
    # models.retrieve, which needs GET /v1/models/{model}
    assert client.models.retrieve(MODEL).id == MODEL and client.models.retrieve(f"{MODEL}:2").id == f"{MODEL}:2"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("another-model")
    assert e.value.body["code"] == "model_not_found", e.value.body


def test_bounds_are_refused_with_the_openai_error_before_generation(client, server):
    before = metric(server, "modelcd_requests_rejected_total", reason="max_tokens_too_large")
    with pytest.raises(openai.BadRequestError, match="serving.max_completion_tokens"):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=500)
    assert metric(server, "modelcd_requests_rejected_total", reason="max_tokens_too_large") == before + 1
    long = [{"role": "user", "content": "charged twice " * 200}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=long, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded" and "serving.max_prompt_tokens" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:  # the prompt's 68 tokens + 200 are beyond the tiny model's context of 256
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=200)
    assert e.value.body["code"] == "context_length_exceeded" and "context of 256 tokens" in e.value.body["message"]
    with pytest.raises(openai.APIStatusError) as e:  # 0.122 MiB holds 249 tokens: 68 + 185 fit the context, not the KV cache bound
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=185)
    assert e.value.status_code == 413 and "serving.max_kv_cache_mb" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError, match="serving.max_choices"):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, n=5)


def test_any_integer_is_a_seed_and_the_same_seed_samples_the_same_answer(server, client):
    # OpenAI takes any integer; ONNX Runtime GenAI a signed 32-bit one, with -1 meaning a random seed (once a 500 here).
    ask = {"model": MODEL, "prompt": "the app crashes", "max_tokens": 12, "temperature": 1.5}
    for seed in (2**63 - 1, -(2**63), 2**64 + 5, 2**31, -1):
        first = client.completions.create(**ask, seed=seed).choices[0].text
        assert client.completions.create(**ask, seed=seed).choices[0].text == first, seed


def test_a_client_that_goes_away_mid_stream_stops_its_generation_and_frees_its_cache(server, client):
    # Sampling at a high temperature, a seed whose uninterrupted answer runs to max_tokens (seeded sampling repeats).
    asks = ({"model": MODEL, "prompt": "the app crashes", "max_tokens": 180, "temperature": 2.0, "seed": seed} for seed in range(40))
    ask = next((a for a in asks if client.completions.create(**a).choices[0].finish_reason == "length"), None)
    assert ask is not None, "no seed in 40 made the tiny model generate 180 tokens without ending its turn"
    before = metric(server, "modelcd_llm_completion_tokens_total")
    with httpx.stream("POST", f"{server.url}/v1/completions", json=ask | {"stream": True}, timeout=60) as r:
        # Past the first event, which carries no token yet (read alone, the client could leave before any token was made),
        # to the first that carries text.
        chunks = (json.loads(line.removeprefix("data: ")) for line in r.iter_lines() if line.startswith("data: {"))
        assert any(c["choices"][0].get("text") for c in chunks)
    # The connection is closed: within a deadline nothing is generating, no KV cache is held, and fewer tokens were made.
    wait_for(
        lambda: metric(server, "modelcd_llm_generations_in_flight") == 0 and metric(server, "modelcd_llm_kv_cache_bytes") == 0,
        "the generation stopped and freed its KV cache",
    )
    wait_for(lambda: metric(server, "modelcd_requests_total", version="2") > 0, "counted")
    made = metric(server, "modelcd_llm_completion_tokens_total") - before
    assert 0 < made < 180, made


def test_metrics_hold_time_to_first_token_tokens_and_cost(server, client):
    client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0)
    assert metric(server, "modelcd_llm_time_to_first_token_seconds_count", version="2") >= 1
    assert metric(server, "modelcd_llm_time_per_output_token_seconds_count", version="2") >= 1
    assert metric(server, "modelcd_llm_prompt_tokens_total", version="2") > 0
    assert metric(server, "modelcd_llm_cost_usd_per_1m_tokens") > 0
    assert metric(server, "modelcd_request_errors_total", version="2") == 0
    # Each answer is priced (its share of the node's time), and priced per 1M of its tokens, per version.
    answers = metric(server, "modelcd_requests_total", version="2")
    assert metric(server, "modelcd_request_cost_usd_count", version="2") == answers
    assert 1 <= metric(server, "modelcd_llm_answer_cost_usd_per_1m_tokens_count", version="2") <= answers
    assert metric(server, "modelcd_request_cost_usd_sum", version="2") > 0
    assert metric(server, "modelcd_llm_answer_cost_usd_per_1m_tokens_sum", version="2") > 0


def rollout_state(env, versions, kind: str, share: float, status: str = "running"):
    """Sign and store a rollout of v1 against production v2, as the rollout asset would."""
    current = read_state(env.registry, MODEL)
    state = RolloutState(
        model=MODEL,
        version=versions[0].version,
        against=versions[1].version,
        step=0,
        steps=2,
        kind=kind,
        share=share,
        status=status,
        since=time.time(),
        sequence=current.sequence + 1 if current else 0,
        policy_sha256="test",
    )
    env.registry.put_rollout_envelope(MODEL, sign_state(state, Keys.from_env(env.env).private))


def test_a_rollout_canaries_by_user_and_shadows_greedy_generations(server, client, env, versions):
    v1, v2 = versions[0].version, versions[1].version
    rollout_state(env, versions, "canary", 0.5)
    wait_for(lambda: metric(server, "modelcd_rollout_share", arm="canary") == 0.5, "the server following the canary step")
    answered = {}
    for user in (f"user-{i}" for i in range(16)):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0, user=user)
        answered[user] = (raw.headers["x-modelcd-version"], raw.headers.get("x-modelcd-arm"))
        again = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0, user=user)
        assert again.headers["x-modelcd-version"] == answered[user][0]  # sticky per user
    assert {v for v, _ in answered.values()} == {v1, v2}
    assert all(arm == "canary" for v, arm in answered.values() if v == v1)
    assert all(arm is None for v, arm in answered.values() if v == v2)
    assert (
        metric(server, "modelcd_llm_answers_at_eos_total", version=v1) + metric(server, "modelcd_llm_answer_tokens_count", version=v1) > 0
    )

    rollout_state(env, versions, "shadow", 1.0)
    wait_for(lambda: metric(server, "modelcd_rollout_share", arm="shadow") == 1.0, "the server following the shadow step")
    before = metric(server, "modelcd_shadow_pairs_total", version=v1)
    for _ in range(4):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0)
        assert raw.headers["x-modelcd-version"] == v2  # a shadow's answers are never returned
    wait_for(lambda: metric(server, "modelcd_shadow_pairs_total", version=v1) >= before + 1, "a shadowed greedy generation paired")
    # v1's adapter is LoRA B x 1/1.001 of v2's: the same greedy first token, and about the same length.
    assert metric(server, "modelcd_shadow_agreements_total", version=v1) >= 1
    assert metric(server, "modelcd_shadow_length_ratio_count", version=v1) >= 1
    shadow = traffic_log.folder(Path(env.env["MODELCD_HOME"]), MODEL, traffic_log.SHADOW_PAIRS)
    pairs = (shadow / traffic_log.CURRENT).read_text().splitlines()
    record = json.loads(pairs[-1])
    assert record["production"] == v2 and record["candidate"] == v1 and record["greedy"] and "candidate_text" in record
    # EOS reached is compared per pair: of the pairs whose production answer ended its turn, those whose copy did too.
    kept = [json.loads(line) for line in pairs]
    kept = [r for r in kept if r["candidate"] == v1 and r["greedy"] and "eos" in r]
    eos_pairs, eos_kept = (
        metric(server, "modelcd_shadow_eos_pairs_total", version=v1),
        metric(server, "modelcd_shadow_eos_kept_total", version=v1),
    )
    assert eos_kept <= eos_pairs <= metric(server, "modelcd_shadow_pairs_total", version=v1)
    assert eos_pairs >= sum(r["eos"]["production"] for r in kept)
    assert eos_kept >= sum(r["eos"]["production"] and r["eos"]["candidate"] for r in kept)
    rollout_state(env, versions, "shadow", 1.0, status="aborted")
    wait_for(lambda: metric(server, "modelcd_rollout_share", arm="shadow") == 0, "the share dropped once the rollout ended")


def test_a_version_whose_recorded_probe_or_adapter_changed_is_refused_and_the_old_one_keeps_serving(server, env, versions):
    record = CandidateRecord.of(env.home, versions[0])
    q = record.quantization()
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    unload = httpx.delete(f"{server.admin_url}/v1/admin/adapters/{versions[0].version}", headers=auth, timeout=60)
    assert unload.status_code in (200, 404), unload.text  # loaded by an earlier test, or not
    for path, why in ((record.build.dir / q["probe"]["logits"], "probe logits"), (record.build.dir / q["artifact"], "adapter")):
        original = path.read_bytes()
        path.write_bytes(original[:-8] + bytes(8))  # the same size, other bytes
        try:
            r = httpx.post(
                f"{server.admin_url}/v1/admin/adapters", json={"version": versions[0].version, "activate": False}, headers=auth, timeout=60
            )
        finally:
            path.write_bytes(original)
        assert r.status_code in (409, 422) and r.json()["serving"] == "2", (why, r.text)
    # Probe logits recorded one token late (by modelcd before PROBE_LOGITS_OF) are not compared: the version must be re-gated.
    # And greedy tokens other than the recorded ones are refused.
    original = record.files.quantization.read_text()
    older, other = json.loads(original), json.loads(original)
    del older["probe"]["logits_of"]
    other["probe"]["tokens"][0][0] += 1
    for changed, expected in (
        (older, "gated by an older modelcd"),
        (other, "0 of 2 greedy sequences of 4 tokens equal, alone and in one batch"),
    ):
        record.files.quantization.write_text(json.dumps(changed))
        try:
            r = httpx.post(
                f"{server.admin_url}/v1/admin/adapters", json={"version": versions[0].version, "activate": False}, headers=auth, timeout=60
            )
        finally:
            record.files.quantization.write_text(original)
        assert r.status_code == 422 and expected in r.json()["error"], r.text
    r = httpx.post(
        f"{server.admin_url}/v1/admin/adapters", json={"version": versions[0].version, "activate": False}, headers=auth, timeout=60
    )
    assert r.status_code == 200, r.text
    steps = r.json()["loaded"]["steps"]
    assert list(steps) == [
        "records",
        "verdict verified over the registered files, INT8 base build, adapter file and tokenizer",
        "registered files scanned",
        "adapter loaded",
        "probed against the gated generations",
    ]


def test_the_serving_process_imports_neither_torch_nor_dagster(env, versions):
    import os
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from modelcd_assets.cli import parser\n"
        "from modelcd_assets.serving.server import app_from_env\n"
        "import uvicorn, mlflow\n"
        "app = app_from_env(sys.argv[1])\n"
        "pool = app.state.pool\n"
        "served = pool.activate(pool.load(sys.argv[2]).version)\n"
        "assert list(served.decoder.stream(served.decoder.encode('hello'), 3, served.adapter))\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'dagster', 'transformers', 'peft'})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, MODEL, versions[1].version],
        env={**os.environ, **env.env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_a_version_loaded_again_replaces_its_adapter_in_the_session_instead_of_adding_one(env, versions):
    """Every swap is a whole verified load, so a server swapping between two versions loads each again and again: the
    old copy must leave the base session (and its private file go), or each swap leaks an adapter. Reproduced before
    the fix: 5 adapters and 5 files in the session after 5 loads of 2 versions."""
    import os
    import subprocess
    import sys

    script = (
        "import json, sys\nfrom modelcd_assets.serving.server import app_from_env\napp = app_from_env(sys.argv[1])\npool ="
        " app.state.pool\nfor _ in range(3):\n    pool.activate(pool.load(sys.argv[3]).version)\npool.load(sys.argv[2]);"
        " pool.load(sys.argv[2])\nserved = pool.active\nprint(json.dumps({'adapters': len(served.decoder._loaded), 'files':"
        " len(list(pool._private.iterdir())),\n                  'active': served.version, 'answers':"
        " len(list(served.decoder.stream(served.decoder.encode('hello'), 3, served.adapter)))}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, MODEL, versions[0].version, versions[1].version],
        env={**os.environ, **env.env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"adapters": 2, "files": 2, "active": versions[1].version, "answers": 3}


def test_the_alias_moved_by_hand_to_a_blocked_version_never_changes_what_answers(server, client, env, versions):
    from mlflow import MlflowClient

    from modelcd_assets.lib.release.registry import PRODUCTION

    blocked = versions[2]
    registry = MlflowClient(tracking_uri=env.env["MLFLOW_TRACKING_URI"])
    try:
        registry.set_registered_model_alias(MODEL, PRODUCTION, blocked.version)  # anyone who can write the registry
        wait_for(lambda: metric(server, "modelcd_alias_refused", version=blocked.version) == 1, "the server refusing the blocked version")
        done = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0)
        assert done.model == f"{MODEL}:{versions[1].version}"
        assert httpx.get(f"{server.url}/readyz", timeout=30).json()["version"] == versions[1].version
        # Moved to a version with a verdict: swapped in without a restart, and NAME answers from it.
        registry.set_registered_model_alias(MODEL, PRODUCTION, versions[0].version)
        wait_for(
            lambda: httpx.get(f"{server.url}/readyz", timeout=30).json()["version"] == versions[0].version, "following production to v1"
        )
        assert (
            client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0).model
            == f"{MODEL}:{versions[0].version}"
        )
    finally:
        registry.set_registered_model_alias(MODEL, PRODUCTION, versions[1].version)
        wait_for(lambda: httpx.get(f"{server.url}/readyz", timeout=30).json()["version"] == versions[1].version, "back on v2")


def test_a_rolled_back_version_is_answered_from_no_more(server, client, env, versions):
    ref = versions[0]
    client.completions.create(model=f"{MODEL}:{ref.version}", prompt="hello", max_tokens=2)  # loaded
    env.registry.set_tags(ref, {ROLLED_BACK: "test: production was rolled back from it"})

    def refused() -> bool:
        try:
            client.completions.create(model=f"{MODEL}:{ref.version}", prompt="hello", max_tokens=2)
        except openai.NotFoundError:
            return True
        return False

    wait_for(refused, "the rolled-back version is 404 once the server has read the registry")
    assert f"{MODEL}:{ref.version}" not in {m.id for m in client.models.list()}


def test_admission_is_bounded_and_answers_429_with_retry_after():
    from modelcd_assets.lib.judging.policy import ServingPolicy
    from modelcd_assets.serving.lm.generation import Generations
    from modelcd_assets.serving.lm.openai_api import ApiError
    from modelcd_assets.serving.metrics import LmServerMetrics
    from modelcd_assets.serving.rejections import Rejected

    gen = Generations("m", ServingPolicy(max_generations=2, retry_after_s=3), LmServerMetrics(0.1))
    try:
        first, second = (gen.admit(10, 10, 256, 512) for _ in range(2))
        with pytest.raises(Rejected) as e:
            gen.admit(10, 10, 256, 512)
        assert e.value.status == 429 and e.value.headers == {"Retry-After": "3"}
        assert ApiError.of(e.value).body()["error"] | {"message": ""} == {
            "message": "",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        assert gen.kv_bytes == 2 * 20 * 512
        gen._finished(first, 10)
        gen.admit(10, 10, 256, 512)  # a slot is free again
    finally:
        gen.close()


def test_stop_sequences_split_across_tokens_are_cut():
    from modelcd_assets.serving.lm.openai_api import StopCut

    cut = StopCut(["END"])
    sent = [cut.feed(p) for p in ["hel", "lo E", "N", "D and more"]]
    assert "".join(sent) == "hello " and cut.stopped and cut.flush() == ""
    keep = StopCut(["END"])
    assert "".join([keep.feed("an E"), keep.feed("ND"[:1]), keep.flush()]) == "an EN"


def test_a_stream_dropped_unread_gives_its_admission_and_cache_back(tiny_lm, tmp_path):
    """A response that is never sent (its client gone before the first byte): the stream is collected and its generation stops."""
    import asyncio
    import gc
    import time

    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
    from modelcd_assets.lib.causal_lm.decoder import Sampling
    from modelcd_assets.lib.judging.policy import ServingPolicy
    from modelcd_assets.serving.lm.generation import Generations
    from modelcd_assets.serving.lm.pool import Base, LmServed
    from modelcd_assets.serving.metrics import LmServerMetrics

    decoder = Decoder(tiny_lm.build.int8)
    path = write_adapter_file(adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())[0], tmp_path / "a.onnx_adapter")
    decoder.load_adapter(path, "a")
    served = LmServed("m", "1", "c" * 64, "b" * 64, "f" * 64, "int8-weight-only", Base(tiny_lm.build.int8, decoder, "b" * 64), "a", path)
    gen = Generations("m", ServingPolicy(max_generations=1), LmServerMetrics(0.1))
    prompt = decoder.encode("the app crashes")

    async def scenario() -> None:
        admitted = gen.admit(len(prompt), 200, decoder.context_length, decoder.kv_bytes_per_token)
        stream = gen.tokens(served, prompt, admitted, Sampling(2.0, 1.0, 3))  # started, never read
        await asyncio.sleep(0.2)
        del stream
        gc.collect()
        deadline = time.monotonic() + 60
        while gen.running and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    try:
        asyncio.run(scenario())
        assert (gen.running, gen.kv_bytes) == (0, 0)
        gen.admit(len(prompt), 8, decoder.context_length, decoder.kv_bytes_per_token)  # the one slot is free again
    finally:
        gen.close()


def test_a_bases_two_sessions_take_turns_so_a_probe_never_runs_beside_a_serving_step(tiny_lm):
    """The GenAI decoder (a load probe's or a sampled generation's runs) and the batched session (the serving batch's) on one
    base run on the same cores: every run of either waits for the run before it to end."""
    import threading

    from modelcd_assets.lib.causal_lm.batched import batched_greedy
    from modelcd_assets.serving.lm.pool import Base

    base = Base.open(tiny_lm.build.int8, "b" * 64, threads=2, batched=True)
    runs: list[tuple[float, float, str]] = []

    outside: list[str] = []  # model runs made without the turn

    def timed(call, what: str):
        def run(*a, **kw):
            if not base.decoder.turns.mine:
                outside.append(f"{what} {call.__name__}")
            began = time.perf_counter()
            try:
                return call(*a, **kw)
            finally:
                runs.append((began, time.perf_counter(), what))

        return run

    class Generator:  # GenAI's generator, the calls that run its model timed (get_logits runs a decode step's)
        def __init__(self, inner):
            self._inner = inner
            self.append_tokens = timed(inner.append_tokens, "decoder")
            self.get_logits = timed(inner.get_logits, "decoder")

        def __getattr__(self, name):
            return getattr(self._inner, name)

    make = base.decoder._generator
    base.decoder._generator = lambda *a, **kw: Generator(make(*a, **kw))
    session = base.batched.session
    session.run_with_ort_values = timed(session.run_with_ort_values, "batched")
    session.run_with_iobinding = timed(session.run_with_iobinding, "batched")
    prompts = [base.decoder.encode_chat([{"role": "user", "content": t}]) for t in ("refund please", "the app crashes", "hello")]
    decoding = threading.Event()

    def decode() -> None:
        try:
            for p in prompts * 4:
                base.decoder.generate(p, 16)
        finally:
            decoding.set()

    def batch() -> None:  # batches for as long as the decoder decodes, so that the two always ask at once
        for _ in range(200):
            batched_greedy(base.batched, prompts, 16, [None] * 3, base.decoder.eos_ids)
            if decoding.is_set():
                return

    workers = [threading.Thread(target=decode), threading.Thread(target=batch)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not any(w.is_alive() for w in workers)
    assert {what for _, _, what in runs} == {"decoder", "batched"}
    assert not outside, f"{len(outside)} model runs went without their turn, the first {outside[0]}"
    runs.sort()
    overlaps = [(a, b) for a, b in zip(runs, runs[1:]) if b[0] < a[1]]
    assert not overlaps, f"{len(overlaps)} of {len(runs)} runs began before the run before them ended: {overlaps[:3]}"


def test_live_drift_judges_a_causal_lm_production_on_its_sampled_prompts(env, instance, versions):
    """live_traffic on the user messages the server samples: like the evaluation chats' passes, digits drift."""
    import shutil
    from pathlib import Path

    from modelcd_assets.defs.schedules import LIVE_TRAFFIC_JOB
    from modelcd_assets.launch import definitions
    from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
    from modelcd_assets.lib.operations import traffic_log
    from modelcd_assets.lib.operations.traffic_log import TrafficLog
    from modelcd_assets.lib.splits import split_path

    home = Path(env.env["MODELCD_HOME"])
    production = env.registry.production(MODEL)

    def judged(texts: list[str]):
        shutil.rmtree(traffic_log.folder(home, MODEL), ignore_errors=True)
        log = TrafficLog(home, MODEL, ratio=1.0, max_records=10_000)
        for text in texts:
            log.append(production.version, [text])
        result = definitions().resolve_job_def(LIVE_TRAFFIC_JOB).execute_in_process(instance=instance, raise_on_error=False)
        assert result.success
        return traffic_log.read_live_drift(home, MODEL)

    like = [c.user for c in read_chats(split_path(env.data, chat_split("evaluation")))]
    calm = judged(like[:200])
    assert calm.judged and not calm.detected and calm.version == production.version, calm
    drifted = judged([str(i % 10) * 60 for i in range(120)])
    assert drifted.judged and drifted.detected and "digit_share" in drifted.descriptors, drifted


# The OpenAI API's fields: each honoured, computed as the core computes it, or refused by name.


def test_logprobs_are_the_gated_builds_and_stream_as_they_answer(client, reference):
    prompt = reference.encode_chat(MESSAGES)
    expected = reference.generate(prompt, 24, "v2")
    done = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0, logprobs=True, top_logprobs=3)
    content = done.choices[0].logprobs.content
    assert "".join(e.token for e in content) == done.choices[0].message.content
    assert len(content) == len(expected.tokens) and all(len(e.top_logprobs) == 3 for e in content)
    # the first token's logprobs are those of the logits gating recorded for the probe: the same build, adapter and prompt
    first = log_probabilities(expected.first_logits)
    assert content[0].logprob == pytest.approx(first[expected.tokens[0]], abs=1e-6)
    assert content[0].top_logprobs[0].token == content[0].token and bytes(content[0].bytes) == content[0].token.encode()
    streamed = list(
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0, logprobs=True, top_logprobs=3, stream=True
        )
    )
    entries = [e for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in entries] == [(e.token, e.logprob) for e in content]
    with pytest.raises(openai.BadRequestError) as e:  # OpenAI's bound
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, logprobs=True, top_logprobs=21)
    assert e.value.body["param"] == "top_logprobs"
    text = client.completions.create(model=MODEL, prompt="the app crashes", max_tokens=8, temperature=0, logprobs=2).choices[0]
    assert "".join(text.logprobs.tokens) == text.text and len(text.logprobs.token_logprobs) == len(text.logprobs.tokens)
    assert all(len(top) >= 2 for top in text.logprobs.top_logprobs) and text.logprobs.text_offset[0] == 0


def test_logprobs_are_the_log_softmax_of_the_logits_gating_recorded_for_the_probe(env, versions, client, reference):
    """The probe prompts as gating ran them: each first token's logprob and its 20 alternatives are the log-softmax of the
    logits gating recorded (probe_logits.npy), the logits the server's load probe checks again before it serves a version."""
    record = CandidateRecord.of(env.home, versions[1])
    probe = record.quantization()["probe"]
    recorded = np.load(record.build.dir / probe["logits"])
    compared = 0
    for prompt, tokens, logits in zip(probe["prompts"], probe["tokens"], recorded, strict=True):
        messages = Chat(probe["system"], prompt, "").messages()
        done = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, temperature=0, logprobs=True, top_logprobs=20)
        if not tokens:  # the probe's answer ended at once: no token to carry logprobs
            assert done.choices[0].message.content == "" and done.choices[0].finish_reason == "stop"
            continue
        expected, (first,) = log_probabilities(logits), done.choices[0].logprobs.content
        assert first.token == reference.token_text(tokens[0]) and first.logprob == pytest.approx(expected[tokens[0]], abs=1e-6)
        assert [e.logprob for e in first.top_logprobs] == pytest.approx(sorted(expected.tolist(), reverse=True)[:20], abs=1e-6)
        compared += 1
    assert compared >= 1


def test_bias_and_penalties_move_the_choice_as_the_core_moves_it(client, reference):
    prompt = reference.encode_chat(MESSAGES)
    plain = reference.generate(prompt, 30, "v2").tokens
    # penalties the core moves this answer with (which move it depends on the weight variant the tiny model was given)
    penalties = ((2.0, 2.0), (2.0, 1.0), (1.0, 2.0), (-2.0, -2.0), (2.0, -2.0), (-2.0, 2.0))
    moved = next(
        (f, p)
        for f, p in penalties
        if [c.token for c in reference.stream(prompt, 30, "v2", Sampling(frequency_penalty=f, presence_penalty=p))] != plain
    )
    asks = [
        ({"frequency_penalty": moved[0], "presence_penalty": moved[1]}, Sampling(frequency_penalty=moved[0], presence_penalty=moved[1])),
        ({"logit_bias": {str(plain[0]): -100}}, Sampling(logit_bias=((plain[0], -100.0),))),
    ]
    for fields, sampling in asks:
        answer = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=30, temperature=0, **fields)
        expected = [c.token for c in reference.stream(prompt, 30, "v2", sampling)]
        assert expected != plain, fields
        assert answer.choices[0].message.content == reference.decode(expected), fields
    with pytest.raises(openai.BadRequestError, match="vocabulary has") as e:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, logit_bias={"999999": 5})
    assert e.value.body["param"] == "logit_bias"


def test_response_format_constrains_the_answer_to_json_and_its_schema(client):
    schema = {
        "type": "object",
        "properties": {"team": {"enum": ["billing", "bugs", "orders"]}, "urgent": {"type": "boolean"}},
        "required": ["team", "urgent"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "routing", "schema": schema, "strict": True}}
    for temperature in (0, 1.0):
        done = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=60, temperature=temperature, response_format=fmt)
        jsonschema.validate(json.loads(done.choices[0].message.content), schema)
    anything = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=60, response_format={"type": "json_object"})
    if anything.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(anything.choices[0].message.content), dict)
    else:  # cut at max_tokens: a prefix of an object
        assert anything.choices[0].message.content.startswith("{")
    for bad, param in (
        ({"type": "sound"}, "response_format.type"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}, "response_format"),
    ):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, response_format=bad)
        assert e.value.body["param"] == param, e.value.body


# Functions small enough to describe within the tiny model's context; closed objects, as OpenAI's strict mode requires
TOOLS = [
    ROUTE,
    {
        "type": "function",
        "function": {
            "name": "close",
            "parameters": {
                "type": "object",
                "properties": {"spam": {"type": "boolean"}},
                "required": ["spam"],
                "additionalProperties": False,
            },
        },
    },
]
TOOL_ASK = [{"role": "user", "content": "refund please"}]


def test_a_named_or_required_tool_choice_answers_with_a_call_that_fits_the_function(client):
    named = {"type": "function", "function": {"name": "route"}}
    ask = {"model": MODEL, "messages": TOOL_ASK, "max_tokens": 40, "temperature": 0}
    done = client.chat.completions.create(**ask, tools=TOOLS[:1], tool_choice=named, logprobs=True)
    (call,) = done.choices[0].message.tool_calls
    assert done.choices[0].finish_reason == "tool_calls" and done.choices[0].message.content is None
    assert call.type == "function" and call.function.name == "route" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), TOOLS[0]["function"]["parameters"])
    streamed = list(client.chat.completions.create(**ask, tools=TOOLS[:1], tool_choice=named, stream=True, logprobs=True))
    deltas = [t for c in streamed if c.choices and c.choices[0].delta.tool_calls for t in c.choices[0].delta.tool_calls]
    assert [(t.function.name, t.function.arguments) for t in deltas] == [("route", call.function.arguments)]
    assert streamed[-1].choices[0].finish_reason == "tool_calls"
    # the call's tokens' logprobs, whole and streamed (sent with the call, which is sent whole)
    whole_lp = [(t.token, t.logprob) for t in done.choices[0].logprobs.content]
    streamed_lp = [(t.token, t.logprob) for c in streamed if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert whole_lp and streamed_lp == whole_lp
    # the model picks the function too (one here: two functions described are beyond the tiny model's context)
    required = client.chat.completions.create(
        **(ask | {"temperature": 1.0, "seed": 5, "max_tokens": 44}), tools=TOOLS[:1], tool_choice="required"
    )
    (call,) = required.choices[0].message.tool_calls
    fn = next(t["function"] for t in TOOLS if t["function"]["name"] == call.function.name)
    jsonschema.validate(json.loads(call.function.arguments), fn["parameters"])


def test_what_the_chat_template_cannot_render_is_refused_by_name(client):
    tool_turn = MESSAGES + [
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "close_ticket", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "closed"},
    ]
    for fields, param in (
        ({"tools": TOOLS}, "tool_choice"),  # auto, the default
        ({"tools": TOOLS, "tool_choice": "auto"}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),  # without tools
        ({"messages": tool_turn}, "messages[2]"),
        ({"messages": [{"role": "user", "content": "hi", "name": "ann"}]}, "messages[0].name"),
    ):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(**({"model": MODEL, "messages": MESSAGES, "max_tokens": 4} | fields))
        assert e.value.body["param"] == param, (fields, e.value.body)
    assert "does not render tools" in e.value.body["message"] or "participants' names" in e.value.body["message"]
    # tool_choice none: the functions are described, and the answer is text
    done = client.chat.completions.create(model=MODEL, messages=TOOL_ASK, max_tokens=8, temperature=0, tools=TOOLS[:1], tool_choice="none")
    assert done.choices[0].message.tool_calls is None and done.choices[0].finish_reason in ("stop", "length")


def test_unknown_and_unserved_fields_are_refused_by_name(server, client):
    ask = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4}
    for extra, param in (
        ({"top_k": 5}, "top_k"),  # vLLM's, not OpenAI's
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"store": True}, "store"),
        ({"reasoning_effort": "high"}, "reasoning_effort"),
        ({"service_tier": "flex"}, "service_tier"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"stream_options": {"include_usage": True, "extra": 1}, "stream": True}, "stream_options.extra"),
        # a message's fields that this turn cannot carry, or would render without
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "hi", "tool_call_id": "c1"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": "hi", "refusal": "no"}]}, "messages[0].refusal"),
        ({"messages": MESSAGES + [{"role": "assistant", "content": "ok", "refusal": "no"}]}, f"messages[{len(MESSAGES)}].refusal"),
    ):
        r = httpx.post(f"{server.url}/v1/chat/completions", json=ask | extra, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param and param.split(".")[-1] in r.json()["error"]["message"], r.text
    for extra, param in (({"suffix": "end"}, "suffix"), ({"best_of": 3}, "best_of"), ({"echo": True, "logprobs": 1}, "echo")):
        r = httpx.post(f"{server.url}/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 4} | extra, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    # the off values of what is not served are accepted, and OpenAI's message shape has its refusal field
    done = httpx.post(f"{server.url}/v1/chat/completions", json=ask | {"store": False, "service_tier": "auto"}, timeout=60).json()
    assert done["choices"][0]["message"]["refusal"] is None and "refusal" in done["choices"][0]["message"]


def test_n_choices_prompt_lists_token_prompts_echo_and_top_p_zero(client, reference):
    greedy = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0)
    three = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, n=3)
    assert [c.index for c in three.choices] == [0, 1, 2]
    assert {c.message.content for c in three.choices} == {greedy.choices[0].message.content}
    assert three.usage.prompt_tokens == greedy.usage.prompt_tokens  # the prompt counted once, as OpenAI counts it
    assert three.usage.completion_tokens == 3 * greedy.usage.completion_tokens
    sampled = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=1.5, seed=11, n=2)
    assert (
        sampled.choices[0].message.content
        == client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=1.5, seed=11)
        .choices[0]
        .message.content
    )  # choice 0 samples with the seed; choice i with seed + i
    assert (
        sampled.choices[1].message.content
        == client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=1.5, seed=12)
        .choices[0]
        .message.content
    )
    streamed = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, n=2, stream=True))
    for i in (0, 1):
        text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices and c.choices[0].index == i)
        assert text == greedy.choices[0].message.content
    assert client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, top_p=0).choices[0].message.content == (
        greedy.choices[0].message.content
    )  # a nucleus of one token: greedy

    texts = ["the app crashes", "refund please"]
    ids = reference.encode(texts[0])
    listed = client.completions.create(model=MODEL, prompt=texts, max_tokens=8, temperature=0)
    alone = [client.completions.create(model=MODEL, prompt=t, max_tokens=8, temperature=0).choices[0].text for t in texts]
    assert [c.text for c in sorted(listed.choices, key=lambda c: c.index)] == alone
    assert listed.usage.prompt_tokens == sum(len(reference.encode(t)) for t in texts)
    assert client.completions.create(model=MODEL, prompt=ids, max_tokens=8, temperature=0).choices[0].text == alone[0]
    echoed = client.completions.create(model=MODEL, prompt=texts[0], max_tokens=8, temperature=0, echo=True).choices[0].text
    assert echoed == texts[0] + alone[0]
    with pytest.raises(openai.BadRequestError, match="vocabulary") as e:
        client.completions.create(model=MODEL, prompt=[ids[0], 10**9], max_tokens=4)
    assert e.value.body["param"] == "prompt"


def json_schema(node):
    """OpenAPI's schema as JSON Schema: the spec marks what may be null with OpenAPI 3.0's `nullable: true`."""
    if isinstance(node, list):
        return [json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: json_schema(v) for k, v in node.items() if k != "nullable"}
    return {"anyOf": [out, {"type": "null"}]} if node.get("nullable") is True else out


def completion_chunk(spec: dict) -> dict:
    """The spec has no schema for a streamed text completion's chunks: OpenAI streams them in CreateCompletionResponse's
    shape, with finish_reason null until a choice ends, and usage null but on the last chunk when include_usage asks."""
    chunk = json.loads(json.dumps(spec["components"]["schemas"]["CreateCompletionResponse"]))
    choice = chunk["properties"]["choices"]["items"]["properties"]
    choice["finish_reason"] = {"anyOf": [choice["finish_reason"], {"type": "null"}]}
    chunk["properties"]["usage"] = {"anyOf": [chunk["properties"]["usage"], {"type": "null"}]}
    return chunk


SPEC = json_schema(json.loads((Path(__file__).parent / "openai_spec" / "schemas.json").read_text()))
SPEC["components"]["schemas"]["CompletionChunk"] = completion_chunk(SPEC)


def spec_errors(schema: str, instance) -> list[str]:
    """What in instance violates OpenAI's OpenAPI schema of that name (openai_spec/schemas.json, at the commit it records)."""
    validator = jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{schema}", "components": SPEC["components"]})
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


def sse(server, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{server.url}{path}", json=body | {"stream": True}, timeout=60) as r:
        assert r.status_code == 200, r.read()
        data = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_every_answer_fits_the_openai_openapi_schemas(server):
    chat = {"model": MODEL, "messages": MESSAGES, "max_tokens": 12, "temperature": 0}
    named = {"tools": TOOLS[:1], "tool_choice": {"type": "function", "function": {"name": "route"}}, "messages": TOOL_ASK, "max_tokens": 40}
    chats = [chat, chat | {"logprobs": True, "top_logprobs": 2, "n": 2}, chat | named, chat | {"response_format": {"type": "json_object"}}]
    texts = [
        {"model": MODEL, "prompt": "the app crashes", "max_tokens": 8, "temperature": 0},
        {"model": MODEL, "prompt": ["the app crashes", "refund"], "max_tokens": 8, "logprobs": 2, "seed": 3},
        {"model": MODEL, "prompt": "refund", "max_tokens": 8, "echo": True, "temperature": 0},
    ]
    samples = []
    for body in chats:
        samples.append(("CreateChatCompletionResponse", httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60).json()))
        for streamed in (body, body | {"stream_options": {"include_usage": True}}):
            samples += [("CreateChatCompletionStreamResponse", c) for c in sse(server, "/v1/chat/completions", streamed)]
    for body in texts:
        samples.append(("CreateCompletionResponse", httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()))
        samples += [("CompletionChunk", c) for c in sse(server, "/v1/completions", body | {"stream_options": {"include_usage": True}})]
    samples += [
        ("ListModelsResponse", httpx.get(f"{server.url}/v1/models", timeout=60).json()),
        ("Model", httpx.get(f"{server.url}/v1/models/{MODEL}", timeout=60).json()),
        ("ErrorResponse", httpx.post(f"{server.url}/v1/chat/completions", json=chat | {"top_k": 1}, timeout=60).json()),
        ("ErrorResponse", httpx.get(f"{server.url}/v1/nowhere", timeout=60).json()),
    ]
    found = {f"{schema} #{i}: {error}" for i, (schema, sample) in enumerate(samples) for error in spec_errors(schema, sample)}
    assert not found, sorted(found)
    assert len(samples) > 40


def test_the_async_openai_client_langchain_and_litellm_get_the_gated_answer(server, reference, monkeypatch):
    import asyncio

    expected = reference.decode(reference.generate(reference.encode_chat(MESSAGES), 24, "v2").tokens)
    assert len(expected) > 8

    async def async_client():
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)
        done = await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0)
        stream = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0, stream=True, stream_options={"include_usage": True}
        )
        chunks = [c async for c in stream]
        await client.close()
        return done, chunks

    done, chunks = asyncio.run(async_client())
    assert done.choices[0].message.content == expected
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].usage.completion_tokens == done.usage.completion_tokens

    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=f"{server.url}/v1", api_key="unused", model=MODEL, temperature=0, max_tokens=24, max_retries=0)
    turns = [("system", MESSAGES[0]["content"]), ("human", MESSAGES[1]["content"])]
    assert llm.invoke(turns).content == expected
    assert "".join(c.content for c in llm.stream(turns)) == expected
    routed = llm.bind_tools(TOOLS[:1], tool_choice="route").invoke([("human", TOOL_ASK[0]["content"])], max_tokens=40)
    assert [c["name"] for c in routed.tool_calls] == ["route"] and routed.tool_calls[0]["args"]["team"] in ("billing", "bugs")

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of the price list (no network in tests)
    import litellm

    answer = litellm.completion(
        model=f"openai/{MODEL}", api_base=f"{server.url}/v1", api_key="unused", messages=MESSAGES, max_tokens=24, temperature=0
    )
    assert answer.choices[0].message.content == expected
    pieces = litellm.completion(
        model=f"openai/{MODEL}", api_base=f"{server.url}/v1", api_key="unused", messages=MESSAGES, max_tokens=24, temperature=0, stream=True
    )
    assert "".join(p.choices[0].delta.content or "" for p in pieces if p.choices) == expected


def test_malformed_and_out_of_range_requests_are_answered_4xx_never_5xx(server):
    """What llama.cpp's and vLLM's suites send to break a server, and more: each a 4xx in the OpenAI error body."""
    chat = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4}
    text = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
    chats = [
        {"model": MODEL, "messages": None},
        {"model": MODEL, "messages": "string"},
        {"model": MODEL, "messages": []},
        {"model": MODEL, "messages": [123]},
        {"model": MODEL, "messages": [{}]},
        {"model": MODEL, "messages": [{"role": 123}]},
        {"model": MODEL, "messages": [{"role": "system", "content": 123}]},
        {"model": MODEL, "messages": [{"role": "my-custom-role", "content": "hi"}]},
        {"model": MODEL, "messages": [{"role": "user", "content": "hi", "extra_field": "0"}]},
        {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]},
        {"messages": MESSAGES},
        chat | {"model": None},
        chat | {"max_tokens": 0},
        chat | {"max_tokens": -1},
        chat | {"max_tokens": "many"},
        chat | {"max_completion_tokens": 10**12},
        chat | {"temperature": -0.1},
        chat | {"temperature": 2.5},
        chat | {"top_p": 1.5},
        chat | {"n": 0},
        chat | {"n": 129},
        chat | {"seed": "x"},
        chat | {"seed": 1.5},
        chat | {"stop": [""]},
        chat | {"stop": ["a", "b", "c", "d", "e"]},
        chat | {"presence_penalty": 3},
        chat | {"frequency_penalty": -2.5},
        chat | {"logit_bias": {"1": 101}},
        chat | {"logit_bias": {"-1": 1}},
        chat | {"logit_bias": {" the ": -100}},
        chat | {"logprobs": True, "top_logprobs": -1},
        chat | {"stream": "yes"},
        chat | {"stream": True, "stream_options": {"include_usage": "yes"}},
        chat | {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
        chat | {"response_format": {"type": "json_schema"}},
        chat | {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}},
        chat | {"response_format": {"type": "json_object", "schema": {}}},
        chat
        | {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": "a"}}}},
        chat | {"tools": [{"type": "function", "function": {"name": "bad name!"}}], "tool_choice": "required"},
        chat | {"tools": TOOLS[:1], "tool_choice": {"type": "function", "function": {"name": "nowhere"}}},
        chat | {"tools": TOOLS[:1] * 2, "tool_choice": "required"},
        chat | {"tools": TOOLS[:1], "tool_choice": "sometimes"},
        chat | {"tools": TOOLS[:1], "tool_choice": "required", "response_format": {"type": "json_object"}},
        chat | {"user": "u" * 300},
        # each was a 500 once: a schema's x-guidance that is not an object, a token id past Python's integer-string limit, a
        # content part's key OpenAI does not define
        chat | {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"x-guidance": "z"}}}},
        chat
        | {
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"x-guidance": 1}}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
        },
        chat | {"logit_bias": {"9" * 5000: 1}},
        chat | {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {}}]}]},
    ]
    texts = [
        text | {"prompt": None},
        text | {"prompt": []},
        text | {"prompt": [[]]},
        text | {"prompt": [1, "x"]},
        text | {"prompt": {"prompt_string": "hi"}},  # llama.cpp's JSON-object prompt
        text | {"prompt": [[1, 2], "hi"]},  # llama.cpp's mixed list
        text | {"prompt": [-1]},
        text | {"prompt": [10**9]},
        text | {"prompt": "x" * 5000},
        text | {"logprobs": 6},
        text | {"logprobs": -1},
        text | {"echo": "yes"},
        text | {"best_of": 0},
        text | {"n": 2, "best_of": 3},
        text | {"suffix": "end"},
        text | {"max_tokens": 10**6},
        text | {"stream": True, "logprobs": 30},
    ]
    sent = [("/v1/chat/completions", b) for b in chats] + [("/v1/completions", b) for b in texts]
    sent += [("/v1/chat/completions", b | {"stream": True}) for b in chats[:12]]
    for path, body in sent:
        r = httpx.post(f"{server.url}{path}", json=body, timeout=60)
        assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text[:300])
        assert r.headers["content-type"].startswith("application/json"), (body, r.headers["content-type"])  # refused before any stream
        assert set(r.json()["error"]) == {"message", "type", "param", "code"} and r.json()["error"]["message"], r.text
    assert len(sent) >= 70
    # the field that was too large is the one named
    r = httpx.post(f"{server.url}/v1/chat/completions", json=chat | {"max_tokens": None, "max_completion_tokens": 10**6}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_completion_tokens", r.text


def test_stream_chunks_keep_one_id_name_the_role_once_and_end_with_an_empty_delta(server, client):
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0)
    chunks = sse(server, "/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "max_tokens": 8, "temperature": 0})
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert not any("role" in c["choices"][0]["delta"] for c in chunks[1:])
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    # system_fingerprint names the bytes that answered (the headers' registered files and base build): the same on every
    # chunk and on the whole answer of that version
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=2, temperature=0)
    assert raw.parse().system_fingerprint == fingerprint(raw.headers[HASH_HEADER], raw.headers[ARTIFACT_HEADER])
    assert {c["system_fingerprint"] for c in chunks} == {whole.system_fingerprint} == {raw.parse().system_fingerprint}
    assert fingerprint(raw.headers[HASH_HEADER], "another build") != whole.system_fingerprint


def test_the_peers_edge_cases_of_the_openai_api(server, client, reference):
    ask = {"model": MODEL, "messages": MESSAGES, "temperature": 0}
    greedy = client.chat.completions.create(**ask, max_tokens=16).choices[0].message.content
    # No max_tokens: serving.default_max_tokens cut to what the context and the KV cache bound leave (was 413 here)
    assert client.chat.completions.create(**ask).choices[0].finish_reason in ("stop", "length")
    assert client.chat.completions.create(**ask, max_tokens=16, logprobs=False).choices[0].logprobs is None
    zero = client.chat.completions.create(**ask, max_tokens=8, logprobs=True, top_logprobs=0).choices[0].logprobs.content
    assert zero and all(e.top_logprobs == [] for e in zero)
    one = client.completions.create(model=MODEL, prompt="the app crashes", max_tokens=8, temperature=0, logprobs=0).choices[0]
    assert all(len(top) == 1 and set(top) == {tok} for top, tok in zip(one.logprobs.top_logprobs, one.logprobs.tokens))
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="hi", max_tokens=4, logprobs=6)
    assert e.value.body["param"] == "logprobs"
    # stream_options without include_usage: no usage anywhere
    assert all(c.usage is None and c.choices for c in client.chat.completions.create(**ask, max_tokens=8, stream=True, stream_options={}))
    # max_completion_tokens, content parts and response_format text answer as their plain forms do
    five = client.chat.completions.create(**ask, max_completion_tokens=5)
    assert five.usage.completion_tokens <= 5 and five.choices[0].message.content == greedy[: len(five.choices[0].message.content)]
    parts = [
        MESSAGES[0],
        {"role": "user", "content": [{"type": "text", "text": "i was charged twice "}, {"type": "text", "text": "for my invoice."}]},
    ]
    assert client.chat.completions.create(model=MODEL, messages=parts, temperature=0, max_tokens=16).choices[0].message.content == greedy
    assert client.chat.completions.create(**ask, max_tokens=16, response_format={"type": "text"}).choices[0].message.content == greedy
    # text completions: stream equals whole, stop sequences, lists of token-id prompts, and the prompt named by its field
    whole = client.completions.create(model=MODEL, prompt="the app crashes", max_tokens=24, temperature=0).choices[0].text
    streamed = list(client.completions.create(model=MODEL, prompt="the app crashes", max_tokens=24, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == whole and sum(1 for c in streamed if c.choices[0].finish_reason) == 1
    assert len(whole) > 6, whole
    stop = whole[4:7]
    cut = client.completions.create(model=MODEL, prompt="the app crashes", max_tokens=24, temperature=0, stop=stop).choices[0]
    assert (cut.text, cut.finish_reason) == (whole[: whole.index(stop)], "stop")
    ids = reference.encode("the app crashes")
    pair = client.completions.create(model=MODEL, prompt=[ids, ids], max_tokens=24, temperature=0)
    assert [c.text for c in pair.choices] == [whole, whole] and pair.usage.prompt_tokens == 2 * len(ids)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="the app crashes " * 40, max_tokens=4)
    assert (e.value.body["param"], e.value.body["code"]) == ("prompt", "context_length_exceeded")


def test_the_peers_checks_not_asserted_elsewhere(server, client, reference):
    """What llama.cpp's and vLLM's suites check that no test above asserted (the mapping in docs/api.md's peer section)."""
    ask = {"model": MODEL, "messages": MESSAGES, "temperature": 0}
    # seeds and choices sample differently (llama.cpp test_different_result_different_seed, vLLM's n and parallel tests)
    sampled = {
        client.chat.completions.create(**ask | {"temperature": 1.5}, max_tokens=24, seed=s).choices[0].message.content for s in range(4)
    }
    several = client.chat.completions.create(**ask | {"temperature": 1.5}, max_tokens=24, n=4, seed=11)
    assert len(sampled) > 1 and len({c.message.content for c in several.choices}) > 1
    # usage adds up, ids name their kind, and a chat stream names its finish once (vLLM test_single_chat_session,
    # llama.cpp test_chat_completion_stream)
    done = client.chat.completions.create(**ask, max_tokens=12)
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens and done.id.startswith("chatcmpl-")
    chunks = list(client.chat.completions.create(**ask, max_tokens=12, stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [done.choices[0].finish_reason]
    # a conversation that goes on after an assistant's text turn (vLLM test_single_chat_session's second request)
    turns = MESSAGES + [
        {"role": "assistant", "content": done.choices[0].message.content},
        {"role": "user", "content": "thanks, and the refund?"},
    ]
    more = client.chat.completions.create(model=MODEL, messages=turns, max_tokens=12, temperature=0)
    prompt = reference.encode_chat(turns)
    assert more.choices[0].message.content == reference.decode(reference.generate(prompt, 12, "v2").tokens)
    assert more.usage.prompt_tokens == len(prompt)
    # a streamed prompt beyond the bounds is refused before any stream (llama.cpp test_context_size_exceeded_stream)
    r = httpx.post(
        f"{server.url}/v1/chat/completions", json=ask | {"stream": True, "messages": [{"role": "user", "content": "hi " * 300}]}, timeout=60
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    # a streamed top_logprobs beyond 20 is refused (vLLM test_too_many_chat_logprobs)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(**ask, max_tokens=4, logprobs=True, top_logprobs=21, stream=True)
    # text completions: length, exact usage, no logprobs unless asked, the fingerprint, logit_bias, several stops, a
    # streamed stop, and stream_options only with stream (vLLM test_single_completion and test_no_logprobs, llama.cpp
    # test_completion_with_openai_library, test_logit_bias and test_completion_stream_with_openai_library_stops)
    text = {"model": MODEL, "prompt": "the app crashes", "temperature": 0}
    long = client.completions.create(**text, max_tokens=64)
    assert len(long.choices[0].text) > 9, long
    four = client.completions.create(**text, max_tokens=4)
    assert (four.choices[0].finish_reason, four.usage.completion_tokens) == ("length", 4) and four.id.startswith("cmpl-")
    assert four.usage.total_tokens == four.usage.prompt_tokens + 4 and four.choices[0].logprobs is None
    assert four.system_fingerprint == done.system_fingerprint
    ids = reference.encode(text["prompt"])
    plain = reference.generate(ids, 8, "v2").tokens
    biased = client.completions.create(**text, max_tokens=8, logit_bias={str(plain[0]): -100}, logprobs=1)
    assert biased.choices[0].logprobs.tokens[0] != reference.token_text(plain[0])
    whole = long.choices[0].text
    stops = [whole[6:9], whole[3:5]]
    cut = client.completions.create(**text, max_tokens=64, stop=stops).choices[0]
    assert (cut.text, cut.finish_reason) == (whole[: min(whole.index(s) for s in stops)], "stop")
    streamed = list(client.completions.create(**text, max_tokens=64, stop=stops, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**text, max_tokens=4, stream_options={"include_usage": True})
    assert e.value.body["param"] == "stream_options"
    quiet = list(client.completions.create(**text, max_tokens=4, stream=True, stream_options={"include_usage": False}))
    assert all(c.usage is None and c.choices for c in quiet)
    # several choices of a text completion, whole and streamed (vLLM test_parallel_no_streaming, test_parallel_streaming)
    pair = client.completions.create(**text | {"temperature": 1.0}, max_tokens=8, n=2, seed=3)
    assert [c.index for c in pair.choices] == [0, 1] and all(c.finish_reason in ("stop", "length") for c in pair.choices)
    streamed = list(client.completions.create(**text | {"temperature": 1.0}, max_tokens=8, n=2, seed=3, stream=True))
    for i, choice in enumerate(pair.choices):
        mine = [c.choices[0] for c in streamed if c.choices and c.choices[0].index == i]
        assert "".join(c.text for c in mine) == choice.text and [c.finish_reason for c in mine if c.finish_reason] == [choice.finish_reason]
