"""The urgency-score task: an encoder with a one-output regression head, trained on the tickets' intents mapped to urgency.

It reuses what a classifier does where the work is the same (an encoder folder, its ONNX export and contract, INT8 by ONNX
Runtime, the interleaved speed trials and their cost) through the public Task API, and brings its own measures where the
kind of model differs: INT8 fidelity as the largest score difference from FP32, quality as the paired absolute error
against production, output drift over score bins. Its thresholds are a policy section of its own (`urgency`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.inference.builds import read_json, save_array, write_json
from modelcd_assets.lib.inference.runtime import OnnxModel
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.judging.drift import prediction_drift
from modelcd_assets.lib.judging.gates import FAIL, PASS, Verdict
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.splits import read_split
from modelcd_assets.lib.tasks.classification import ClassificationTask
from modelcd_assets.lib.tasks.names import Gate, TaskDeclaration, declare_task
from modelcd_assets.lib.tasks.task import Md, State, StepResult

NAME = "urgency-score"
POLICY_SECTION = "urgency"
# What a ticket's intent says of its urgency: the score the head is trained and judged on.
URGENCY = {"billing": 0.5, "technical": 0.8, "shipping": 0.6, "account": 0.3}
SCORE_BINS = np.linspace(0.0, 1.0, 11)


def urgency(label: str) -> float:
    if label not in URGENCY:
        raise ValueError(f"no urgency for intent {label!r}; the urgency task knows {', '.join(URGENCY)}")
    return URGENCY[label]


class UrgencyPolicy(BaseModel):
    """The `urgency` section of a model's policy file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_mae: float = Field(0.2, gt=0, description="Ceiling on the INT8 model's mean absolute error on the evaluation split.")
    max_mae_increase: float = Field(
        0.01, ge=0, description="How far the candidate's mean absolute error may rise above production's on the same examples."
    )
    max_int8_abs_diff: float = Field(0.05, gt=0, description="Largest |INT8 score - FP32 score| on the evaluation split.")


def _scores_file(record: CandidateRecord, which: str) -> Path:
    return record.build.predictions(f"scores_{which}")


class UrgencyTask(ClassificationTask):
    name = NAME

    def quantize(self, record: CandidateRecord, state: State) -> StepResult:
        """The classifier's INT8 build and choice, then the FP32 and chosen INT8 scores on the evaluation split."""
        result = super().quantize(record, state)
        texts = [ex.text for ex in read_split(state.split("evaluation"))]
        feeds = encode(record.build.merged, texts, state.cache_dir("tokens"))
        with record.build.lock():
            for which, model in (("fp32", record.build.onnx), (record.chosen_artifact_id(), record.chosen_int8())):
                if not _scores_file(record, which).is_file():
                    save_array(_scores_file(record, which), OnnxModel(model).logits(feeds)[:, 0])
        diff = float(np.abs(self._scores(record, "int8") - self._scores(record, "fp32")).max())
        return StepResult({**result.metadata, "int8_max_abs_score_diff": diff}, result.data_version)

    def _scores(self, record: CandidateRecord, which: str) -> np.ndarray:
        path = _scores_file(record, record.chosen_artifact_id() if which == "int8" else which)
        if not path.is_file():
            raise FileNotFoundError(f"{record.ref.uri} has no {which} scores ({path}); re-run its quantized_model")
        return np.load(path)

    def fidelity_verdict(self, record: CandidateRecord, state: State) -> Verdict:
        limit = record.effective_policy().section(POLICY_SECTION).max_int8_abs_diff
        diff = float(np.abs(self._scores(record, "int8") - self._scores(record, "fp32")).max())
        ok = diff <= limit
        return Verdict(
            "int8_fidelity",
            PASS if ok else FAIL,
            f"{diff:.4f}",
            f"<= {limit}",
            f"the INT8 scores are at most {diff:.4f} from FP32's on the evaluation split ({'<=' if ok else '>'} {limit})",
            {"max_abs_diff": diff, "threshold": limit},
        )

    def evaluate(self, record: CandidateRecord, state: State) -> StepResult:
        """Paired per-example absolute errors of the candidate's and production's INT8 scores."""
        examples = read_split(state.split("evaluation"))
        truth = np.array([urgency(ex.label) for ex in examples])
        errors = {"candidate": np.abs(self._scores(record, "int8") - truth)}
        production = record.baseline(state.root)
        if production is not None:
            errors["production"] = np.abs(self._scores(production, "int8") - truth)
        report = {
            "examples": len(examples),
            "production": production.ref.key if production else None,
            "evaluation_sha256": file_sha256(state.split("evaluation")),
            **{f"{k}_abs_error": v.tolist() for k, v in errors.items()},
        }
        write_json(state.files(record.ref).evaluation, report)
        rows = "\n".join(f"| {k} | {v.mean():.4f} |" for k, v in errors.items())
        return StepResult(
            {
                "examples": len(examples),
                **{f"{k}_mae": float(v.mean()) for k, v in errors.items()},
                "summary": Md("| model | MAE (INT8) |\n|---|---|\n" + rows),
            }
        )

    def quality_verdict(self, record: CandidateRecord, state: State) -> Verdict:
        """Candidate MAE under the ceiling, and not above production's by more than the tolerance, paired per example."""
        policy = record.effective_policy().section(POLICY_SECTION)
        report = read_json(state.files(record.ref).evaluation)
        cand = np.array(report["candidate_abs_error"])
        mae = float(cand.mean())
        numbers = {"candidate_mae": mae, "max_mae": policy.max_mae}
        problems = [f"MAE {mae:.4f} > ceiling {policy.max_mae}"] if mae > policy.max_mae else []
        measured, threshold = f"MAE {mae:.4f}", f"<= {policy.max_mae}"
        if report.get("production_abs_error") is not None:
            paired = cand - np.array(report["production_abs_error"])
            rise = float(paired.mean())
            numbers |= {"mae_increase": rise, "max_mae_increase": policy.max_mae_increase, "worse_examples": int((paired > 0).sum())}
            measured += f", {rise:+.4f} vs production on the same {len(paired)} examples"
            threshold += f", <= production + {policy.max_mae_increase}"
            if rise > policy.max_mae_increase:
                problems.append(f"MAE rose {rise:+.4f} over production's, more than {policy.max_mae_increase}")
        reason = "; ".join(problems) or f"{measured}: within {threshold}"
        return Verdict("paired_absolute_error", FAIL if problems else PASS, measured, threshold, reason, numbers)

    def drift(self, record: CandidateRecord, state: State, traffic_sample: str, reference_sample: str) -> StepResult:
        """The classifier's input drift; output drift as the Jensen-Shannon distance of production's and the candidate's
        INT8 scores on the same traffic, in bins of 0.1."""
        result = super().drift(record, state, traffic_sample, reference_sample)
        traffic = [ex.text for ex in read_split(state.split(traffic_sample))]
        feeds = encode(record.build.merged, traffic, state.cache_dir("tokens"))
        path = state.files(record.ref).drift
        report = json.loads(path.read_text())
        production = record.baseline(state.root)
        score_drift = None
        if production is not None:
            bins = [
                [f"{b:.1f}" for b in SCORE_BINS[np.digitize(OnnxModel(r.chosen_int8()).logits(feeds)[:, 0], SCORE_BINS[1:-1])]]
                for r in (production, record)
            ]
            score_drift = prediction_drift(bins[0], bins[1])
        report["prediction_drift"] = score_drift
        write_json(path, report)
        metadata = {k: v for k, v in result.metadata.items() if k != "prediction_drift_js"}
        return StepResult({**metadata, **({"score_drift_js": score_drift} if score_drift is not None else {})}, result.data_version)


def train_regressor(base_dir: Path, out_dir: Path, examples, steps: int = 120, seed: int = 0, learning_rate: float = 3e-3) -> Path:
    """Fine-tune a one-output encoder on the examples' urgency by mean squared error; a full model folder."""
    import torch

    from modelcd_assets.lib.classifier.model_io import copy_tokenizer, load_classifier, load_tokenizer

    torch.manual_seed(seed)
    model, tok = load_classifier(base_dir), load_tokenizer(base_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    rng = np.random.default_rng(seed)
    model.train()
    for _ in range(steps):
        batch = [examples[i] for i in rng.integers(0, len(examples), 32)]
        feeds = tok([ex.text for ex in batch], padding=True, truncation=True, max_length=64, return_tensors="pt")
        loss = model(**feeds, labels=torch.tensor([urgency(ex.label) for ex in batch])).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    copy_tokenizer(base_dir, Path(out_dir))
    return Path(out_dir)


declare_task(
    TaskDeclaration(
        NAME,
        f"{__name__}:UrgencyTask",
        gates=(
            Gate(
                "int8_agrees_with_fp32",
                "quantized_model",
                "fidelity_verdict",
                "INT8 scores within a bound of FP32's.",
                "int8_fidelity",
                (POLICY_SECTION,),
            ),
            Gate(
                "absolute_error_within_tolerance",
                "evaluation",
                "quality_verdict",
                "INT8 mean absolute error under the ceiling and within tolerance of production's, paired per example.",
                "quality",
                (POLICY_SECTION,),
            ),
            Gate(
                "throughput_within_tolerance",
                "benchmark_results",
                "throughput_verdict",
                "The paired speed ratio at batch 1 and 32.",
                "speed",
                ("throughput",),
            ),
            Gate("cost_within_budget", "benchmark_results", "cost_verdict", "Cost per 1,000 requests.", "cost", ("cost",)),
        ),
        policy_sections=("quantization", "calibration"),
        policy_models=((POLICY_SECTION, f"{__name__}:UrgencyPolicy"),),
        contract="modelcd_assets.lib.classifier.contract:diff_classifier_contracts",
        served="modelcd_assets.lib.classifier.served:classifier_served",
        subjects=("registered-files", "int8-model", "tokenizer", "calibration-set"),
    )
)
