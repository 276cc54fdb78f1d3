"""quantized_model: INT8 by ONNX Runtime, static (fed by calibration_set) and dynamic; the best passing variant is chosen."""

import json
from pathlib import Path

import dagster as dg
import numpy as np

from modelcd_assets.defs.assets.calibration_set import calibration_set
from modelcd_assets.defs.assets.onnx_model import onnx_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.hashing import file_sha256, text_hash
from modelcd_assets.lib.inference.benchmark import best_items_per_s
from modelcd_assets.lib.inference.builds import Build, read_json, save_array, write_json
from modelcd_assets.lib.inference.evaluate import predict
from modelcd_assets.lib.inference.quantize import DYNAMIC, STATIC, artifact_id, choose_variant, optimize_transformer, quantize_dynamic_int8, quantize_static_int8
from modelcd_assets.lib.inference.runtime import OnnxModel
from modelcd_assets.lib.inference.tokens import BATCH, encode, tokenizer_hash
from modelcd_assets.lib.operations.failpoints import failpoint
from modelcd_assets.lib.release.calibration import read_texts
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.splits import read_split
from modelcd_assets.resources.state import LocalStateResource

# Speed is timed on evaluation texts at their real lengths, in the length buckets every model call uses.
SPEED_TEXTS, SPEED_ROUNDS = 128, 5


def _fused_ops(build: Build) -> dict[str, int]:
    """Fuse the FP32 export once per build (optimized.onnx, the input of every INT8 variant); returns the fused-op counts."""
    if not build.optimized.is_file() or not build.fused_ops.is_file():
        write_json(build.fused_ops, optimize_transformer(build.onnx, build.optimized, build.merged / "config.json"))
    return read_json(build.fused_ops)


def _build(build: Build, needed: set[str], calib_file: Path, calib_hash: str, eval_file: Path, eval_hash: str, state: LocalStateResource,
           retime: bool) -> tuple[dict, bool]:
    """The build's INT8 variants in `needed` under one calibration set, with their fidelity and speed; only what the build lacks is made.

    Returns the quantization report for that set and whether nothing had to be made. An INT8 file that exists is never
    made again: it may be what a gated version serves. retime: time every needed variant again, interleaved in this
    run, because a choice is about to be made from the timings.
    """
    ids = {v: artifact_id(v, calib_hash) for v in needed}
    report_path = build.quantization_report(calib_hash)
    report = read_json(report_path) if report_path.is_file() else {}
    if report.get("calibration_sha256") != calib_hash or report.get("evaluation_sha256") != eval_hash:
        report = {"calibration_sha256": calib_hash, "evaluation_sha256": eval_hash, "variants": {}}
    missing = [v for v in (STATIC, DYNAMIC) if v in needed and (v not in report["variants"] or not build.predictions(ids[v]).is_file())]
    if not missing and not retime:
        return report, True
    to_make = [v for v in missing if not build.int8(ids[v]).is_file()]
    if to_make or "fused_ops" not in report:
        report["fused_ops"] = _fused_ops(build)
    if STATIC in to_make:
        calib = encode(build.merged, read_texts(calib_file), state.cache_dir("tokens"))
        quantize_static_int8(build.optimized, build.int8(ids[STATIC]), calib)
    if to_make:  # between the two variants, as before: a crash here leaves one INT8 file made and one not
        failpoint("mid_quantization")
    if DYNAMIC in to_make:
        quantize_dynamic_int8(build.optimized, build.int8(ids[DYNAMIC]))
    feeds = encode(build.merged, [ex.text for ex in read_split(eval_file)], state.cache_dir("tokens"))
    if not build.predictions("fp32").is_file():
        save_array(build.predictions("fp32"), predict(build.onnx, feeds))
    fp32 = np.load(build.predictions("fp32"))
    # Speed is timed only when a variant is about to be chosen from it: once a base's variant is decided, a later
    # adapter's speed is the throughput gate's to measure (against production, interleaved), and timing it here too
    # cost 3.6 s of a 33 s gated run (bench/bench_adapters_of_base.py).
    speeds = {}
    if retime:
        speed_feeds = encode(build.merged, [ex.text for ex in read_split(eval_file)[:SPEED_TEXTS]], state.cache_dir("tokens"))
        models = {"fp32": OnnxModel(build.onnx), **{v: OnnxModel(build.int8(ids[v])) for v in sorted(needed)}}
        speeds = best_items_per_s(models, speed_feeds, SPEED_ROUNDS, BATCH)  # interleaved, each model run as it is served
        report["fp32_items_per_s"] = speeds["fp32"]
    for variant in sorted(set(missing) | set(speeds) - {"fp32"}):
        if variant in missing:
            save_array(build.predictions(ids[variant]), predict(build.int8(ids[variant]), feeds))
        entry = report["variants"].get(variant, {}) if variant not in missing else {}
        entry.update(top1_agreement=float(np.mean(np.load(build.predictions(ids[variant])) == fp32)),
                     size_mb=build.int8(ids[variant]).stat().st_size / 2**20, artifact_id=ids[variant])
        if variant in speeds:
            entry["items_per_s"] = speeds[variant]
        report["variants"][variant] = entry
    write_json(report_path, report)
    return report, False


def _decide(decision_file: Path, choice: dict) -> dict:
    """Record the base's variant choice unless another candidate recorded one first; returns the one that stands."""
    decision_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(decision_file, "x") as f:
            json.dump(choice, f, indent=2, sort_keys=True)
        return choice
    except FileExistsError:
        return read_json(decision_file)


@dg.asset(partitions_def=candidates, deps=[onnx_model, calibration_set], group_name="build", kinds={"onnx"})
def quantized_model(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """INT8 of the fused graph in the variant chosen once per base and calibration set (or pinned by the policy), static
    INT8 calibrated with the set pinned on this version; fidelity and speed measured."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
    build = record.build
    calib_hash = record.calibration_sha256
    if calib_hash is None:
        raise FileNotFoundError(f"{ref.uri}'s record was written by an older modelcd and names no calibration set; re-run its gated job "
                                f"('modelcd gate {ref.name} {ref.version}')")
    calib_file = state.calibration_sets().require(calib_hash)
    eval_file = state.split("evaluation")
    eval_hash = file_sha256(eval_file)
    model_policy = record.effective_policy()
    min_agreement = model_policy.int8_fidelity.min_top1_agreement
    # Every adapter of one base (a full model is its own base) runs the variant chosen for the first one gated, so
    # the throughput gate compares like with like and later adapters build one variant, not two. The choice is the
    # registered model's own: another model on the same base may have another production and policy.
    key = text_hash(record.base_hash or record.content_hash, calib_hash, eval_hash, str(min_agreement))[:24]
    decision_file = state.variant_decision(ref.name, key)
    pinned = None if model_policy.quantization.variant == "auto" else model_policy.quantization.variant
    decision = read_json(decision_file) if pinned is None and decision_file.is_file() else None
    needed = {pinned} if pinned else ({decision["chosen"]} if decision else {STATIC, DYNAMIC})
    with build.lock():
        report, cached = _build(build, needed, calib_file, calib_hash, eval_file, eval_hash, state, retime=not pinned and not decision)
    if pinned:
        chosen, why = pinned, f"{pinned}: pinned by the policy's quantization.variant"
    elif decision:
        chosen, why = decision["chosen"], f"{decision['chosen']}: chosen once for this base and calibration set, when {decision['decided_by']} was gated ({decision['why']})"
    else:
        baseline = record.baseline(state.root)
        chosen, why = choose_variant({v: report["variants"][v] for v in needed}, min_agreement,
                                     production_variant=baseline.chosen_variant() if baseline and baseline.ref != ref else None)
        stands = _decide(decision_file, {"chosen": chosen, "why": why, "decided_by": ref.uri, "variants": {v: report["variants"][v] for v in needed}})
        if stands["chosen"] != chosen:  # another adapter of the base decided first, in a run of its own
            chosen, why = stands["chosen"], f"{stands['chosen']}: chosen once for this base and calibration set, when {stands['decided_by']} was gated ({stands['why']})"
    served_id = artifact_id(chosen, calib_hash)
    served = build.int8(served_id)
    # What the server must reproduce before it serves this version: the artifact's hash, and its outputs on the probe texts.
    probe_texts = [ex.text for ex in read_split(eval_file)[: model_policy.serving.probe_examples]]
    with build.lock():
        model = OnnxModel(served, threads=1)
        probe_logits = model.logits(encode(build.merged, probe_texts, state.cache_dir("tokens")))
        artifact_sha256 = file_sha256(served)
    write_json(record.files.quantization, {"chosen": chosen, "why": why, "artifact": served.name, "artifact_id": served_id, "artifact_sha256": artifact_sha256,
                                    "calibration_sha256": calib_hash,
                                    "batch_dependent": model.batch_dependent, "tokenizer_sha256": tokenizer_hash(build.merged),
                                    "probe": {"batch": model.batch(BATCH), "texts": probe_texts, "logits": probe_logits.tolist()}})
    speed = lambda v: f"{v:.0f}" if v is not None else "not timed (variant already decided)"  # noqa: E731
    rows = "\n".join(f"| {k} | {v['top1_agreement']:.2%} | {speed(v.get('items_per_s'))} | {v['size_mb']:.1f} |" for k, v in sorted(report["variants"].items()))
    table = (f"| variant | top-1 agreement vs FP32 | items/s ({SPEED_TEXTS} evaluation texts, buckets of {BATCH}) | MB |\n|---|---|---|---|\n"
             f"| fp32 | 100% | {speed(report.get('fp32_items_per_s'))} | {build.onnx.stat().st_size / 2**20:.1f} |\n{rows}")
    measured = {f"{v}_{k}": report["variants"][v][k] for v in report["variants"] for k in ("top1_agreement", "items_per_s") if k in report["variants"][v]}
    return dg.MaterializeResult(
        metadata={
            "chosen_variant": chosen,
            "artifact_sha256": artifact_sha256,
            "why": why,
            "top1_agreement": report["variants"][chosen]["top1_agreement"],
            **measured,
            "calibration_sha256": calib_hash,
            "fused_ops": dg.MetadataValue.json(report["fused_ops"]),
            "variants": dg.MetadataValue.md(table),
            "reused_from_cache": cached,
        },
        data_version=dg.DataVersion(f"{build.key}-{chosen}"),
    )
