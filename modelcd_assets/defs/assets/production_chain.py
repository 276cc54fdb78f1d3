"""production_chain: every production model's chain of alias moves, audited back to its first version, nightly."""

import dagster as dg

from modelcd_assets.lib.judging.gates import FAIL, PASS, Verdict
from modelcd_assets.lib.release.chain_audit import audit
from modelcd_assets.lib.release.monitoring import recorded
from modelcd_assets.resources.registry import MlflowRegistryResource

METHOD = (
    "modelcd.previous_production walked from production back to the first version; each move checked against its "
    "modelcd.promotion record (judged against the version it moved from, or a rollback from it) and, for a promotion, its "
    "signed attestation (same version, same baseline, same run); no version may stay tagged as promoted outside the chain. "
    "A registry that does not answer fails the run: not checked is never intact."
)


def _verdict(found) -> Verdict:
    return Verdict(
        "production_chain",
        PASS if found.intact else FAIL,
        " <- ".join(found.chain),
        "every move backed by its record and attestation",
        found.shown,
        found.to_dict(),
    )


@dg.asset(group_name="monitoring", kinds={"mlflow"})
def production_chain(context: dg.AssetExecutionContext, registry: MlflowRegistryResource) -> dg.MaterializeResult:
    """The audit `modelcd audit` prints, for every model with a production version (lib/release/chain_audit.py)."""
    reg = registry.registry()
    productions = reg.productions()
    verdicts = {}
    for model in productions:
        verdicts[model] = _verdict(audit(reg, model))
        context.log.info(verdicts[model].reason)
    rows = "\n".join(
        f"| {m} | {v.measured or 'none'} | {v.status} | {'; '.join(v.numbers['problems']) or v.numbers['unseen'] or 'none'} |"
        for m, v in verdicts.items()
    )
    return dg.MaterializeResult(
        metadata={
            "models": len(verdicts),
            "method": METHOD,
            "results": dg.MetadataValue.md(
                "| model | chain (production first) | status | problems |\n|---|---|---|---|\n" + rows
                if verdicts
                else "no registered model has a production version: no chain to audit"
            ),
            # What production_chain_is_intact judges, exactly as decided here.
            "verdicts": dg.MetadataValue.json(recorded(productions, verdicts)),
        }
    )
