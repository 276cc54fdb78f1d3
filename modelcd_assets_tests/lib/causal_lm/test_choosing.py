"""How a served token is chosen from the logits the model computed (decoder.Sampling): logprobs from the very logits the
gates judge, logit bias and penalties written over them before the choice, and llguidance's constraints; plain greedy
search stays the gated decoding, bit for bit."""

import json

import jsonschema
import numpy as np
import pytest

from modelcd_assets.lib.causal_lm.decoder import Decoder, Sampling, log_probabilities
from modelcd_assets.lib.demo.replies import chats


@pytest.fixture(scope="module")
def decoder(tiny_lm) -> Decoder:
    return Decoder(tiny_lm.build.int8)


@pytest.fixture(scope="module")
def prompts(decoder) -> list[list[int]]:
    return [decoder.encode_chat(c.messages()) for c in chats(3, 21)]


def tokens(decoder, prompt, n, sampling=Sampling()) -> list[int]:
    return [c.token for c in decoder.stream(prompt, n, None, sampling)]


def test_plain_greedy_streaming_is_the_gated_greedy_generation(decoder, prompts):
    for prompt in prompts:
        assert tokens(decoder, prompt, 24) == decoder.generate(prompt, 24).tokens


def test_logprobs_come_from_the_logits_the_probe_checks_and_change_no_token(decoder, prompts):
    for prompt in prompts:
        steps = list(decoder.stream(prompt, 24, None, Sampling(top_logprobs=5)))
        run = decoder.generate(prompt, 24)
        assert [c.token for c in steps] == run.tokens
        first = log_probabilities(run.first_logits)  # the first token's logits, which gating records for the probe
        assert steps[0].logprob == pytest.approx(first[steps[0].token], abs=1e-9)
        assert [t for t, _ in steps[0].top] == list(np.argsort(-first, kind="stable")[:5])
        for c in steps:  # greedy: the chosen token is the most likely one, and the top list is sorted
            assert c.top[0] == (c.token, c.logprob) and [lp for _, lp in c.top] == sorted((lp for _, lp in c.top), reverse=True)
            assert c.logprob <= 0
    assert list(decoder.stream(prompts[0], 3, None, Sampling(top_logprobs=0)))[0].top == ()


def test_logit_bias_moves_the_choice_and_a_bias_of_nothing_does_not(decoder, prompts):
    prompt = prompts[0]
    plain = tokens(decoder, prompt, 12)
    assert tokens(decoder, prompt, 6, Sampling(logit_bias=((7, 100.0),))) == [7] * 6
    banned = tokens(decoder, prompt, 12, Sampling(logit_bias=((plain[0], -100.0),)))
    assert banned[0] != plain[0] and plain[0] not in banned
    # the logprobs are still the model's own: the banned token keeps its probability
    step = next(decoder.stream(prompt, 1, None, Sampling(logit_bias=((plain[0], -100.0),), top_logprobs=1)))
    assert step.top[0][0] == plain[0] and step.token != plain[0]


def test_penalties_count_the_tokens_made_so_far(decoder, prompts):
    for prompt in prompts:
        plain = tokens(decoder, prompt, 40)
        assert len(set(plain)) < len(plain), "the tiny model repeats a token within 40"
        once = tokens(decoder, prompt, 40, Sampling(presence_penalty=1000.0))
        assert len(set(once)) == len(once) and once[0] == plain[0]
        assert tokens(decoder, prompt, 40, Sampling(frequency_penalty=1000.0)) == once  # a count of one is a presence
    s = Sampling(presence_penalty=0.5, frequency_penalty=0.25, logit_bias=((1, 2.0),))
    moved = s.moved(np.zeros((1, 1, 4), np.float32), {3: 2, 1: 1})
    assert moved.shape == (1, 1, 4) and moved.reshape(-1).tolist() == [0.0, 2.0 - 0.75, 0.0, -1.0]


def test_guidance_constrains_the_answer_to_the_grammar(decoder, prompts):
    schema = {
        "type": "object",
        "properties": {"team": {"enum": ["billing", "bugs"]}, "urgent": {"type": "boolean"}},
        "required": ["team", "urgent"],
        "additionalProperties": False,
    }
    guided = Sampling(guidance=("json_schema", json.dumps(schema | {"x-guidance": {"whitespace_flexible": False}})))
    for prompt in prompts:
        answer = json.loads(decoder.decode(tokens(decoder, prompt, 40, guided)))
        jsonschema.validate(answer, schema)
        assert decoder.decode(tokens(decoder, prompt, 8, Sampling(guidance=("regex", "(yes|no)")))) in ("yes", "no")
    sampled = Sampling(temperature=1.5, seed=3, guidance=("regex", "[0-9]{3}"))
    assert len(decoder.decode(tokens(decoder, prompts[0], 8, sampled))) == 3


def test_a_grammar_llguidance_cannot_take_is_refused_before_any_run(decoder):
    decoder.check_guidance("json_schema", json.dumps({"type": "object"}))
    for kind, grammar in (("json_schema", "{not json"), ("json_schema", '{"type": "nonsense"}'), ("regex", "((")):
        with pytest.raises(ValueError, match="grammar"):
            decoder.check_guidance(kind, grammar)
