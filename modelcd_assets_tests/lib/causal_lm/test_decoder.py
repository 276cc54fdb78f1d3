"""Decoding in ONNX Runtime GenAI: the gates' token ids are the trainer's, generation stops at EOS, lengths are bounded."""

import numpy as np
import pytest

from modelcd_assets.lib.causal_lm.chats import Chat, chat_ids
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.training import hf_encoder
from modelcd_assets.lib.demo.replies import chats
from modelcd_assets.lib.errors import BadCandidate


def test_genai_and_transformers_render_the_same_ids(tiny_lm):
    from transformers import AutoTokenizer

    decoder, tokenizer = Decoder(tiny_lm.build.int8), AutoTokenizer.from_pretrained(str(tiny_lm.base))
    for chat in chats(5, 9):
        assert chat_ids(decoder.encode_chat, chat, decoder.eos_ids) == chat_ids(hf_encoder(tokenizer), chat, [tokenizer.eos_token_id])


def test_the_pretrained_tiny_base_answers_and_stops(tiny_lm):
    decoder = Decoder(tiny_lm.build.int8)
    runs = [decoder.generate(decoder.encode_chat(c.messages()), 80) for c in chats(8, 11)]
    assert sum(g.stopped_at_eos for g in runs) >= 6 and all(g.finite for g in runs)
    assert all(decoder.eos_ids[0] not in g.tokens for g in runs)
    cut = decoder.generate(decoder.encode_chat(chats(1, 11)[0].messages()), 3)
    assert len(cut.tokens) == 3 and not cut.stopped_at_eos


def test_a_generated_token_comes_with_the_logits_it_was_chosen_from(tiny_lm):
    """Greedy search picks the argmax of the logits it reports for a token, and the first token's are the prompt's
    prefill's last row. Read after generate_next_token(), they were the next token's (the argmax was another token)."""
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file

    path = write_adapter_file(adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())[0], tiny_lm.root / "steps-test.onnx_adapter")
    decoder = Decoder(tiny_lm.build.int8)
    decoder.load_adapter(path, "a")
    for chat in chats(4, 14):
        ids = decoder.encode_chat(chat.messages())
        generator = decoder._generator(len(ids) + 12, "a")
        generator.append_tokens(np.asarray(ids, np.int32))
        steps = list(decoder._steps(generator, 12))
        assert len(steps) > 1 and all(int(np.argmax(logits)) == token for token, logits in steps)
        run = decoder.generate(ids, 12, "a")
        assert np.abs(run.first_logits - decoder.logits(ids, "a")[-1]).max() <= 1e-4
        assert int(np.argmax(run.first_logits)) == (run.tokens[0] if run.tokens else decoder.eos_ids[0])


def test_replies_scored_after_a_shared_prefix_have_the_logits_of_one_prefill_each(tiny_lm):
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file

    path = write_adapter_file(adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())[0], tiny_lm.root / "decoder-test.onnx_adapter")
    for folder in (tiny_lm.build.int8, tiny_lm.build.fp32):
        decoder = Decoder(folder)
        decoder.load_adapter(path, "a")
        with_system = [chat_ids(decoder.encode_chat, c, decoder.eos_ids) for c in chats(6, 12)]
        no_shared_prefix = [chat_ids(decoder.encode_chat, Chat("", c.user, c.reply), decoder.eos_ids) for c in chats(3, 13)] + with_system[
            :1
        ]
        for sequences in (with_system, no_shared_prefix):
            for adapter in ("a", None):
                scored = list(decoder.reply_logits(sequences, adapter))
                assert len(scored) == len(sequences)
                for got, (ids, start) in zip(scored, sequences):
                    full = decoder.logits(ids, adapter)[start - 1 : len(ids) - 1]
                    assert got.shape == full.shape and np.abs(got - full).max() <= 1e-5


def test_a_sequence_beyond_the_context_is_refused(tiny_lm):
    decoder = Decoder(tiny_lm.build.int8)
    with pytest.raises(ValueError, match="the context"):
        decoder.logits([5] * (decoder.context_length + 1))
    with pytest.raises(ValueError, match="the context"):
        list(decoder.reply_logits([([5] * (decoder.context_length + 1), 3)]))


def test_a_template_that_never_ends_the_turn_is_reported():
    def no_eos(messages, add_generation_prompt):
        return [1, 2, 3] + ([4, 5] if not add_generation_prompt else [])

    with pytest.raises(BadCandidate, match="never stop"):
        chat_ids(no_eos, Chat("", "hi", "hello"), [9])


def test_a_folder_that_is_no_genai_model_is_refused(tmp_path):
    with pytest.raises(BadCandidate, match="genai_config.json"):
        Decoder(tmp_path)


def test_the_logits_and_greedy_tokens_are_the_same_bits_on_one_thread_and_on_every_core(tiny_lm):
    """A decoder runs every core this process may use (GenAI's own default ran one here); what it computes must not depend
    on it, because a candidate's scores are paired with production's kept ones, computed in another process."""
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
    from modelcd_assets.lib.causal_lm.decoder import cores

    path = write_adapter_file(adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())[0], tiny_lm.root / "threads-test.onnx_adapter")
    assert Decoder(tiny_lm.build.int8).threads == cores() >= 1
    runs = {}
    for threads in (1, 2):
        decoder = Decoder(tiny_lm.build.int8, threads=threads)
        assert decoder.threads == threads
        decoder.load_adapter(path, "a")
        sequences = [chat_ids(decoder.encode_chat, c, decoder.eos_ids) for c in chats(4, 15)]
        runs[threads] = (
            list(decoder.reply_logits(sequences, "a")),
            [decoder.generate(ids[:start], 16, "a").tokens for ids, start in sequences],
        )
    (logits_1, tokens_1), (logits_2, tokens_2) = runs[1], runs[2]
    assert tokens_1 == tokens_2
    assert all(np.array_equal(a, b) for a, b in zip(logits_1, logits_2))


def test_the_batched_session_runs_its_threads_as_the_genai_decoder_does(tiny_lm):
    """Both causal-LM sessions take their spin from SPIN_OPTIONS: a short spin, stopped after each step."""
    from modelcd_assets.lib.causal_lm.batched import BatchedSession
    from modelcd_assets.lib.causal_lm.decoder import SPIN_OPTIONS, SPIN_US

    options = BatchedSession(tiny_lm.build.int8, threads=2).session.get_session_options()
    assert options.intra_op_num_threads == 2
    entries = {k: options.get_session_config_entry(k) for k in SPIN_OPTIONS}
    assert entries == {
        "session.intra_op.allow_spinning": "1",
        "session.intra_op.spin_duration_us": str(SPIN_US),
        "session.force_spinning_stop": "1",
        "session.inter_op.allow_spinning": "0",
    }
    assert 0 < SPIN_US <= 100  # ONNX Runtime's default spin took a busy machine's core from the other sessions


def test_a_seed_of_any_integer_runs_as_a_genai_seed_of_its_own():
    from modelcd_assets.lib.causal_lm.decoder import genai_seed

    assert [genai_seed(s) for s in (0, 7, 2**31 - 1)] == [0, 7, 2**31 - 1]  # GenAI's own range: unchanged
    outside = [-1, -(2**63), 2**31, 2**63 - 1, 2**64 + 5]
    mapped = [genai_seed(s) for s in outside]
    assert all(0 <= m < 2**31 for m in mapped) and len(set(mapped)) == len(outside), mapped
    assert mapped == [genai_seed(s) for s in outside]  # the same seed, the same GenAI seed
