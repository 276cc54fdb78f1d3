"""quantized_model: INT8 by ONNX Runtime, static (fed by calibration_set) and dynamic; the best passing variant is chosen."""

import time
from pathlib import Path

import dagster as dg
import numpy as np

from modelcd_assets.defs.assets.calibration_set import calibration_set
from modelcd_assets.defs.assets.onnx_model import onnx_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.builds import read_json, write_json
from modelcd_assets.lib.data import read_split
from modelcd_assets.lib.evaluate import predict
from modelcd_assets.lib.failpoints import failpoint
from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.quantize import DYNAMIC, STATIC, choose_variant, optimize_transformer, quantize_dynamic_int8, quantize_static_int8
from modelcd_assets.lib.registry import CandidateRef
from modelcd_assets.lib.runtime import batch_limit, logits, session
from modelcd_assets.lib.tokens import BATCH, encode, tokenizer_hash
from modelcd_assets.resources.state import LocalStateResource

# Speed is timed on evaluation texts at their real lengths, in the length buckets every model call uses.
SPEED_TEXTS, SPEED_ROUNDS = 128, 5


def _items_per_s(paths: dict[str, Path], feeds: dict) -> dict[str, float]:
    """Items/s of each model, timed in interleaved rounds so a burst of load on the machine hits them all."""
    sessions = {k: session(p) for k, p in paths.items()}
    batch = {k: batch_limit(p, BATCH) for k, p in paths.items()}  # each model run as it is served
    for k, sess in sessions.items():
        logits(sess, feeds, batch[k])
    best = dict.fromkeys(sessions, float("inf"))
    for _ in range(SPEED_ROUNDS):
        for k, sess in sessions.items():
            t = time.perf_counter()
            logits(sess, feeds, batch[k])
            best[k] = min(best[k], time.perf_counter() - t)
    return {k: len(feeds["input_ids"]) / t for k, t in best.items()}


def calibration_path(context: dg.AssetExecutionContext, state: LocalStateResource) -> tuple[Path, str]:
    """The calibration file of calibration_set's latest materialization, by its content hash."""
    event = context.instance.get_latest_materialization_event(calibration_set.key)
    if event is None or event.asset_materialization is None:
        raise FileNotFoundError("calibration_set has never been materialized; materialize it before quantized_model")
    digest = event.asset_materialization.metadata["sha256"].value
    return state.root / "calibration" / f"{digest}.jsonl", digest


@dg.asset(partitions_def=candidates, deps=[onnx_model, calibration_set], group_name="build", kinds={"onnx"})
def quantized_model(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """Static and dynamic INT8 of the fused graph; fidelity on the evaluation split, speed at batch 32; the variant chosen for this candidate."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
    build = record.build
    calib_file, calib_hash = calibration_path(context, state)
    eval_file = state.split("evaluation")
    eval_hash = file_sha256(eval_file)
    report_path = build.dir / "quantization_report.json"
    report = read_json(report_path) if report_path.is_file() else {}
    cached = report.get("calibration_sha256") == calib_hash and report.get("evaluation_sha256") == eval_hash
    if not cached:
        fused = optimize_transformer(build.onnx, build.optimized, build.merged / "config.json")
        calib = encode(build.merged, [ex.text for ex in read_split(calib_file)], state.cache_dir("tokens"))
        quantize_static_int8(build.optimized, build.int8(STATIC), calib)
        failpoint("mid_quantization")
        quantize_dynamic_int8(build.optimized, build.int8(DYNAMIC))
        feeds = encode(build.merged, [ex.text for ex in read_split(eval_file)], state.cache_dir("tokens"))
        speed_feeds = encode(build.merged, [ex.text for ex in read_split(eval_file)[:SPEED_TEXTS]], state.cache_dir("tokens"))
        preds = {"fp32": predict(build.onnx, feeds)}
        speeds = _items_per_s({"fp32": build.onnx, STATIC: build.int8(STATIC), DYNAMIC: build.int8(DYNAMIC)}, speed_feeds)
        variants = {}
        for variant in (STATIC, DYNAMIC):
            preds[variant] = predict(build.int8(variant), feeds)
            variants[variant] = {
                "top1_agreement": float(np.mean(preds[variant] == preds["fp32"])),
                "items_per_s": speeds[variant],
                "size_mb": build.int8(variant).stat().st_size / 2**20,
            }
        np.savez(build.dir / "eval_predictions.npz", **preds)
        report = {"calibration_sha256": calib_hash, "evaluation_sha256": eval_hash, "fused_ops": fused, "variants": variants,
                  "fp32_items_per_s": speeds["fp32"]}
        write_json(report_path, report)
    model_policy = record.effective_policy()
    if model_policy.quantization.variant == "auto":
        baseline = record.baseline(state.candidate_dir)
        chosen, why = choose_variant(report["variants"], model_policy.int8_fidelity.min_top1_agreement,
                                     production_variant=baseline.chosen_variant() if baseline and baseline.ref != ref else None)
    else:
        chosen = model_policy.quantization.variant
        why = f"{chosen}: pinned by the policy's quantization.variant"
    served = build.int8(chosen)
    # What the server must reproduce before it serves this version: the artifact's hash, and its outputs on the probe texts.
    probe_texts = [ex.text for ex in read_split(eval_file)[: model_policy.serving.probe_examples]]
    probe_batch = batch_limit(served, BATCH)
    probe_logits = logits(session(served, threads=1), encode(build.merged, probe_texts, state.cache_dir("tokens")), probe_batch)
    artifact_sha256 = file_sha256(served)
    write_json(record.chosen_file, {"chosen": chosen, "why": why, "artifact": served.name, "artifact_sha256": artifact_sha256,
                                    "tokenizer_sha256": tokenizer_hash(build.merged),
                                    "probe": {"batch": probe_batch, "texts": probe_texts, "logits": probe_logits.tolist()}})
    rows = "\n".join(f"| {k} | {v['top1_agreement']:.2%} | {v['items_per_s']:.0f} | {v['size_mb']:.1f} |" for k, v in report["variants"].items())
    table = f"| variant | top-1 agreement vs FP32 | items/s ({SPEED_TEXTS} evaluation texts, buckets of {BATCH}) | MB |\n|---|---|---|---|\n| fp32 | 100% | {report['fp32_items_per_s']:.0f} | {build.onnx.stat().st_size / 2**20:.1f} |\n{rows}"
    return dg.MaterializeResult(
        metadata={
            "chosen_variant": chosen,
            "artifact_sha256": artifact_sha256,
            "why": why,
            "top1_agreement": report["variants"][chosen]["top1_agreement"],
            "static_top1_agreement": report["variants"][STATIC]["top1_agreement"],
            "dynamic_top1_agreement": report["variants"][DYNAMIC]["top1_agreement"],
            "static_items_per_s": report["variants"][STATIC]["items_per_s"],
            "dynamic_items_per_s": report["variants"][DYNAMIC]["items_per_s"],
            "calibration_sha256": calib_hash,
            "fused_ops": dg.MetadataValue.json(report["fused_ops"]),
            "variants": dg.MetadataValue.md(table),
            "reused_from_cache": cached,
        },
        data_version=dg.DataVersion(f"{build.key}-{chosen}"),
    )
