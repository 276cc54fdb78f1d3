"""The fault classes: what each one builds or breaks, and the one outcome it must end in."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from modelcd_assets.faults import builders as b
from modelcd_assets.faults import bypasses as v
from modelcd_assets.faults import conditions as c
from modelcd_assets.faults import llm_builders as lm
from modelcd_assets.faults.outcomes import (
    BAD_INPUT,
    BLOCKED,
    MANIFEST,
    NEVER_SERVED,
    REFUSED,
    REJECTED,
    RUN_FAILED,
    SKIPPED,
    SUPERSEDED,
    Outcome,
    blocked,
)
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION


@dataclass(frozen=True)
class FaultClass:
    name: str
    group: str
    expected: Outcome
    build: b.Builder | None = None  # the faulty candidate; None: the production version itself is gated
    during: Callable[..., AbstractContextManager] | None = None  # a condition held while the candidate is gated
    probe: Callable | None = None  # a class that is no gated run at all (a sensor tick): returns the outcome itself
    # Measures whether the fault can be produced on the model under test: (False, what was measured) reports the class as
    # not reproducible on this model, counted apart, instead of gating a candidate that carries no fault.
    reproducible: Callable[..., tuple[bool, str]] | None = None
    traffic: str = "traffic_current"
    adapter_only: bool = False
    task: str = CLASSIFICATION  # the task of the production it is derived from

    @property
    def summary(self) -> str:
        fn = self.probe or self.during or self.build
        return (fn.__doc__ or "").strip().splitlines()[0] if fn else f"production itself, judged on {self.traffic}"


def _unlike_the_base(name: str) -> Outcome:
    """Refused at register, naming the file: an adapter's copy of a file its base serves differs from the base's."""
    return Outcome(REFUSED, detail=f" {name}: ")  # the space: config.json is not tokenizer_config.json


CLASSES: tuple[FaultClass, ...] = (
    # Weights and numerics
    FaultClass("nan_weights", "weights", blocked("weights_are_finite"), b.nan_weights),
    FaultClass("inf_weights", "weights", blocked("weights_are_finite"), b.inf_weights),
    FaultClass("weight_scale_blowup", "weights", blocked("weights_within_scale"), b.weight_scale_blowup),
    # A model whose training is gone is judged by the first quality gate that sees it: accuracy on the tiny test model,
    # INT8 fidelity on MiniLM (its random-LoRA logits have low margins that INT8 flips, and fidelity runs before accuracy).
    FaultClass("random_reinit", "weights", blocked("accuracy_within_tolerance", "int8_agrees_with_fp32"), b.random_reinit),
    FaultClass("int8_hostile_outliers", "weights", blocked("int8_agrees_with_fp32"), b.int8_hostile_outliers),
    FaultClass("slow_model", "weights", blocked("throughput_within_tolerance"), b.slow_model),
    # Files
    FaultClass("truncated_safetensors", "files", Outcome(REFUSED), b.truncated_safetensors),
    FaultClass("corrupt_safetensors_header", "files", Outcome(REFUSED), b.corrupt_header),
    FaultClass("safetensors_trailing_bytes", "files", Outcome(REFUSED), b.trailing_bytes),
    FaultClass("safetensors_offset_gap", "files", Outcome(REFUSED), b.offset_gap),
    FaultClass("pickle_renamed", "files", Outcome(REFUSED), b.pickle_renamed),
    FaultClass("remote_code", "files", Outcome(REFUSED), b.remote_code),
    FaultClass("symlink_escape", "files", Outcome(REFUSED), b.symlink_escape),
    FaultClass("onnx_external_data_escape", "files", Outcome(REFUSED), b.onnx_external_data_escape),
    FaultClass("raw_truncated_safetensors", "files", blocked("artifact_is_safe"), b.raw(b.truncated_safetensors)),
    FaultClass("raw_pickle_renamed", "files", blocked("artifact_is_safe"), b.raw(b.pickle_renamed)),
    FaultClass("raw_remote_code", "files", blocked("artifact_is_safe"), b.raw(b.remote_code)),
    FaultClass("raw_onnx_external_data_escape", "files", blocked("artifact_is_safe"), b.raw(b.onnx_external_data_escape)),
    FaultClass("onnx_external_data_hiding_code", "files", Outcome(REFUSED), b.onnx_external_data_hiding_code),
    FaultClass("raw_onnx_external_data_hiding_code", "files", blocked("artifact_is_safe"), b.raw(b.onnx_external_data_hiding_code)),
    FaultClass("tampered_after_registration", "files", Outcome(MANIFEST), b.identical, c.tampered_after_registration),
    # Structure and contract
    FaultClass("swapped_id2label", "contract", blocked("semver_covers_contract_change"), b.swapped_id2label),
    FaultClass("incompatible_tokenizer", "contract", blocked("tokenizer_fits_model"), b.incompatible_tokenizer),
    FaultClass("vocab_exceeds_embeddings", "contract", blocked("tokenizer_fits_model"), b.vocab_exceeds_embeddings),
    FaultClass(
        "adapter_targets_no_module",
        "contract",
        Outcome(BAD_INPUT, detail="does not fit base"),
        b.adapter_targets_no_module,
        adapter_only=True,
    ),
    FaultClass(
        "adapter_weights_match_no_module", "contract", blocked("adapter_fits_base"), b.adapter_weights_match_no_module, adapter_only=True
    ),
    FaultClass("adapter_for_another_base", "contract", blocked("adapter_fits_base"), b.adapter_for_another_base, adapter_only=True),
    FaultClass(
        "adapter_shapes_for_another_base",
        "contract",
        Outcome(BAD_INPUT, detail="does not fit base"),
        b.adapter_shapes_for_another_base,
        adapter_only=True,
    ),
    FaultClass("dropped_head", "contract", blocked("model_loads_cleanly"), b.dropped_head),
    FaultClass("contract_change_as_patch", "contract", blocked("semver_covers_contract_change"), b.contract_change_as_patch),
    # Tokenizer and config files beside an adapter's weights: the merged model is served with its base's, so each is refused at
    # register unless it says what the base's copy says (lib/tasks/adapter_files.py); without `modelcd register`, artifact_is_safe.
    FaultClass("adapter_added_tokens_file", "contract", _unlike_the_base("added_tokens.json"), b.added_tokens_file, adapter_only=True),
    FaultClass("raw_adapter_added_tokens_file", "contract", blocked("artifact_is_safe"), b.raw(b.added_tokens_file), adapter_only=True),
    FaultClass(
        "adapter_special_tokens_map_changed",
        "contract",
        _unlike_the_base("special_tokens_map.json"),
        b.special_tokens_map_changed,
        adapter_only=True,
    ),
    FaultClass(
        "adapter_tokenizer_config_changed",
        "contract",
        _unlike_the_base("tokenizer_config.json"),
        b.tokenizer_config_changed,
        adapter_only=True,
    ),
    FaultClass(
        "adapter_tokenizer_json_changed", "contract", _unlike_the_base("tokenizer.json"), b.tokenizer_json_changed, adapter_only=True
    ),
    FaultClass("adapter_vocab_txt_edited", "contract", _unlike_the_base("vocab.txt"), b.vocab_txt_edited, adapter_only=True),
    FaultClass("adapter_config_json_changed", "contract", _unlike_the_base("config.json"), b.config_json_changed, adapter_only=True),
    # Data
    FaultClass("drifted_traffic", "data", blocked("no_drift_detected"), traffic="traffic_shifted"),
    # Infrastructure
    FaultClass(
        "registry_outage",
        "infra",
        Outcome(RUN_FAILED, detail="exit 1: modelcd: registry unavailable: candidate: could not read the production alias"),
        probe=c.registry_outage,
    ),
    FaultClass(
        "registry_unreachable",
        "infra",
        Outcome(RUN_FAILED, detail="exit 1: modelcd: registry unavailable: could not read"),
        probe=c.registry_unreachable,
    ),
    FaultClass(
        "production_alias_deleted", "infra", Outcome(BAD_INPUT, detail="production alias missing"), b.identical, c.production_alias_deleted
    ),
    FaultClass("production_moved_mid_run", "infra", Outcome(SUPERSEDED, detail="moved from"), b.identical, c.production_moves),
    FaultClass("prometheus_unreachable", "infra", Outcome(SKIPPED), probe=c.prometheus_unreachable),
    # One-word calibration collapses static INT8 on the tiny test model (96.7% agreement), but not on MiniLM, where every
    # calibration tried keeps 100% agreement (bench/bench_calibration.py): measured first, on production's build, and
    # reported as not reproducible where it does not collapse.
    FaultClass(
        "static_calibration_collapse",
        "infra",
        blocked("int8_agrees_with_fp32"),
        b.readme_changed,
        c.static_calibration_collapse,
        reproducible=c.calibration_collapses,
    ),
    # Ways around a verdict once it is given (faults/bypasses.py): what is served must still hold a valid one over its bytes.
    FaultClass(
        "alias_moved_to_blocked", "verdict", Outcome(NEVER_SERVED, detail="modelcd_alias_refused set"), probe=v.alias_moved_to_blocked
    ),
    FaultClass(
        "files_swapped_after_gating",
        "verdict",
        Outcome(NEVER_SERVED, detail="differ from what was judged"),
        probe=v.files_swapped_after_gating,
    ),
    FaultClass("model_deleted_and_recreated", "verdict", Outcome(NEVER_SERVED, detail="gated anew"), probe=v.model_deleted_and_recreated),
    FaultClass(
        "attestation_forged_with_another_key",
        "verdict",
        Outcome(NEVER_SERVED, detail="does not verify with the public key"),
        probe=v.attestation_forged_with_another_key,
    ),
    FaultClass(
        "oversized_requests",
        "serving",
        Outcome(REJECTED, detail="counted in modelcd_requests_rejected_total, none observed"),
        probe=v.oversized_requests,
    ),
)


def _lm(name: str, group: str, expected: Outcome, build=None, **kw) -> FaultClass:
    return FaultClass(name, group, expected, build, task=CAUSAL_LM, adapter_only=True, **kw)


# Causal-LM adapters, derived from a causal LM's production adapter (`modelcd faults run --task causal-lm`).
LM_CLASSES: tuple[FaultClass, ...] = (
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
    _lm("lm_added_special_token", "contract", _unlike_the_base("tokenizer.json"), lm.added_special_token),
    _lm("lm_chat_template_as_patch", "contract", _unlike_the_base("chat_template.jinja"), lm.chat_template_as_patch),
    _lm("lm_eos_changed", "contract", _unlike_the_base("generation_config.json"), lm.eos_changed),
    _lm("lm_added_tokens_file", "contract", _unlike_the_base("added_tokens.json"), lm.added_tokens_file),
    _lm("lm_special_tokens_map_eos", "contract", _unlike_the_base("special_tokens_map.json"), lm.special_tokens_map_eos),
    _lm("lm_tokenizer_config_eos", "contract", _unlike_the_base("tokenizer_config.json"), lm.tokenizer_config_eos),
    _lm("lm_tokenizer_config_chat_template", "contract", _unlike_the_base("tokenizer_config.json"), lm.tokenizer_config_chat_template),
    _lm("lm_vocab_json_edited", "contract", _unlike_the_base("vocab.json"), lm.vocab_json_edited),
    _lm("lm_merges_txt_edited", "contract", _unlike_the_base("merges.txt"), lm.merges_txt_edited),
    _lm("lm_config_json_changed", "contract", _unlike_the_base("config.json"), lm.config_json_changed),
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
)

BY_NAME = {fc.name: fc for fc in (*CLASSES, *LM_CLASSES)}


CATALOGS = {CLASSIFICATION: CLASSES, CAUSAL_LM: LM_CLASSES}  # each task's fault classes


def select(only: list[str] | None, task: str) -> list[FaultClass]:
    """The classes named (in catalog order), or all of a task's; an unknown name, or one of another task, is an error that lists the known
    ones. A task without fault classes here is refused: its gates were never shown to catch these faults."""
    if task not in CATALOGS:
        raise ModelcdError(f"the fault sandbox has no fault classes for {task} models; it derives faults for {', '.join(CATALOGS)} models")
    catalog = CATALOGS[task]
    if not only:
        return list(catalog)
    unknown = [n for n in only if n not in {fc.name for fc in catalog}]
    if unknown:
        raise ModelcdError(
            f"unknown fault class(es) {', '.join(unknown)} for a {task} production; known: {', '.join(fc.name for fc in catalog)}"
        )
    return [fc for fc in catalog if fc.name in only]
