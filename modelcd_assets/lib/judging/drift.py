"""Drift with Evidently: text descriptors of traffic vs reference, and predicted-label drift."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

DESCRIPTORS = ("n_chars", "n_words", "n_tokens", "digit_share", "mean_word_length")


def describe(texts: list[str], attention_mask: np.ndarray) -> pd.DataFrame:
    """Numeric descriptors of each text; n_tokens counts real (non-padding) tokens."""
    words = [t.split() for t in texts]
    return pd.DataFrame(
        {
            "n_chars": [float(len(t)) for t in texts],
            "n_words": [float(len(w)) for w in words],
            "n_tokens": attention_mask.sum(axis=1).astype(float),
            "digit_share": [len(re.findall(r"\d", t)) / max(1, len(t)) for t in texts],
            "mean_word_length": [float(np.mean([len(x) for x in w])) if w else 0.0 for w in words],
        }
    )


def _value_drift(
    reference: pd.DataFrame, current: pd.DataFrame, numeric: list[str], categorical: list[str], method_num: str, method_cat: str
) -> dict[str, float]:
    from evidently import DataDefinition, Dataset, Report
    from evidently.metrics import ValueDrift

    definition = DataDefinition(numerical_columns=numeric, categorical_columns=categorical)
    metrics = [ValueDrift(column=c, method=method_num) for c in numeric] + [ValueDrift(column=c, method=method_cat) for c in categorical]
    snapshot = Report(metrics).run(
        Dataset.from_pandas(current, data_definition=definition), Dataset.from_pandas(reference, data_definition=definition)
    )
    values = {}
    for m in snapshot.dict()["metrics"]:
        values[m["config"]["column"]] = float(m["value"])
    return values


def input_drift(reference: pd.DataFrame, current: pd.DataFrame) -> dict[str, float]:
    """Normed Wasserstein distance of each descriptor, current traffic vs reference data."""
    cols = list(DESCRIPTORS)
    return _value_drift(reference[cols], current[cols], cols, [], "wasserstein", "jensenshannon")


def prediction_drift(production_labels: list[str], candidate_labels: list[str]) -> float:
    """Jensen-Shannon distance between production's and the candidate's predicted labels on the same traffic."""
    ref = pd.DataFrame({"prediction": production_labels})
    cur = pd.DataFrame({"prediction": candidate_labels})
    if set(production_labels) == set(candidate_labels) and len(set(production_labels)) == 1 and production_labels == candidate_labels:
        return 0.0  # Evidently's histogram needs two categories; identical single-label outputs do not drift
    return _value_drift(ref, cur, [], ["prediction"], "wasserstein", "jensenshannon")["prediction"]


def length_drift(production_lengths: list[float], candidate_lengths: list[float]) -> float:
    """How far the candidate's response lengths moved from production's on the same traffic: the Wasserstein distance of
    the two length distributions over production's mean length (0.1: responses about 10% longer or shorter). Scaled by
    the mean, not by the spread as Evidently's normed Wasserstein is: greedy answers of one model vary little in length,
    so one response a token longer would read as drift."""
    from scipy.stats import wasserstein_distance

    if not len(production_lengths) or not len(candidate_lengths):
        return float("nan")
    return float(wasserstein_distance(production_lengths, candidate_lengths) / max(float(np.mean(production_lengths)), 1.0))
