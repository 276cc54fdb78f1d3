"""The classifier: an encoder with a classification head, a LoRA adapter merged into it (or a full model), exported to
ONNX, INT8 by ONNX Runtime (static or dynamic, the faster that keeps fidelity), judged on labels."""

import json
import shutil
import time
from pathlib import Path

import numpy as np

from modelcd_assets.lib.classifier.config import labels_of
from modelcd_assets.lib.classifier.contract import extract_contract
from modelcd_assets.lib.classifier.export import OPSET, check_parity, export_onnx, torch_logits
from modelcd_assets.lib.classifier.health import measure
from modelcd_assets.lib.classifier.model_io import merge_adapter
from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.hashing import file_sha256, text_hash
from modelcd_assets.lib.inference.benchmark import SAMPLE_TEXTS, best_items_per_s, cost_inputs, merge_runs, paired_throughput, summarize
from modelcd_assets.lib.inference.builds import Build, decide_once, read_json, save_array, write_json
from modelcd_assets.lib.inference.evaluate import label_ids, load_evaluation, predict
from modelcd_assets.lib.inference.quantize import (
    DYNAMIC,
    STATIC,
    artifact_id,
    choose_variant,
    optimize_transformer,
    quantize_dynamic_int8,
    quantize_static_int8,
)
from modelcd_assets.lib.inference.runtime import OnnxModel, logits, session
from modelcd_assets.lib.inference.tokens import BATCH, encode, tokenizer_hash
from modelcd_assets.lib.judging.drift import describe, input_drift, prediction_drift
from modelcd_assets.lib.judging.gates import (
    Verdict,
    judge_accuracy,
    judge_cost,
    judge_fidelity,
    judge_golden,
    judge_paired_speed,
    judge_production_recheck,
)
from modelcd_assets.lib.judging.policy import Policy
from modelcd_assets.lib.operations.failpoints import failpoint
from modelcd_assets.lib.presentation.plots import latency_plot_md
from modelcd_assets.lib.release.artifact import ADAPTER
from modelcd_assets.lib.release.calibration import read_texts
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CONTRACT, SEMVER, TOKENIZER_CHANGE, Registry
from modelcd_assets.lib.splits import read_split
from modelcd_assets.lib.tasks.names import CLASSIFICATION
from modelcd_assets.lib.tasks.semver import semver_report
from modelcd_assets.lib.tasks.task import Json, Md, State, StepResult

PARITY_EXAMPLES = 64
# Speed is timed on evaluation texts at their real lengths, in the length buckets every model call uses.
SPEED_TEXTS, SPEED_ROUNDS = 128, 5


def _fused_ops(build: Build) -> dict[str, int]:
    """Fuse the FP32 export once per build (optimized.onnx, the input of every INT8 variant); returns the fused-op counts."""
    if not build.optimized.is_file() or not build.fused_ops.is_file():
        write_json(build.fused_ops, optimize_transformer(build.onnx, build.optimized, build.merged / "config.json"))
    return read_json(build.fused_ops)


def _build(
    build: Build, needed: set[str], calib_file: Path, calib_hash: str, eval_file: Path, eval_hash: str, state: State, retime: bool
) -> tuple[dict, bool]:
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
        entry.update(
            top1_agreement=float(np.mean(np.load(build.predictions(ids[variant])) == fp32)),
            size_mb=build.int8(ids[variant]).stat().st_size / 2**20,
            artifact_id=ids[variant],
        )
        if variant in speeds:
            entry["items_per_s"] = speeds[variant]
        report["variants"][variant] = entry
    write_json(report_path, report)
    return report, False


def _correct(record: CandidateRecord, eval_hash: str, truth: np.ndarray) -> dict[str, np.ndarray]:
    """Per-example correctness of a candidate's FP32 and chosen INT8 model."""
    build = record.build
    if read_json(record.quantization_report).get("evaluation_sha256") != eval_hash:
        raise FileNotFoundError(f"build {build.key} was evaluated on another evaluation split; re-materialize its quantized_model")
    files = {"fp32": build.predictions("fp32"), "int8": build.predictions(record.chosen_artifact_id())}
    if missing := [str(f) for f in files.values() if not f.is_file()]:
        raise FileNotFoundError(
            f"{record.ref.uri}'s build {build.key} lacks its recorded predictions ({', '.join(missing)}); "
            f"re-gate it with 'modelcd gate {record.ref.name} {record.ref.version}'"
        )
    return {k: np.load(f) == truth for k, f in files.items()}


def served_labels(record: CandidateRecord, split_sha256: str, texts: list[str], cache: Path) -> list[str]:
    """The labels a candidate's chosen INT8 model gives a split's texts (the split file with that sha256), kept in its
    build: production's are reused by every candidate judged against it, on the same traffic."""
    build = record.build
    path = build.predictions(record.chosen_artifact_id(), split_sha256)
    with build.lock():
        if not path.is_file():
            save_array(path, predict(record.chosen_int8(), encode(build.merged, texts, cache)))
        ids = np.load(path)
    labels = labels_of(build.merged)
    return [labels[i] for i in ids]


class ClassificationTask:
    name = CLASSIFICATION

    def prepare(self, record: CandidateRecord, state: State, registry: Registry) -> StepResult:
        """One deployable model folder (reused when the same base and adapter were merged before), and its health report."""
        ref = record.ref
        build = record.build
        cached = (build.merged / "config.json").is_file()
        start = time.perf_counter()
        if not cached:
            build.dir.mkdir(parents=True, exist_ok=True)
            if record.kind == ADAPTER:
                merge_adapter(Path(record.base_dir), Path(record.artifact_dir), build.merged)
            else:
                tmp = Path(str(build.merged) + ".tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(record.artifact_dir, tmp)
                tmp.rename(build.merged)
        merge_seconds = time.perf_counter() - start
        reg = registry
        prod = record.baseline(state.root)
        prod_merged = prod.build.merged if prod and prod.ref != ref else None
        # An adapter's tokenizer is its base's; a full model is compared with the tokenizer production serves, when there is one.
        reference = Path(record.base_dir) if record.kind == ADAPTER else prod_merged
        health = measure(
            build.merged,
            record.kind,
            Path(record.artifact_dir),
            Path(record.base_dir) if record.base_dir else None,
            record.base_uri,
            reference,
            reg.tags(ref).get(TOKENIZER_CHANGE) == "true",
            production_merged=prod.build.merged if prod else None,
        )
        write_json(state.files(ref).health, health)
        size = sum(p.stat().st_size for p in build.merged.iterdir())
        return StepResult(
            metadata={
                "build": build.key,
                "reused_from_cache": cached,
                "merge_seconds": round(merge_seconds, 2),
                "health_seconds": round(time.perf_counter() - start - merge_seconds, 2),
                "size_mb": round(size / 2**20, 2),
                "probe_deterministic": health["probe_deterministic"],
                "weight_norm_outliers": Json(health.get("weight_norm_outliers") or {}),
            },
            data_version=build.key,
        )

    def export(self, record: CandidateRecord, state: State, registry: Registry) -> StepResult:
        """Exported once per build; parity is max |logit diff| torch vs ONNX on evaluation examples; the I/O contract is recorded."""
        ref = record.ref
        build = record.build
        report_path = build.dir / "onnx_export.json"
        start = time.perf_counter()
        cached = build.onnx.is_file() and report_path.is_file()
        if cached:
            report = read_json(report_path)
        else:
            export_onnx(build.merged, build.onnx)
            texts = [ex.text for ex in read_split(state.split("evaluation"))[:PARITY_EXAMPLES]]
            feeds = encode(build.merged, texts, state.cache_dir("tokens"))
            try:
                diff = check_parity(torch_logits(build.merged, feeds), logits(session(build.onnx), feeds))
            except Exception:
                build.onnx.unlink(missing_ok=True)
                raise
            report = {"parity_max_abs_diff": diff, "opset": OPSET, "parity_examples": len(texts)}
            write_json(report_path, report)
        reg = registry
        prod = record.baseline_ref
        health = read_json(state.files(ref).health)
        contract = extract_contract(build.onnx, build.merged, self.name)
        semver = semver_report(
            contract,
            reg.tags(ref),
            reg.tags(prod) if prod else None,
            bool(health.get("tokenizer", {}).get("probe_id_mismatches")),
            regating_production=prod == ref,
        )
        write_json(state.files(ref).contract, semver)
        reg.set_tags(ref, {CONTRACT: json.dumps(contract, sort_keys=True), SEMVER: semver["semver"]})
        return StepResult(
            metadata={
                "parity_max_abs_logit_diff": float(report["parity_max_abs_diff"]),
                "opset": report["opset"],
                "size_mb": round(build.onnx.stat().st_size / 2**20, 2),
                "reused_from_cache": cached,
                "seconds": round(time.perf_counter() - start, 2),
                "semver": semver["semver"],
                "contract_changes": Md(
                    "\n".join(f"- {c['level'].upper()}: {c['what']}" for c in semver["changes"]) or "none (weights only)"
                ),
                "contract": Json(contract),
            },
            data_version=build.key,
        )

    def quantize(self, record: CandidateRecord, state: State) -> StepResult:
        """INT8 of the fused graph in the variant chosen once per base and calibration set (or pinned by the policy), static
        INT8 calibrated with the set pinned on this version; fidelity and speed measured."""
        ref = record.ref
        build = record.build
        calib_hash = record.calibration_sha256
        if calib_hash is None:
            raise FileNotFoundError(
                f"{ref.uri}'s record was written by an older modelcd and names no calibration set; re-run its gated job "
                f"('modelcd gate {ref.name} {ref.version}')"
            )
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
        if pinned not in (None, STATIC, DYNAMIC):
            raise BadCandidate(
                f"the policy's quantization.variant is {pinned!r}, which is not a classifier's: pin static or dynamic, or set auto"
            )
        decision = read_json(decision_file) if pinned is None and decision_file.is_file() else None
        needed = {pinned} if pinned else ({decision["chosen"]} if decision else {STATIC, DYNAMIC})
        with build.lock():
            report, cached = _build(build, needed, calib_file, calib_hash, eval_file, eval_hash, state, retime=not pinned and not decision)
        if pinned:
            chosen, why = pinned, f"{pinned}: pinned by the policy's quantization.variant"
        elif decision:
            chosen, why = (
                decision["chosen"],
                (
                    f"{decision['chosen']}: chosen once for this base and calibration set, when {decision['decided_by']} was gated"
                    f" ({decision['why']})"
                ),
            )
        else:
            baseline = record.baseline(state.root)
            chosen, why = choose_variant(
                {v: report["variants"][v] for v in needed},
                min_agreement,
                production_variant=baseline.chosen_variant() if baseline and baseline.ref != ref else None,
            )
            stands = decide_once(
                decision_file, {"chosen": chosen, "why": why, "decided_by": ref.uri, "variants": {v: report["variants"][v] for v in needed}}
            )
            if stands["chosen"] != chosen:  # another adapter of the base decided first, in a run of its own
                chosen, why = (
                    stands["chosen"],
                    (
                        f"{stands['chosen']}: chosen once for this base and calibration set, when {stands['decided_by']} was gated"
                        f" ({stands['why']})"
                    ),
                )
        served_id = artifact_id(chosen, calib_hash)
        served = build.int8(served_id)
        # What the server must reproduce before it serves this version: the artifact's hash, and its outputs on the probe texts.
        probe_texts = [ex.text for ex in read_split(eval_file)[: model_policy.serving.probe_examples]]
        with build.lock():
            model = OnnxModel(served, threads=1)
            probe_logits = model.logits(encode(build.merged, probe_texts, state.cache_dir("tokens")))
            artifact_sha256 = file_sha256(served)
        write_json(
            record.files.quantization,
            {
                "chosen": chosen,
                "why": why,
                "artifact": served.name,
                "artifact_id": served_id,
                "artifact_sha256": artifact_sha256,
                "calibration_sha256": calib_hash,
                "batch_dependent": model.batch_dependent,
                "tokenizer_sha256": tokenizer_hash(build.merged),
                "probe": {"batch": model.batch(BATCH), "texts": probe_texts, "logits": probe_logits.tolist()},
            },
        )
        speed = lambda v: f"{v:.0f}" if v is not None else "not timed (variant already decided)"  # noqa: E731
        rows = "\n".join(
            f"| {k} | {v['top1_agreement']:.2%} | {speed(v.get('items_per_s'))} | {v['size_mb']:.1f} |"
            for k, v in sorted(report["variants"].items())
        )
        table = (
            f"| variant | top-1 agreement vs FP32 | items/s ({SPEED_TEXTS} evaluation texts, buckets of {BATCH}) | MB"
            f" |\n|---|---|---|---|\n| fp32 | 100% | {speed(report.get('fp32_items_per_s'))} | {build.onnx.stat().st_size / 2**20:.1f}"
            f" |\n{rows}"
        )
        measured = {
            f"{v}_{k}": report["variants"][v][k]
            for v in report["variants"]
            for k in ("top1_agreement", "items_per_s")
            if k in report["variants"][v]
        }
        return StepResult(
            metadata={
                "chosen_variant": chosen,
                "artifact_sha256": artifact_sha256,
                "why": why,
                "top1_agreement": report["variants"][chosen]["top1_agreement"],
                **measured,
                "calibration_sha256": calib_hash,
                "fused_ops": Json(report["fused_ops"]),
                "variants": Md(table),
                "reused_from_cache": cached,
            },
            data_version=f"{build.key}-{chosen}",
        )

    def evaluate(self, record: CandidateRecord, state: State) -> StepResult:
        """Paired per-example correctness, so the accuracy gate can test candidate vs production on the same examples."""
        ref = record.ref
        build = record.build
        eval_file = state.split("evaluation")
        examples = read_split(eval_file)
        labels = labels_of(build.merged)
        truth = label_ids([ex.label for ex in examples], labels)
        cand = _correct(record, file_sha256(eval_file), truth)
        prod_record = record.baseline(state.root)
        prod = _correct(prod_record, file_sha256(eval_file), truth) if prod_record else None
        golden = record.effective_policy().golden
        golden_pred = []
        if golden:
            feeds = encode(build.merged, [g.text for g in golden])
            golden_pred = [labels[i] for i in predict(record.chosen_int8(), feeds)]
        arrays = {"candidate_int8": cand["int8"], "candidate_fp32": cand["fp32"]}
        if prod:
            arrays |= {"production_int8": prod["int8"], "production_fp32": prod["fp32"]}
        out = state.files(ref)
        np.savez(out.correctness, **arrays)
        report = {
            "examples": len(examples),
            "candidate_fp32_accuracy": float(cand["fp32"].mean()),
            "candidate_int8_accuracy": float(cand["int8"].mean()),
            "production": prod_record.ref.key if prod_record else None,
            "production_fp32_accuracy": float(prod["fp32"].mean()) if prod else None,
            "production_int8_accuracy": float(prod["int8"].mean()) if prod else None,
            "golden": [{"text": g.text, "expected": g.label, "predicted": p} for g, p in zip(golden, golden_pred)],
        }
        write_json(out.evaluation, report)
        rows = [f"| candidate {ref.key} | {report['candidate_fp32_accuracy']:.2%} | {report['candidate_int8_accuracy']:.2%} |"]
        if prod:
            rows.append(
                f"| production {prod_record.ref.key} | {report['production_fp32_accuracy']:.2%} |"
                f" {report['production_int8_accuracy']:.2%} |"
            )
        else:
            rows.append("| production | none yet | none yet |")
        return StepResult(
            metadata={
                "examples": len(examples),
                "candidate_fp32_accuracy": report["candidate_fp32_accuracy"],
                "candidate_int8_accuracy": report["candidate_int8_accuracy"],
                **({"production_int8_accuracy": report["production_int8_accuracy"]} if prod else {}),
                "production_version": prod_record.ref.key if prod_record else "none",
                "summary": Md("| model | FP32 accuracy | INT8 accuracy |\n|---|---|---|\n" + "\n".join(rows)),
            }
        )

    def drift(self, record: CandidateRecord, state: State, traffic_sample: str, reference_sample: str) -> StepResult:
        """Both drifts measured on the same traffic sample, with the INT8 models that would serve it."""
        ref = record.ref
        build = record.build
        cache = state.cache_dir("tokens")
        traffic_file = state.split(traffic_sample)
        traffic = [ex.text for ex in read_split(traffic_file)]
        reference = [ex.text for ex in read_split(state.split(reference_sample))]
        traffic_feeds = encode(build.merged, traffic, cache)
        reference_feeds = encode(build.merged, reference, cache)
        inputs = input_drift(describe(reference, reference_feeds["attention_mask"]), describe(traffic, traffic_feeds["attention_mask"]))
        traffic_sha256 = file_sha256(traffic_file)  # hashed once, for the candidate's and production's labels alike
        cand_labels = served_labels(record, traffic_sha256, traffic, cache)
        prod_record = record.baseline(state.root)
        pred_drift = None
        if prod_record:
            pred_drift = prediction_drift(served_labels(prod_record, traffic_sha256, traffic, cache), cand_labels)
        report = {
            "traffic_sample": traffic_sample,
            "reference_sample": reference_sample,
            "traffic_examples": len(traffic),
            "input_drift": inputs,
            "prediction_drift": pred_drift,
            "production": prod_record.ref.key if prod_record else None,
        }
        write_json(state.files(ref).drift, report)
        rows = "\n".join(f"| {k} | {v:.3f} |" for k, v in inputs.items())
        return StepResult(
            metadata={
                "traffic_sample": traffic_sample,
                **({"prediction_drift_js": pred_drift} if pred_drift is not None else {}),
                "max_input_drift": max(inputs.values()),
                "input_drift": Md(
                    f"normed Wasserstein, {traffic_sample} vs {reference_sample}\n\n| descriptor | distance |\n|---|---|\n{rows}"
                ),
            }
        )

    def live_input_drift(self, record: CandidateRecord, state: State, texts: list[str]) -> dict[str, float]:
        """Token counts by production's tokenizer, against the evaluation split (the drift gate's default reference)."""
        reference = [ex.text for ex in read_split(state.split("evaluation"))]
        merged = record.build.merged
        reference_feeds = encode(merged, reference, state.cache_dir("tokens"))
        window_feeds = encode(merged, texts)  # a live window is never seen twice: caching its tokens would only grow the cache
        return input_drift(describe(reference, reference_feeds["attention_mask"]), describe(texts, window_feeds["attention_mask"]))

    def benchmark(self, record: CandidateRecord, state: State) -> StepResult:
        """A B A B ... trials at batch 1 and 32, the ratio judged per CPU second (lib/inference/benchmark); a second round
        only when the first is inconclusive."""
        ref = record.ref
        prod_record = record.baseline(state.root)
        tp = record.effective_policy().throughput
        texts = [ex.text for ex in read_split(state.split("evaluation"))[:SAMPLE_TEXTS]]
        feeds = encode(record.build.merged, texts, state.cache_dir("tokens"))
        lengths = feeds["attention_mask"].sum(axis=1)
        # With nothing in production the candidate is paired with itself: the ratio then shows the noise floor.
        cand_path, prod_path = record.chosen_int8(), (prod_record or record).chosen_int8()
        cand, prod = OnnxModel(cand_path), OnnxModel(prod_path)
        # Production's own INT8 bytes, run on the same feeds, do the same work per item: the ratio is 1 by construction,
        # and a timing could only judge the machine's noise. One round still measures the p99 and the items/s the SLO and
        # the cost ceiling judge; no second round is added for a ratio that is not judged.
        cand_sha256 = file_sha256(cand_path)
        same_graph = cand_sha256 if prod_record and cand_sha256 == file_sha256(prod_path) else None
        results, plots = {}, {}
        for batch in (1, 32):
            run = paired_throughput(cand, prod, feeds, batch, tp.pairs)
            summary = summarize(run, tp.confidence)
            while not same_graph and summary["ratio_ci_low"] < tp.min_ratio <= summary["ratio_ci_high"] and len(run.ratios) < tp.max_pairs:
                run = merge_runs(run, paired_throughput(cand, prod, feeds, batch, min(tp.pairs, tp.max_pairs - len(run.ratios)), warmup=0))
                summary = summarize(run, tp.confidence)
            results[str(batch)] = summary | ({"same_graph_sha256": same_graph} if same_graph else {})
            if batch == 1:
                plots = {
                    f"candidate {ref.key}": run.candidate_latency_ms,
                    f"production {prod_record.ref.key if prod_record else '(self)'}": run.production_latency_ms,
                }
        shape = {"texts": len(texts), "median_tokens": float(np.median(lengths)), "max_tokens": int(lengths.max())}
        report = {
            "inputs": shape,
            "production": prod_record.ref.key if prod_record else None,
            "batches": results,
            "cost": cost_inputs("requests", results["32"], prod_record is not None),
        }
        write_json(state.files(ref).benchmark, report)
        rows = "\n".join(
            f"| {b} | {r['pairs']} | {r['candidate_items_per_s']:.0f} | {r['production_items_per_s']:.0f} | {r['ratio_median']:.3f}"
            f" [{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}] | {r['wall_ratio_median']:.3f} [{r['wall_ratio_ci_low']:.3f},"
            f" {r['wall_ratio_ci_high']:.3f}] | {r['candidate_p50_ms']:.2f} / {r['candidate_p99_ms']:.2f} | {r['production_p50_ms']:.2f} /"
            f" {r['production_p99_ms']:.2f} |"
            for b, r in results.items()
        )
        table = (
            "| batch | pairs | candidate items/s | production items/s | ratio per CPU s, median [CI] (judged) | wall ratio, median [CI] "
            "| candidate p50/p99 ms | production p50/p99 ms |\n|---|---|---|---|---|---|---|---|\n" + rows
        )
        return StepResult(
            metadata={
                "throughput_ratio_b32": results["32"]["ratio_median"],
                "throughput_ratio_b1": results["1"]["ratio_median"],
                "p99_ms_b1": results["1"]["candidate_p99_ms"],
                "p50_ms_b1": results["1"]["candidate_p50_ms"],
                "inputs": Json(shape),
                "production_version": prod_record.ref.key if prod_record else "none (self-paired)",
                "results": Md(table),
                "latency_b1": Md(
                    latency_plot_md(plots, f"batch 1, {len(texts)} evaluation texts, median {shape['median_tokens']:.0f} tokens")
                ),
            }
        )

    def throughput_verdict(self, record: CandidateRecord, state: State) -> Verdict:
        """Its own graph against production's, interleaved: the paired ratio at batch 1 and 32, and the p99 at batch 1."""
        report = read_json(record.files.benchmark)
        return judge_paired_speed(report["batches"], report["production"] is not None, record.effective_policy().throughput)

    def cost_verdict(self, record: CandidateRecord, state: State) -> Verdict:
        return judge_cost(read_json(record.files.benchmark)["cost"], record.effective_policy().cost)

    def fidelity_verdict(self, record: CandidateRecord, state: State) -> Verdict:
        """Top-1 agreement of the chosen INT8 variant with FP32 on the evaluation split."""
        build = record.build
        return judge_fidelity(
            np.load(build.predictions(record.chosen_artifact_id())),
            np.load(build.predictions("fp32")),
            record.effective_policy().int8_fidelity,
        )

    def quality_verdict(self, record: CandidateRecord, state: State) -> Verdict:
        """INT8 accuracy >= production's - tolerance, not significantly worse, and above the floor."""
        _, arrays = load_evaluation(record.files)
        return judge_accuracy(arrays["candidate_int8"], arrays.get("production_int8"), record.effective_policy().accuracy)

    def golden_verdict(self, record: CandidateRecord, state: State) -> Verdict:
        """Every golden inference test declared in the policy predicts its expected label."""
        report, _ = load_evaluation(record.files)
        cases = report["golden"]
        return judge_golden([c["predicted"] for c in cases], [c["expected"] for c in cases], [c["text"] for c in cases])

    def recheck(self, record: CandidateRecord, state: State, policy: Policy) -> Verdict:
        """Production's chosen INT8 model, two sessions of it timed in interleaved trials on the gate's evaluation texts,
        against the throughput its gate recorded, by the model's current policy."""
        tp = policy.throughput
        recorded = read_json(record.files.benchmark).get("batches") or {}
        texts = [ex.text for ex in read_split(state.split("evaluation"))[:SAMPLE_TEXTS]]
        feeds = encode(record.build.merged, texts, state.cache_dir("tokens"))
        path = record.chosen_int8()
        a, b = OnnxModel(path), OnnxModel(path)
        trials, latency_b1 = {}, []
        for batch in ("1", "32"):
            run = paired_throughput(a, b, feeds, int(batch), tp.pairs)
            trials[batch] = run.candidate_throughput + run.production_throughput
            if batch == "1":
                latency_b1 = run.candidate_latency_ms + run.production_latency_ms
        return judge_production_recheck(trials, latency_b1, {k: recorded.get(k) for k in trials}, tp)
