"""The causal LM's fault suite: the faults derived from a causal LM's production adapter (`modelcd faults run --task
causal-lm`), and its clean controls. lib/tasks/builtin.py declares it as the causal-lm task's."""

from __future__ import annotations

from modelcd_assets.faults import builders as b
from modelcd_assets.faults import live_faults as live
from modelcd_assets.faults import llm_builders as lm
from modelcd_assets.faults.catalog import Control, FaultClass, FaultSuite, unlike_the_base
from modelcd_assets.faults.controls import base_files_control, identical_controls, retrained_controls
from modelcd_assets.faults.outcomes import BAD_INPUT, BLOCKED, ROLLOUT_STOPPED, Outcome, blocked
from modelcd_assets.faults.sandbox import Sandbox
from modelcd_assets.lib.judging.policy import policy_for
from modelcd_assets.lib.splits import split_path
from modelcd_assets.serving.loadgen import CHAT


def _lm(name: str, group: str, expected: Outcome, build=None, **kw) -> FaultClass:
    return FaultClass(name, group, expected, build, adapter_only=True, **kw)


CLASSES: tuple[FaultClass, ...] = (
    _lm("lm_nan_in_lora_b", "weights", blocked("weights_are_finite"), lm.nan_in_lora_b),
    # Fifty times the update: 50x production's LoRA B norm is out of the weight-scale gate's 10x, before perplexity sees it.
    _lm("lm_lora_b_x50", "weights", blocked("weights_within_scale", "perplexity_within_tolerance"), lm.lora_b_overdriven),
    # On SmolLM2 its INT8 build already drifts from its FP32 twin (int8_agrees_with_fp32 runs before evaluation, so the
    # perplexity gate is never reached); on the tiny test model perplexity or drift blocks it.
    _lm(
        "lm_same_reply_for_everything",
        "weights",
        blocked("perplexity_within_tolerance", "no_drift_detected", "int8_agrees_with_fp32"),
        lm.same_reply,
    ),
    # An adapter cannot change the work per token of its base's graph (the build's LoRA slots fix the rank and targets; one
    # that asks for more is refused by adapter_fits_base: lm_other_rank, lm_other_targets), so there is no slower adapter to
    # time. What its values can do is put the CPU on a slow path on the same graph: the scan of its served values finds them.
    _lm(
        "lm_subnormal_lora",
        "weights",
        Outcome(BLOCKED, "throughput_within_tolerance", detail="served values are subnormal"),
        lm.subnormal_lora,
    ),
    # Every adapter of a base is served with the base build's tokenizer, template, EOS and config: a file of these beside the
    # adapter's weights is refused at register unless it says what the base's copy says (lib/tasks/adapter_files.py).
    _lm("lm_added_special_token", "contract", unlike_the_base("tokenizer.json"), lm.added_special_token),
    _lm("lm_chat_template_as_patch", "contract", unlike_the_base("chat_template.jinja"), lm.chat_template_as_patch),
    _lm("lm_eos_changed", "contract", unlike_the_base("generation_config.json"), lm.eos_changed),
    _lm("lm_added_tokens_file", "contract", unlike_the_base("added_tokens.json"), lm.added_tokens_file),
    _lm("lm_special_tokens_map_eos", "contract", unlike_the_base("special_tokens_map.json"), lm.special_tokens_map_eos),
    _lm("lm_tokenizer_config_eos", "contract", unlike_the_base("tokenizer_config.json"), lm.tokenizer_config_eos),
    _lm("lm_tokenizer_config_chat_template", "contract", unlike_the_base("tokenizer_config.json"), lm.tokenizer_config_chat_template),
    _lm("lm_vocab_json_edited", "contract", unlike_the_base("vocab.json"), lm.vocab_json_edited),
    _lm("lm_merges_txt_edited", "contract", unlike_the_base("merges.txt"), lm.merges_txt_edited),
    _lm("lm_config_json_changed", "contract", unlike_the_base("config.json"), lm.config_json_changed),
    _lm("lm_adapter_of_another_base", "contract", blocked("adapter_fits_base"), lm.adapter_of_another_base),
    _lm("lm_other_rank", "contract", blocked("adapter_fits_base"), lm.other_rank),
    _lm("lm_other_targets", "contract", blocked("adapter_fits_base"), lm.other_targets),
    _lm(
        "lm_prompt_beyond_context",
        "data",
        Outcome(BAD_INPUT, detail="does not fit the model's context"),
        b.identical,
        during=lm.golden_prompt_beyond_context,
    ),
    # Live-only: every offline gate passes (byte-identical copies), and only the rollout's steps on live traffic can stop
    # them (faults/live_faults.py): answers that never end their turn (each runs to max_tokens), and 5% failing. The first
    # fails eos_kept at a shadow step that judges it (no copy ends its turn where production's did), and length_ratio too
    # where production's answers are well under max_tokens; on the tiny test model, whose answers run near its
    # max_new_tokens, eos_kept alone: a marginal score, paused. The demo's shadow step judges length_ratio and not eos_kept:
    # make bench-rollout saw SmolLM2's copy aborted there on length_ratio alone (+2: four times as long). At a canary step
    # eos_share fails it. The second fails error_rate, critical, where its excess is significant and beyond the limit;
    # where it is not (a few dozen answers an arm, or 5% seen under a limit of 4 points), the bound of its increase is not
    # within the limit either, so a canary step gathers samples up to its max_for and pauses (make bench-rollout saw it
    # promoted, at cb88277, when no significant excess was a pass).
    FaultClass(
        "lm_answers_run_to_max_tokens",
        "live",
        Outcome(ROLLOUT_STOPPED, detail="eos_kept low", reasons=("length_ratio high",)),
        probe=live.answers_run_to_max_tokens,
        live=True,
    ),
    FaultClass(
        "lm_errors_on_live_requests",
        "live",
        Outcome(ROLLOUT_STOPPED, detail="error_rate high", reasons=("error_rate nodata",)),
        probe=live.errors_on_live_requests,
        live=True,
    ),
)


def lm_controls(sb: Sandbox, identical_n: int, retrained_n: int, notes: list[str]) -> list[Control]:
    """A causal LM's clean controls: byte-identical copies, LoRA B x 1.001, the base's files copied, production's weights saved as
    bfloat16 and as float16, and adapters retrained from production's base with the demo's good recipe and other seeds."""
    from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
    from modelcd_assets.lib.causal_lm.training import train_lm_adapter
    from modelcd_assets.lib.demo.recipes import GOOD_LM

    chats = read_chats(split_path(sb.data, chat_split("train"))) if retrained_n else []
    return [
        *identical_controls(sb, identical_n),
        ("lora-b-x1.001", "LoRA B x 1.001", lm.lora_b_noise(sb.prod, sb.work / "lora-b-x1.001").folder),
        *base_files_control(sb),
        *(
            (label, f"production's weights saved as {dtype}", lm.saved_as(dtype)(sb.prod, sb.work / label).folder)
            for label, dtype in (("bf16", "bfloat16"), ("fp16", "float16"))
        ),
        *retrained_controls(sb, retrained_n, train_lm_adapter, chats, GOOD_LM),
    ]


def _live_load(sb: Sandbox, split: str) -> tuple[str, list]:
    """Greedy chat completions of the split's tickets, each allowed the policy's generation.max_new_tokens: as long as the
    gates let production's answers run, so that an answer that does not end its turn shows."""
    from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats

    limit = policy_for(sb.policy_path.parent, sb.name).generation.max_new_tokens
    messages = [
        [{"role": "system", "content": c.system}, {"role": "user", "content": c.user}]
        for c in read_chats(split_path(sb.data, chat_split(split)))
    ]
    return CHAT, [{"model": sb.name, "max_tokens": limit, "temperature": 0, "messages": m} for m in messages]


LM_FAULTS = FaultSuite(
    CLASSES,
    lm_controls,
    no_load=(
        "the controls were gated without a server under load beside them (serving_under_load asks POST /v1/classify); the "
        "live classes and the rolled-out controls were served to callers of the OpenAI API"
    ),
    live_load=_live_load,
    # One at a time, as the demo's callers: a shadow copy generates only while fewer callers' generations than the cores run
    # (serving.shadow_below_generations), so 2 callers on 2 cores leave a shadow step no room for its pairs.
    live_callers_at_once=1,
)
