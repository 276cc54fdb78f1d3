"""drift_report: Evidently drift of candidate vs production predictions on traffic, and of traffic vs reference."""

from pathlib import Path

import dagster as dg
import numpy as np
from pydantic import Field

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.inference.builds import save_array, write_json
from modelcd_assets.lib.inference.evaluate import predict
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.judging.drift import describe, input_drift, prediction_drift
from modelcd_assets.lib.model.config import labels_of
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.splits import read_split
from modelcd_assets.resources.state import LocalStateResource


class DriftConfig(dg.Config):
    traffic_sample: str = Field("traffic_current", description="Name of the traffic split in the data folder to judge drift on")
    reference_sample: str = Field("evaluation", description="Name of the split the model was validated on")


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


@dg.asset(partitions_def=candidates, deps=[quantized_model], group_name="evaluation", kinds={"evidently"})
def drift_report(context: dg.AssetExecutionContext, config: DriftConfig, state: LocalStateResource) -> dg.MaterializeResult:
    """Both drifts measured on the same traffic sample, with the INT8 models that would serve it."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
    build = record.build
    cache = state.cache_dir("tokens")
    traffic_file = state.split(config.traffic_sample)
    traffic = [ex.text for ex in read_split(traffic_file)]
    reference = [ex.text for ex in read_split(state.split(config.reference_sample))]
    traffic_feeds = encode(build.merged, traffic, cache)
    reference_feeds = encode(build.merged, reference, cache)
    inputs = input_drift(describe(reference, reference_feeds["attention_mask"]), describe(traffic, traffic_feeds["attention_mask"]))
    traffic_sha256 = file_sha256(traffic_file)  # hashed once, for the candidate's and production's labels alike
    cand_labels = served_labels(record, traffic_sha256, traffic, cache)
    prod_record = record.baseline(state.root)
    pred_drift = None
    if prod_record:
        pred_drift = prediction_drift(served_labels(prod_record, traffic_sha256, traffic, cache), cand_labels)
    report = {"traffic_sample": config.traffic_sample, "reference_sample": config.reference_sample, "traffic_examples": len(traffic),
              "input_drift": inputs, "prediction_drift": pred_drift, "production": prod_record.ref.key if prod_record else None}
    write_json(state.files(ref).drift, report)
    rows = "\n".join(f"| {k} | {v:.3f} |" for k, v in inputs.items())
    return dg.MaterializeResult(
        metadata={
            "traffic_sample": config.traffic_sample,
            **({"prediction_drift_js": pred_drift} if pred_drift is not None else {}),
            "max_input_drift": max(inputs.values()),
            "input_drift": dg.MetadataValue.md(f"normed Wasserstein, {config.traffic_sample} vs {config.reference_sample}\n\n| descriptor | distance |\n|---|---|\n{rows}"),
        }
    )
