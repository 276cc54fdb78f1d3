"""calibration_set: a registered model's calibration set for static INT8, validated and versioned by content hash."""

from pathlib import Path

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.inference.tokens import TextEncoder
from modelcd_assets.lib.release.attestation import CALIBRATION_SET
from modelcd_assets.lib.release.calibration import BadCalibrationSet, inline_texts, read_texts, validate
from modelcd_assets.lib.splits import read_split
from modelcd_assets.lib.tasks.names import declaration_of
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


class CalibrationSetConfig(dg.Config):
    model: str = Field(
        "",
        description=(
            "Registered model the set is for. Empty: version the data folder's calibration split, "
            "the set of every model that has none of its own."
        ),
    )
    source: str = Field("", description='With model: a JSON-lines file on this machine, one {"text": ...} object per line.')
    texts: list[str] = Field(
        default_factory=list,
        description=(
            "With model, instead of source: the set's texts inline, for a client on another machine (the UI's launchpad, Dagster's "
            "launchRun mutation). Bounded by the policy's calibration.max_examples and max_text_chars, and validated as a file is."
        ),
    )


@dg.asset(group_name="data", kinds={"json"})
def calibration_set(
    context: dg.AssetExecutionContext,
    config: CalibrationSetConfig,
    state: LocalStateResource,
    registry: MlflowRegistryResource,
    policy: PolicyResource,
) -> dg.MaterializeResult:
    """A model's new calibration set: refused with every reason (and the current set kept) unless it passes validation;
    accepted, it is frozen under its sha256 and becomes the model's current set, which calibration_revision acts on."""
    sets = state.calibration_sets()
    if not config.model:
        if config.source or config.texts:
            given = "a source file" if config.source else "inline texts"
            raise ModelcdError(f"calibration_set got {given} but no model; set config.model to the registered model the set is for")
        digest = state.default_calibration()
        return dg.MaterializeResult(
            metadata={
                "model": "(default: every model without a set of its own)",
                "sha256": digest,
                "examples": len(read_texts(sets.path(digest))),
                "path": dg.MetadataValue.path(str(sets.path(digest))),
            },
            data_version=dg.DataVersion(digest[:16]),
        )
    reg = registry.registry()
    reg.require_candidate_model(config.model)
    production = reg.production(config.model)
    if production is None:
        raise ModelcdError(
            f"{config.model} has no production version yet: a calibration set is judged against production's tokenizer and "
            "re-quantizes production; gate a first version (it is calibrated with the data folder's split), then register the set"
        )
    if CALIBRATION_SET not in declaration_of(task := reg.task(production)).subjects:
        raise ModelcdError(
            f"{config.model} is a {task} model, whose INT8 is not calibrated on texts (a causal LM's base is weight-only, 8-bit "
            "MatMulNBits, with no activation ranges to calibrate), so it has no calibration set; its INT8 fidelity is judged by "
            "int8_agrees_with_fp32 on every version"
        )
    if bool(config.source) == bool(config.texts):
        raise BadCalibrationSet(
            "calibration_set takes the set's texts from config.source (a JSON-lines file on this machine) or config.texts (inline), "
            f"one of the two; got {'both' if config.source else 'neither'}"
        )
    if config.source:
        source = str(Path(config.source).expanduser())
        texts = read_texts(Path(source))
    else:
        source = f"the inline calibration set ({len(config.texts)} texts)"
        texts = inline_texts(config.texts, source)
    evaluation = [ex.text for ex in read_split(state.split("evaluation"))]
    summary = validate(
        texts,
        evaluation,
        TextEncoder(state.record(production).build.merged).lengths,
        policy.for_model(config.model).calibration,
        source=source,
    )
    previous = reg.calibration_of(config.model)
    digest = sets.save(Path(source)) if config.source else sets.save_texts(texts)
    reg.set_calibration(config.model, digest)
    context.log.info(
        f"{config.model}: calibration set {digest[:12]} is current (was {previous[:12] if previous else 'the data folder split'})"
    )
    return dg.MaterializeResult(
        metadata={
            "model": config.model,
            "sha256": digest,
            "previous_sha256": previous or "(the data folder's calibration split)",
            "examples": summary.examples,
            "median_tokens": summary.median_tokens,
            "evaluation_median_tokens": summary.evaluation_median_tokens,
            "source": source,
            "path": dg.MetadataValue.path(str(sets.path(digest))),
        },
        data_version=dg.DataVersion(digest[:16]),
    )
