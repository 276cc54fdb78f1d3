"""The classifier's fault suite: the faults derived from a classifier's production (`modelcd faults run`), and its clean
controls. lib/tasks/builtin.py declares it as the classification task's."""

from __future__ import annotations

import json
from dataclasses import replace

from modelcd_assets.faults import builders as b
from modelcd_assets.faults import bypasses as v
from modelcd_assets.faults import conditions as c
from modelcd_assets.faults import live_faults as live
from modelcd_assets.faults.catalog import Control, FaultClass, FaultSuite, unlike_the_base
from modelcd_assets.faults.controls import base_files_control, identical_controls, retrained_controls
from modelcd_assets.faults.outcomes import (
    BAD_INPUT,
    MANIFEST,
    NEVER_SERVED,
    NOT_REPRODUCIBLE,
    REFUSED,
    REJECTED,
    ROLLOUT_ABORTED,
    ROLLOUT_PAUSED,
    ROLLOUT_STOPPED,
    RUN_FAILED,
    SKIPPED,
    SUPERSEDED,
    Outcome,
    blocked,
)
from modelcd_assets.faults.sandbox import Sandbox
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.splits import Example, read_split, split_path
from modelcd_assets.serving.loadgen import CLASSIFY

LOAD_TEXTS = 256  # evaluation texts the server under load is asked, round and round

# The shifted traffic's first half teaches the fault; its second half is what the live callers ask.
SHIFTED = "traffic_shifted"
# Measured on the tiny test classifier (a throwaway script over these numbers): 300 steps at 2e-3 from production's adapter,
# on the train split and the relabelled half, kept its evaluation accuracy (93.7% against production's 88.8%) and agreed
# with production on 45% of the other half; 30 steps on 300 of each agreed on 95% and lost 4 points of accuracy. On the
# demo's MiniLM adapter: accuracy 94.08% as production's, and 0% agreement on the other half.
SHIFT_STEPS, SHIFT_LEARNING_RATE, SHIFT_SEED = 300, 2e-3, 7
MAX_AGREEMENT = 0.8  # reproduced when the built adapter agrees with production on at most this share of the live texts (FP32)


def disagrees_on_shifted_live_texts(sb: Sandbox) -> Outcome:
    """Production's adapter trained on with the shifted channel's tickets relabelled (each label the next one): as good on
    every offline split, it labels the live traffic's new channel otherwise than production."""
    from modelcd_assets.lib.classifier.config import labels_of
    from modelcd_assets.lib.classifier.training import Training, train_adapter

    path = split_path(sb.data, SHIFTED)
    if not path.is_file():
        raise ModelcdError(f"{path} is missing: this class teaches and asks the {SHIFTED!r} split; add it to the data folder")
    shifted = read_split(path)
    learn, asked = shifted[: len(shifted) // 2], [ex.text for ex in shifted[len(shifted) // 2 :]]
    labels = labels_of(sb.prod.base)
    if unknown := sorted({ex.label for ex in learn} - set(labels)):
        raise ModelcdError(f"{path} labels tickets {unknown}, which production's labels {labels} do not hold")
    relabelled = [Example(ex.text, labels[(labels.index(ex.label) + 1) % len(labels)]) for ex in learn]
    config = json.loads((sb.prod.artifact / "adapter_config.json").read_text())
    recipe = Training(steps=SHIFT_STEPS, learning_rate=SHIFT_LEARNING_RATE, rank=config["r"], alpha=config["lora_alpha"], seed=SHIFT_SEED)
    folder = train_adapter(
        sb.prod.base,
        read_split(split_path(sb.data, "train")) + relabelled,
        sb.work / "disagrees_on_shifted_live_texts",
        recipe,
        sb.prod.base_uri,
        desc="training disagrees_on_shifted_live_texts",
        start_from=sb.prod.artifact,
    )
    agreed = _fp32_agreement(sb, folder, asked)
    measured = (
        f"the adapter, trained {SHIFT_STEPS} steps on from production's with {len(learn)} {SHIFTED} tickets relabelled, "
        f"agrees with production on {agreed:.1%} of the other {len(asked)} (FP32)"
    )
    if agreed > MAX_AGREEMENT:
        return Outcome(NOT_REPRODUCIBLE, detail=f"{measured}, above the {MAX_AGREEMENT:.0%} a disagreement needs")
    outcome = live.roll_out(sb, sb.register(b.Candidate(folder)), traffic=None, load=_classify_requests(asked))
    return replace(outcome, detail=f"reproduced: {measured}; {outcome.detail}")


def _fp32_agreement(sb: Sandbox, adapter, texts: list[str]) -> float:
    """The share of texts the adapter's FP32 model labels as production's does."""
    from modelcd_assets.lib.classifier.export import torch_logits
    from modelcd_assets.lib.classifier.model_io import merge_adapter
    from modelcd_assets.lib.inference.tokens import encode

    merged = sb.work / f"{adapter.name}-merged"
    merge_adapter(sb.prod.base, adapter, merged)
    feeds = encode(merged, texts)
    ours, theirs = torch_logits(merged, feeds).argmax(-1), torch_logits(sb.prod.full_model(), feeds).argmax(-1)
    return float((ours == theirs).mean())


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
    FaultClass("adapter_added_tokens_file", "contract", unlike_the_base("added_tokens.json"), b.added_tokens_file, adapter_only=True),
    FaultClass("raw_adapter_added_tokens_file", "contract", blocked("artifact_is_safe"), b.raw(b.added_tokens_file), adapter_only=True),
    FaultClass(
        "adapter_special_tokens_map_changed",
        "contract",
        unlike_the_base("special_tokens_map.json"),
        b.special_tokens_map_changed,
        adapter_only=True,
    ),
    FaultClass(
        "adapter_tokenizer_config_changed",
        "contract",
        unlike_the_base("tokenizer_config.json"),
        b.tokenizer_config_changed,
        adapter_only=True,
    ),
    FaultClass(
        "adapter_tokenizer_json_changed", "contract", unlike_the_base("tokenizer.json"), b.tokenizer_json_changed, adapter_only=True
    ),
    FaultClass("adapter_vocab_txt_edited", "contract", unlike_the_base("vocab.txt"), b.vocab_txt_edited, adapter_only=True),
    FaultClass("adapter_config_json_changed", "contract", unlike_the_base("config.json"), b.config_json_changed, adapter_only=True),
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
    # Live-only: every offline gate passes, and only the rollout's steps on live traffic can stop them (faults/live_faults.py).
    FaultClass(
        "slower_under_live_load", "live", Outcome(ROLLOUT_ABORTED, detail="latency_ms high"), probe=live.slower_under_live_load, live=True
    ),
    FaultClass(
        "errors_on_live_requests", "live", Outcome(ROLLOUT_ABORTED, detail="error_rate high"), probe=live.errors_on_live_requests, live=True
    ),
    FaultClass("too_little_traffic", "live", Outcome(ROLLOUT_PAUSED, detail="fewer than"), probe=live.too_little_traffic, live=True),
    # Judged only where the shadow step compares the pairs: a policy whose shadow step leaves label_agreement out lets it
    # through. Expected stopped, aborted or paused: label_agreement is not critical, so where it is the one failing metric
    # of four (the demo's shadow step) the score is marginal and the rollout pauses (make bench-rollout: 0 of 162 pairs
    # agreed, score 75); of three (the tiny test's), it is below marginal and aborts.
    FaultClass(
        "disagrees_on_shifted_live_texts",
        "live",
        Outcome(ROLLOUT_STOPPED, detail="label_agreement low"),
        probe=disagrees_on_shifted_live_texts,
        adapter_only=True,
        live=True,
    ),
)


def classifier_controls(sb: Sandbox, identical_n: int, retrained_n: int, notes: list[str]) -> list[Control]:
    """Byte-identical copies, the base's files copied beside production's adapter, and adapters retrained from production's
    base with the demo's good recipe and other seeds. A full-model production has no base to retrain from: identical copies
    take the retrained ones' place, and notes say so."""
    from modelcd_assets.lib.classifier.training import train_adapter
    from modelcd_assets.lib.demo.recipes import GOOD

    if retrained_n and not sb.prod.is_adapter:
        notes.append(
            f"production is a full model: its base is unknown, so {retrained_n} byte-identical controls replace the retrained ones"
        )
        identical_n, retrained_n = identical_n + retrained_n, 0
    train = read_split(split_path(sb.data, "train")) if retrained_n else []
    return [
        *identical_controls(sb, identical_n),
        *base_files_control(sb),
        *retrained_controls(sb, retrained_n, train_adapter, train, GOOD),
    ]


def _load_texts(sb: Sandbox) -> list[str]:
    return [ex.text for ex in read_split(split_path(sb.data, "evaluation"))[:LOAD_TEXTS]]


def _classify_requests(texts: list[str]) -> tuple[str, list]:
    """Classify requests of 1 to 4 texts."""
    return CLASSIFY, [texts[i : i + 1 + i % 4] for i in range(0, len(texts), 4)]


def _live_load(sb: Sandbox, split: str) -> tuple[str, list]:
    """Classify requests of 1 to 4 texts from the split."""
    return _classify_requests([ex.text for ex in read_split(split_path(sb.data, split))])


CLASSIFIER_FAULTS = FaultSuite(CLASSES, classifier_controls, load_texts=_load_texts, live_load=_live_load)
