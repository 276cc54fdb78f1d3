"""onnx_model: FP32 ONNX export of the merged model, with a parity check against torch."""

import json
import time

import dagster as dg

from modelcd_assets.defs.assets.merged_model import merged_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.builds import read_json, write_json
from modelcd_assets.lib.inference.runtime import logits, session
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.judging.contract import bump, changes_to_dicts, diff_contracts, extract_contract, level_between, required_level
from modelcd_assets.lib.model.export import OPSET, check_parity, export_onnx, torch_logits
from modelcd_assets.lib.release.registry import BUMP_DECLARED, CONTRACT, SEMVER, SEMVER_DECLARED, CandidateRef
from modelcd_assets.lib.splits import read_split
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

FIRST_SEMVER = "1.0.0"


def semver_report(contract: dict, tags: dict, prod_tags: dict | None, token_ids_changed: bool, regating_production: bool = False) -> dict:
    """The contract diff against production, the bump it requires, and the bump this version declared."""
    declared_semver, declared_bump = tags.get(SEMVER_DECLARED), tags.get(BUMP_DECLARED)
    if regating_production and SEMVER in tags:  # production judged again: it keeps its version
        return {"contract": contract, "changes": [], "required_level": "patch", "declared_level": "patch", "declared": tags[SEMVER],
                "semver": tags[SEMVER], "production_semver": tags[SEMVER]}
    if prod_tags is None or CONTRACT not in prod_tags:
        semver = declared_semver or FIRST_SEMVER
        return {"contract": contract, "changes": [], "required_level": "patch", "declared_level": None, "declared": semver, "semver": semver, "production_semver": None}
    prod_semver = prod_tags.get(SEMVER, FIRST_SEMVER)
    changes = diff_contracts(json.loads(prod_tags[CONTRACT]), contract, token_ids_changed)
    if declared_semver:
        level, semver = level_between(prod_semver, declared_semver), declared_semver
    else:
        level = declared_bump or "patch"  # undeclared means weights only
        semver = bump(prod_semver, level)
    return {"contract": contract, "changes": changes_to_dicts(changes), "required_level": required_level(changes), "declared_level": level,
            "declared": declared_semver or f"{level} bump", "semver": semver, "production_semver": prod_semver}

PARITY_EXAMPLES = 64


@dg.asset(partitions_def=candidates, deps=[merged_model], group_name="build", kinds={"onnx"})
def onnx_model(context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource) -> dg.MaterializeResult:
    """Exported once per build; parity is max |logit diff| torch vs ONNX on evaluation examples; the I/O contract is recorded."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
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
    reg = registry.registry()
    prod = record.baseline_ref
    health = read_json(state.files(ref).health)
    contract = extract_contract(build.onnx, build.merged)
    semver = semver_report(contract, reg.tags(ref), reg.tags(prod) if prod else None,
                           bool(health.get("tokenizer", {}).get("probe_id_mismatches")), regating_production=prod == ref)
    write_json(state.files(ref).contract, semver)
    reg.set_tags(ref, {CONTRACT: json.dumps(contract, sort_keys=True), SEMVER: semver["semver"]})
    return dg.MaterializeResult(
        metadata={
            "parity_max_abs_logit_diff": float(report["parity_max_abs_diff"]),
            "opset": report["opset"],
            "size_mb": round(build.onnx.stat().st_size / 2**20, 2),
            "reused_from_cache": cached,
            "seconds": round(time.perf_counter() - start, 2),
            "semver": semver["semver"],
            "contract_changes": dg.MetadataValue.md("\n".join(f"- {c['level'].upper()}: {c['what']}" for c in semver["changes"]) or "none (weights only)"),
            "contract": dg.MetadataValue.json(contract),
        },
        data_version=dg.DataVersion(build.key),
    )
