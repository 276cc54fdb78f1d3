"""Gates on numerical and structural health, judged on merged_model's health report before export."""

import dagster as dg

from modelcd_assets.defs.assets.merged_model import merged_model
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.builds import read_json
from modelcd_assets.lib.judging import gates
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource


def _health_check(name: str, judge) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=merged_model, name=name, blocking=True, partitions_def=candidates, description=judge.__doc__)
    def _check(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
        return check_result(judge(read_json(state.files(CandidateRef.parse(context.partition_key)).health)))

    return _check


weights_are_finite = _health_check("weights_are_finite", gates.judge_weights_finite)


@dg.asset_check(asset=merged_model, blocking=True, partitions_def=candidates, description=gates.judge_weight_scale.__doc__)
def weights_within_scale(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    ref = CandidateRef.parse(context.partition_key)
    report = read_json(state.files(ref).health)
    record = state.record(ref)
    return check_result(
        gates.judge_weight_scale(report, record.effective_policy().health, has_production=record.production_version is not None)
    )


model_loads_cleanly = _health_check("model_loads_cleanly", gates.judge_loads_cleanly)
adapter_fits_base = _health_check("adapter_fits_base", gates.judge_adapter_fits_base)
adapter_changes_outputs = _health_check("adapter_changes_outputs", gates.judge_adapter_changes_outputs)
tokenizer_fits_model = _health_check("tokenizer_fits_model", gates.judge_tokenizer)
outputs_are_finite_and_deterministic = _health_check("outputs_are_finite_and_deterministic", gates.judge_probe)
gradients_are_finite = _health_check("gradients_are_finite", gates.judge_gradients)
