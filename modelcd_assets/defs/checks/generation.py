"""Gate on generation health (causal LMs): greedy generations are finite, stop at EOS, and do not loop."""

import dagster as dg

from modelcd_assets.defs.assets.evaluation import evaluation
from modelcd_assets.defs.checks.verdict import check_result, for_tasks, not_applicable
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.causal_lm import CausalLmTask
from modelcd_assets.lib.tasks.names import CAUSAL_LM
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=evaluation, blocking=True, partitions_def=candidates, metadata=for_tasks(CAUSAL_LM))
def generation_is_healthy(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Greedy generation on the golden and probe prompts: finite logits, EOS within max_new_tokens, repeated n-grams bounded."""
    record = state.record(CandidateRef.parse(context.partition_key))
    if record.task != CAUSAL_LM:
        return not_applicable("generation_is_healthy", record.task)
    return check_result(CausalLmTask().generation_verdict(record, state))
