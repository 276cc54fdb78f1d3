"""onnx_model: FP32 ONNX export of the merged model, with a parity check against torch."""

import time

import dagster as dg

from modelcd_assets.defs.assets.merged_model import merged_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.builds import read_json, write_json
from modelcd_assets.lib.candidate import CandidateRecord
from modelcd_assets.lib.data import read_split
from modelcd_assets.lib.export import OPSET, check_parity, export_onnx, torch_logits
from modelcd_assets.lib.registry import CandidateRef
from modelcd_assets.lib.runtime import logits, session
from modelcd_assets.lib.tokens import encode
from modelcd_assets.resources.state import LocalStateResource

PARITY_EXAMPLES = 64
MAX_LENGTH = 64


@dg.asset(partitions_def=candidates, deps=[merged_model], group_name="build", kinds={"onnx"})
def onnx_model(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """Exported once per build; parity is max |logit diff| torch vs ONNX on evaluation examples."""
    record = CandidateRecord.load(state.candidate_dir(CandidateRef.parse(context.partition_key)))
    build = record.build
    report_path = build.dir / "onnx_export.json"
    start = time.perf_counter()
    cached = build.onnx.is_file() and report_path.is_file()
    if cached:
        report = read_json(report_path)
    else:
        export_onnx(build.merged, build.onnx)
        texts = [ex.text for ex in read_split(state.split("evaluation"))[:PARITY_EXAMPLES]]
        feeds = encode(build.merged, texts, MAX_LENGTH, state.cache_dir("tokens"))
        try:
            diff = check_parity(torch_logits(build.merged, feeds), logits(session(build.onnx), feeds))
        except Exception:
            build.onnx.unlink(missing_ok=True)
            raise
        report = {"parity_max_abs_diff": diff, "opset": OPSET, "parity_examples": len(texts)}
        write_json(report_path, report)
    return dg.MaterializeResult(
        metadata={
            "parity_max_abs_logit_diff": float(report["parity_max_abs_diff"]),
            "opset": report["opset"],
            "size_mb": round(build.onnx.stat().st_size / 2**20, 2),
            "reused_from_cache": cached,
            "seconds": round(time.perf_counter() - start, 2),
        },
        data_version=dg.DataVersion(build.key),
    )
