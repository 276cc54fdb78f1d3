"""Decoding in ONNX Runtime GenAI: the gates' token ids are the trainer's, generation stops at EOS, lengths are bounded."""

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


def test_a_sequence_beyond_the_context_is_refused(tiny_lm):
    decoder = Decoder(tiny_lm.build.int8)
    with pytest.raises(ValueError, match="the context"):
        decoder.logits([5] * (decoder.context_length + 1))


def test_a_template_that_never_ends_the_turn_is_reported():
    def no_eos(messages, add_generation_prompt):
        return [1, 2, 3] + ([4, 5] if not add_generation_prompt else [])

    with pytest.raises(BadCandidate, match="never stop"):
        chat_ids(no_eos, Chat("", "hi", "hello"), [9])


def test_a_folder_that_is_no_genai_model_is_refused(tmp_path):
    with pytest.raises(BadCandidate, match="genai_config.json"):
        Decoder(tmp_path)
