"""The Helm values validate against the repository's JSON schema, which lets no unknown key through."""

import copy
import json

import dagster as dg
import jsonschema
import pytest

from modelcd_assets_tests.k8s.files import K8S, VALUES, VALUES_SCHEMA, load_yaml

SCHEMA = json.loads(VALUES_SCHEMA.read_text())


def errors(values: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return [f"{'.'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message}" for e in validator.iter_errors(values)]


def test_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_values_file_validates_against_the_schema():
    assert errors(load_yaml(VALUES)) == []


def _with(path: list, value) -> dict:
    values = copy.deepcopy(load_yaml(VALUES))
    node = values
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return values


@pytest.mark.parametrize(
    "path",
    [
        ["unknownTopLevel"],
        ["dagsterDaemon", "runRetries", "retry_on_asset_or_op_failure"],  # the snake_case spelling the chart ignores
        ["postgresql", "postgresqlPassword"],  # a password literal cannot get in as a value
        ["runLauncher", "config", "k8sRunLauncher", "runK8sConfig", "containerConfig", "env"],
        ["dagster-user-deployments", "deployments", 0, "command"],
    ],
)
def test_values_with_an_unknown_key_fail(path):
    found = errors(_with(path, False if path[-1].startswith("retry") else "x"))
    assert any("Additional properties are not allowed" in e for e in found), found


def test_values_that_retry_failed_gates_fail():
    found = errors(_with(["dagsterDaemon", "runRetries", "retryOnAssetOrOpFailure"], True))
    assert any(e.startswith("dagsterDaemon.runRetries.retryOnAssetOrOpFailure") for e in found), found


CODE_SERVER_SC = ["dagster-user-deployments", "deployments", 0, "securityContext"]
RUN_SC = ["runLauncher", "config", "k8sRunLauncher", "securityContext"]


@pytest.mark.parametrize(
    "path, value",
    [
        (CODE_SERVER_SC + ["readOnlyRootFilesystem"], False),
        (RUN_SC + ["readOnlyRootFilesystem"], False),
        (RUN_SC + ["runAsNonRoot"], False),
        (CODE_SERVER_SC + ["allowPrivilegeEscalation"], True),
        (RUN_SC + ["capabilities"], {"drop": ["NET_RAW"]}),
        (RUN_SC + ["seccompProfile"], {"type": "Unconfined"}),
        (["dagster-user-deployments", "deployments", 0, "podSecurityContext", "seccompProfile"], {"type": "Unconfined"}),
        (
            ["runLauncher", "config", "k8sRunLauncher", "runK8sConfig", "podSpecConfig", "security_context", "seccomp_profile"],
            {"type": "Unconfined"},
        ),
    ],
    ids=lambda v: ".".join(map(str, v)) if isinstance(v, list) else None,
)
def test_values_that_loosen_a_security_context_fail(path, value):
    found = errors(_with(path, value))
    assert any(e.startswith(".".join(map(str, path[:-1]))) for e in found), found


@pytest.mark.parametrize("path", [CODE_SERVER_SC, RUN_SC])
def test_values_without_a_security_context_fail(path):
    values = copy.deepcopy(load_yaml(VALUES))
    node = values
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    assert any("securityContext" in e and "required" in e for e in errors(values))


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "host", "hostPath": {"path": "/"}},
        {"name": "signing-key", "secret": {"secretName": "modelcd-signing-key", "optional": True}},
    ],
    ids=["host-path", "unknown-secret-field"],
)
def test_values_with_a_volume_of_another_kind_fail(volume):
    values = copy.deepcopy(load_yaml(VALUES))
    values["runLauncher"]["config"]["k8sRunLauncher"]["volumes"].append(volume)
    assert errors(values)


def test_values_with_a_malformed_cpu_quantity_fail():
    found = errors(
        _with(["runLauncher", "config", "k8sRunLauncher", "runK8sConfig", "containerConfig", "resources", "limits", "cpu"], "four cores")
    )
    assert any("does not match" in e for e in found), found


def test_readme_installs_the_chart_version_of_the_installed_dagster():
    # The chart's version is Dagster's: the webserver and daemon images it runs must match the code server's dagster.
    installs = [line for line in (K8S / "README.md").read_text().splitlines() if line.startswith("helm upgrade --install")]
    assert installs and all(f"--version {dg.__version__} " in line and "-f k8s/values.yaml" in line for line in installs), installs
