"""evaluation: FP32 and INT8 accuracy on the evaluation split, for the candidate and for production."""


import dagster as dg
import numpy as np

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.inference.builds import read_json, write_json
from modelcd_assets.lib.inference.evaluate import label_ids, predict
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.model.config import labels_of
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.splits import read_split
from modelcd_assets.resources.state import LocalStateResource


def _correct(record: CandidateRecord, eval_hash: str, truth: np.ndarray) -> dict[str, np.ndarray]:
    """Per-example correctness of a candidate's FP32 and chosen INT8 model."""
    build = record.build
    if read_json(record.quantization_report).get("evaluation_sha256") != eval_hash:
        raise FileNotFoundError(f"build {build.key} was evaluated on another evaluation split; re-materialize its quantized_model")
    files = {"fp32": build.predictions("fp32"), "int8": build.predictions(record.chosen_artifact_id())}
    if missing := [str(f) for f in files.values() if not f.is_file()]:
        raise FileNotFoundError(f"{record.ref.uri}'s build {build.key} lacks its recorded predictions ({', '.join(missing)}); "
                                f"re-gate it with 'modelcd gate {record.ref.name} {record.ref.version}'")
    return {k: np.load(f) == truth for k, f in files.items()}


@dg.asset(partitions_def=candidates, deps=[quantized_model], group_name="evaluation", kinds={"onnx"})
def evaluation(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """Paired per-example correctness, so the accuracy gate can test candidate vs production on the same examples."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
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
        rows.append(f"| production {prod_record.ref.key} | {report['production_fp32_accuracy']:.2%} | {report['production_int8_accuracy']:.2%} |")
    else:
        rows.append("| production | none yet | none yet |")
    return dg.MaterializeResult(
        metadata={
            "examples": len(examples),
            "candidate_fp32_accuracy": report["candidate_fp32_accuracy"],
            "candidate_int8_accuracy": report["candidate_int8_accuracy"],
            **({"production_int8_accuracy": report["production_int8_accuracy"]} if prod else {}),
            "production_version": prod_record.ref.key if prod_record else "none",
            "summary": dg.MetadataValue.md("| model | FP32 accuracy | INT8 accuracy |\n|---|---|---|\n" + "\n".join(rows)),
        }
    )
