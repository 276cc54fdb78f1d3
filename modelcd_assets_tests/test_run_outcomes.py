"""A run's outcome is decided by the type of the exception its failed step raised, never by the text of its message (issue 28)."""

import pytest

from modelcd_assets.launch import BAD_INPUT, ERROR, REGISTRY_UNAVAILABLE, SUPERSEDED, StepError
from modelcd_assets.lib.errors import BadCandidate, ModelcdError, RegistryUnavailable, Superseded
from modelcd_assets.lib.release.alias_lock import AliasLockUnavailable, AliasMoveLost
from modelcd_assets.lib.release.registry import NotInRegistry
from modelcd_assets.lib.release.servable import NotServable
from modelcd_assets.lib.release.signing import BadSignature, FilesChanged, MissingKey


@pytest.mark.parametrize(
    "cls, outcome",
    [
        (Superseded, SUPERSEDED),
        (RegistryUnavailable, REGISTRY_UNAVAILABLE),
        (ModelcdError, BAD_INPUT),
        (BadCandidate, BAD_INPUT),
        (BadSignature, BAD_INPUT),
        (FilesChanged, BAD_INPUT),
        (MissingKey, BAD_INPUT),
        (NotServable, BAD_INPUT),
        (NotInRegistry, BAD_INPUT),
        (AliasMoveLost, ERROR),
        (AliasLockUnavailable, ERROR),
        (ValueError, ERROR),
        (RuntimeError, ERROR),
    ],
)
def test_the_outcome_follows_the_exception_type(cls, outcome):
    error = StepError("production_model", cls.__name__, "whatever it says", cls.__module__)
    assert error.outcome == outcome
    assert error.type is (None if cls in (AliasMoveLost, AliasLockUnavailable, ValueError, RuntimeError) else cls)


def test_mlflow_errors_that_reach_a_run_are_registry_unavailable():
    assert StepError("candidate", "MlflowException", "database is locked", "mlflow.exceptions").outcome == REGISTRY_UNAVAILABLE
    assert StepError("candidate", "RestException", "503", "mlflow.exceptions").outcome == REGISTRY_UNAVAILABLE


def test_a_class_of_the_same_name_elsewhere_decides_nothing():
    assert StepError("candidate", "BadCandidate", "x", "another_library.errors").outcome == ERROR
    assert StepError("candidate", "BadCandidate", "x", "modelcd_assets.lib.errors").outcome == BAD_INPUT
    assert StepError("candidate", "NoSuchError", "x", "modelcd_assets.lib.errors").outcome == ERROR


@pytest.mark.parametrize(
    "message", ["BadCandidate: the tokenizer", "Superseded by 4", "RegistryUnavailable: MlflowException", "ModelcdError"]
)
def test_a_message_that_names_an_exception_does_not_change_the_outcome(message):
    """Before, launch._judge searched the failure's text for these names: a crash whose message quoted one read as bad input,
    superseded or registry unavailable."""
    assert StepError("drift_report", "KeyError", message).outcome == ERROR
    assert StepError("drift_report", "ModelcdError", message, "modelcd_assets.lib.errors").outcome == BAD_INPUT
