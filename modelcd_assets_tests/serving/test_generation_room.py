"""A shadow copy is a background generation: it takes no caller's place among serving.max_generations, generates a token
only while fewer callers' generations than serving.shadow_below_generations run, and is stopped with Yielded once it has
waited serving.shadow_max_wait_s in all. The decoder here is a stand-in whose tokens come when the test lets them, so
that who generated what, and when, is decided by the test and not by a clock."""

import asyncio
import contextlib
import threading

import pytest

from modelcd_assets.lib.causal_lm.decoder import Chosen, Sampling
from modelcd_assets.lib.judging.policy import ServingPolicy
from modelcd_assets.serving.lm.generation import Generations, Yielded
from modelcd_assets.serving.metrics import LmServerMetrics
from modelcd_assets.serving.rejections import Rejected

GREEDY = Sampling(0.0, 1.0, None, 0)
DEADLINE = 60.0  # seconds a step of the test may wait before it is reported stuck


class _Text:
    def decode(self, token: int) -> str:
        return f" {token}"


class GatedDecoder:
    """Each generation's tokens are released one by one by the test (release()); `made` lists who generated each token."""

    context_length, kv_bytes_per_token, vocab_size = 64, 16, 64

    def __init__(self):
        self.made: list[str] = []
        self._gates: dict[str, threading.Semaphore] = {}

    def gate(self, who: str) -> threading.Semaphore:
        return self._gates.setdefault(who, threading.Semaphore(0))

    def text_stream(self) -> _Text:
        return _Text()

    def stream(self, prompt, max_new_tokens, adapter, sampling):
        who = adapter
        for i in range(max_new_tokens):
            if not self.gate(who).acquire(timeout=DEADLINE):
                raise AssertionError(f"{who}'s token {i} was never released")
            self.made.append(who)
            yield Chosen(i)


class Served:
    """A served version as the generations and the handler read it; `who` names its adapter (and its decoder's gate)."""

    def __init__(self, decoder: GatedDecoder, who: str, version: str = "1"):
        self.decoder, self.adapter = decoder, who
        self.model, self.version, self.adapter_label = "m", version, f"adapter-{version}"
        self.content_hash = self.artifact_sha256 = f"sha-{version}"

    @contextlib.contextmanager
    def held(self):
        yield


def _generations(**serving) -> Generations:
    """Generations whose callers decode alone, as shadow copies do, on the gated decoder (serving.max_batch 1: no batches)."""
    return Generations("m", ServingPolicy(**({"max_batch": 1} | serving)), LmServerMetrics(node_usd_per_hour=1.0))


async def _read(stream) -> list[int]:
    return [chosen.token async for chosen, _ in stream]


async def _ended(gens: Generations, left: tuple[int, int, int] = (0, 0, 0)) -> None:
    """The generations given back, their caches with them, but `left` (running, callers' among them, KV bytes), within
    DEADLINE seconds."""
    loop = asyncio.get_running_loop()
    until = loop.time() + DEADLINE
    while (gens.running, gens.callers, gens.kv_bytes) != left:
        assert loop.time() < until, f"{(gens.running, gens.callers, gens.kv_bytes)} still held, not {left}"
        await asyncio.sleep(0.01)


def test_a_shadow_copy_generates_only_while_there_is_room_beside_the_callers():
    async def scenario():
        gens, decoder = _generations(shadow_below_generations=1, shadow_max_wait_s=DEADLINE), GatedDecoder()
        caller = gens.admit(3, 2, decoder.context_length, decoder.kv_bytes_per_token)
        copy = gens.admit(3, 2, decoder.context_length, decoder.kv_bytes_per_token, background=True)
        assert (gens.running, gens.callers) == (2, 1)
        caller_tokens = asyncio.ensure_future(_read(gens.tokens(Served(decoder, "caller"), [1, 2, 3], caller, GREEDY)))
        copy_tokens = asyncio.ensure_future(_read(gens.tokens(Served(decoder, "copy"), [1, 2, 3], copy, GREEDY)))
        decoder.gate("copy").release(2)  # the copy may generate both its tokens, once there is room
        await asyncio.sleep(0.3)
        assert decoder.made == []  # a caller's generation runs: the copy waits, even for its first token (its prefill)
        decoder.gate("caller").release(2)
        assert await asyncio.wait_for(caller_tokens, DEADLINE) == [0, 1]
        assert await asyncio.wait_for(copy_tokens, DEADLINE) == [0, 1]
        assert decoder.made == ["caller", "caller", "copy", "copy"]
        await _ended(gens)  # given back by each generation's thread once its last token is handed over
        gens.close()

    asyncio.run(scenario())


def test_a_shadow_copy_that_waits_too_long_is_stopped_and_frees_what_it_held():
    async def scenario():
        gens, decoder = _generations(shadow_below_generations=1, shadow_max_wait_s=0.2), GatedDecoder()
        caller = gens.admit(3, 1, decoder.context_length, decoder.kv_bytes_per_token)
        copy = gens.admit(3, 4, decoder.context_length, decoder.kv_bytes_per_token, background=True)
        caller_tokens = asyncio.ensure_future(_read(gens.tokens(Served(decoder, "caller"), [1, 2, 3], caller, GREEDY)))
        decoder.gate("copy").release(4)
        with pytest.raises(Yielded, match=r"waited 0.2 s in all for fewer than 1 callers' generations"):
            await asyncio.wait_for(_read(gens.tokens(Served(decoder, "copy"), [1, 2, 3], copy, GREEDY)), DEADLINE)
        assert decoder.made == []
        await _ended(gens, (1, 1, caller.kv_bytes))  # the copy gave back what it held; the caller's generation runs on
        decoder.gate("caller").release(1)
        assert await asyncio.wait_for(caller_tokens, DEADLINE) == [0]
        await _ended(gens)
        gens.close()

    asyncio.run(scenario())


def test_a_shadow_copy_takes_no_callers_place_among_max_generations():
    gens, decoder = _generations(max_generations=1), GatedDecoder()
    gens.admit(3, 1, decoder.context_length, decoder.kv_bytes_per_token)
    gens.admit(3, 1, decoder.context_length, decoder.kv_bytes_per_token, background=True)  # beside it, bounded by the shadow lane
    with pytest.raises(Rejected) as refused:
        gens.admit(3, 1, decoder.context_length, decoder.kv_bytes_per_token)
    assert refused.value.status == 429 and "1 generations are running" in str(refused.value), refused.value
    gens.close()


def test_without_a_setting_a_copy_has_room_below_the_cores_the_server_may_use():
    from modelcd_assets.lib.causal_lm.decoder import cores

    assert _generations().background_below == cores()
    assert _generations(shadow_below_generations=3).background_below == 3
    with pytest.raises(ValueError, match="shadow_below_generations"):
        ServingPolicy(shadow_below_generations=0)


def test_a_copy_stopped_for_want_of_room_is_dropped_and_no_request_of_its_version():
    from types import SimpleNamespace

    from modelcd_assets.serving.lm.handler import CompletionAccount, CompletionHandler
    from modelcd_assets.serving.lm.openai_api import CompletionRequest

    async def scenario():
        gens, decoder = _generations(shadow_below_generations=1, shadow_max_wait_s=0.2), GatedDecoder()
        metrics = gens.metrics
        handler = CompletionHandler(SimpleNamespace(model="m"), metrics, gens, None, None, None, None, None)
        production, candidate = Served(decoder, "production", "2"), Served(decoder, "candidate", "3")
        body = CompletionRequest(model="m", prompt="where is my parcel", max_tokens=2, temperature=0)
        account = CompletionAccount(metrics, "m")
        account.admit(production)
        answered = SimpleNamespace(body=body, prompt=[1, 2, 3], chat=False, account=account, served=production)
        # A caller's generation runs and holds its tokens back: the copy finds no room.
        held = gens.admit(3, 1, decoder.context_length, decoder.kv_bytes_per_token)
        caller = asyncio.ensure_future(_read(gens.tokens(production, [1, 2, 3], held, GREEDY)))
        decoder.gate("candidate").release(2)
        assert await asyncio.wait_for(handler._shadow(candidate, answered), DEADLINE) is None
        assert decoder.made == []
        text = metrics.registry.get_sample_value
        assert text("modelcd_shadow_dropped_total", {"model": "m"}) == 1
        labels = {"model": "m", "version": "3", "adapter": "adapter-3"}
        for series in ("modelcd_requests_total", "modelcd_llm_prompt_tokens_total", "modelcd_llm_time_to_first_token_seconds_count"):
            assert not text(series, labels), series  # counted as no request of the candidate
        decoder.gate("production").release(1)
        assert await asyncio.wait_for(caller, DEADLINE) == [0]
        await _ended(gens)
        gens.close()

    asyncio.run(scenario())
