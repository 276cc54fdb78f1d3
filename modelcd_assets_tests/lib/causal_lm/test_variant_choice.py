"""The weight variant choice: the fastest variant within the fidelity limits, judged fastest first; a failing variant is
never chosen, whatever its speed, and with none within the limits none is."""

import pytest

from modelcd_assets.lib.causal_lm.build import MODEL_FILE, make_variant
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.variant_choice import Judged, choose_variant, generation_speeds
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import folder_hash

SPEEDS = {"int8": 100.0, "int4-rtn": 130.0, "int4-kquant-mixed": 115.0, "int4-hqq-mixed": 12.0}


def judge_by(passing: set[str], asked: list[str]):
    def judge(name: str) -> Judged:
        asked.append(name)
        return Judged(name in passing, f"{name} {'within' if name in passing else 'outside'}", {"mean_kl": 0.0})

    return judge


@pytest.mark.parametrize(
    "passing, chosen, judged",
    [
        ({"int8", "int4-hqq-mixed"}, "int8", ["int4-rtn", "int4-kquant-mixed", "int8"]),  # faster ones failed: the next within
        ({"int4-kquant-mixed", "int8"}, "int4-kquant-mixed", ["int4-rtn", "int4-kquant-mixed"]),
        ({"int4-rtn"}, "int4-rtn", ["int4-rtn"]),  # the fastest passes: no other is judged
        ({"int4-hqq-mixed"}, "int4-hqq-mixed", ["int4-rtn", "int4-kquant-mixed", "int8", "int4-hqq-mixed"]),
    ],
)
def test_the_fastest_variant_within_the_limits_is_chosen_and_no_failing_one_ever_is(passing, chosen, judged):
    asked: list[str] = []
    choice = choose_variant(SPEEDS, judge_by(passing, asked))
    assert choice.chosen == chosen and asked == judged and list(choice.judged) == judged
    assert all(not choice.judged[n].passed for n in judged[:-1])
    record = choice.to_dict()
    assert record["not_judged"] == [n for n in SPEEDS if n not in judged]
    assert record["why"].startswith(f"{chosen}: the fastest variant")
    assert all(f"{n} ({SPEEDS[n]:.1f} tokens/s) failed: {n} outside" in record["why"] for n in judged[:-1])


def test_with_no_variant_within_the_limits_none_is_chosen_and_every_failure_is_named():
    asked: list[str] = []
    choice = choose_variant(SPEEDS, judge_by(set(), asked))
    assert choice.chosen is None and sorted(asked) == sorted(SPEEDS)
    assert choice.why.startswith("no weight variant is within the fidelity limits")
    assert all(f"{n}: {n} outside" in choice.why for n in SPEEDS)


def test_variants_are_timed_on_the_same_prompts_and_a_variant_is_made_once_and_recorded(tiny_lm):
    folder = make_variant(tiny_lm.build, "int4-rtn")
    assert folder == tiny_lm.build.weights("int4-rtn") and (folder / MODEL_FILE).is_file()
    assert tiny_lm.build.recorded_sha256("int4-rtn") == folder_hash(folder)
    made_at = (folder / MODEL_FILE).stat().st_mtime_ns
    assert make_variant(tiny_lm.build, "int4-rtn") == folder and (folder / MODEL_FILE).stat().st_mtime_ns == made_at
    assert tiny_lm.build.recorded_sha256("int8") == tiny_lm.build.recorded_int8_sha256 == folder_hash(tiny_lm.build.int8)
    decoders = {"int8": Decoder(tiny_lm.build.int8, threads=1), "int4-rtn": Decoder(folder, threads=1)}
    prompts = [decoders["int8"].encode_chat([{"role": "user", "content": "my invoice is wrong"}])]
    speeds = generation_speeds(decoders, prompts, 4, None)
    assert set(speeds) == set(decoders) and all(s > 0 for s in speeds.values())
    with pytest.raises(ModelcdError, match="no weight variant is named 'int3'"):
        make_variant(tiny_lm.build, "int3")
