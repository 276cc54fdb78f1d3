"""Each pod holds exactly the credentials k8s/README.md's table gives it ("Credentials each pod holds").

A pod holds a Secret when its spec names it anywhere: env valueFrom.secretKeyRef, envFrom secretRef, or a volume (a
Secret volume or a projected one). The pods: modelcd_assets_tests/k8s/pods.py (the manifests', the run pod
dagster-k8s builds, the chart's code server, webserver and daemon as its templates render our values).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

import pytest

from modelcd_assets_tests.k8s.files import K8S, VALUES, load_yaml, manifest
from modelcd_assets_tests.k8s.pods import CODE_SERVER, DAEMON, RUN_POD, WEBSERVER, Pod, all_pods

PODS = all_pods()
ENV = manifest("ConfigMap", "modelcd-env")["data"]
PG = load_yaml(VALUES)["global"]["postgresqlSecretName"]
SIGNING_KEY, VERIFY_KEY = "modelcd-signing-key", "modelcd-verify-key"
WRITER, READER = "modelcd-mlflow-writer", "modelcd-mlflow-reader"
MLFLOW_DB, MLFLOW_AUTH, SERVE_ADMIN = "modelcd-mlflow-db", "modelcd-mlflow-auth", "modelcd-serve-admin"
EXPECTED = {
    WEBSERVER: {PG},
    DAEMON: {PG},
    CODE_SERVER: {PG, READER},
    RUN_POD: {PG, WRITER, SIGNING_KEY},
    "modelcd-mlflow": {MLFLOW_DB, MLFLOW_AUTH},
    "modelcd-serve": {READER, SERVE_ADMIN},
    "modelcd-prometheus": set(),
    "modelcd-state-init": set(),
}
DATABASE_SECRETS = {PG, MLFLOW_DB, MLFLOW_AUTH}


def _secret_refs(node) -> Iterator[str]:
    if isinstance(node, dict):
        for key in ("secretKeyRef", "secretRef"):
            if key in node and "name" in node[key]:
                yield node[key]["name"]
        if "secret" in node and isinstance(node["secret"], dict) and "secretName" in node["secret"]:
            yield node["secret"]["secretName"]
        for value in node.values():
            yield from _secret_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _secret_refs(item)


def secrets_of(pod: Pod) -> set[str]:
    return set(_secret_refs(pod.spec))


def test_every_pod_is_in_the_table():
    assert set(PODS) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pod_holds_exactly_its_credentials(name):
    assert secrets_of(PODS[name]) == EXPECTED[name]


def test_serve_pods_hold_no_database_credential_and_no_private_key():
    pod = PODS["modelcd-serve"]
    container = pod.spec["containers"][0]
    refs = set(_secret_refs(container.get("env", []))) | set(_secret_refs(container.get("envFrom", []))) | secrets_of(pod)
    assert not refs & (DATABASE_SECRETS | {SIGNING_KEY, WRITER}), refs
    names = {e["name"] for e in container.get("env", [])}
    assert not {"DAGSTER_PG_PASSWORD", "DAGSTER_HOME", "MODELCD_PG_URL", "MLFLOW_BACKEND_STORE_URI"} & names
    # Nor Dagster's instance, which names the database and where its password comes from.
    assert not any(v.get("configMap", {}).get("name", "").endswith("-instance") for v in pod.spec["volumes"])


def test_only_run_pods_mount_the_private_key():
    holders = {name for name, pod in PODS.items() if SIGNING_KEY in secrets_of(pod)}
    assert holders == {RUN_POD}


def test_only_run_pods_write_to_mlflow():
    assert {name for name, pod in PODS.items() if WRITER in secrets_of(pod)} == {RUN_POD}


def _mount_dir(pod: Pod, volume_matches) -> str | None:
    names = {v["name"] for v in pod.spec.get("volumes", []) if volume_matches(v)}
    dirs = [m["mountPath"] for c in pod.spec["containers"] for m in c.get("volumeMounts", []) if m["name"] in names and m.get("readOnly")]
    return dirs[0] if len(dirs) == 1 else None


def test_private_key_is_mounted_where_modelcd_env_points():
    key = _mount_dir(PODS[RUN_POD], lambda v: v.get("secret", {}).get("secretName") == SIGNING_KEY)
    assert key == posixpath.dirname(ENV["MODELCD_SIGNING_KEY"])


@pytest.mark.parametrize("name", [RUN_POD, CODE_SERVER, "modelcd-serve"])
def test_public_key_is_mounted_where_modelcd_env_points(name):
    where = _mount_dir(PODS[name], lambda v: v.get("configMap", {}).get("name") == VERIFY_KEY)
    assert where == posixpath.dirname(ENV["MODELCD_VERIFY_KEY"]), f"{name} reads modelcd-env but has no public key there"


def test_every_pod_reading_modelcd_env_mounts_the_public_key():
    readers = {
        name
        for name, pod in PODS.items()
        if any({"configMapRef": {"name": "modelcd-env"}} in c.get("envFrom", []) for c in pod.spec["containers"])
    }
    assert readers == {RUN_POD, CODE_SERVER, "modelcd-serve"}


def test_key_paths_are_off_the_state_volume():
    for key in ("MODELCD_SIGNING_KEY", "MODELCD_VERIFY_KEY"):
        assert not ENV[key].startswith(ENV["MODELCD_HOME"] + "/"), key


def test_readme_creates_the_key_objects_with_the_file_names_modelcd_env_names():
    readme = (K8S / "README.md").read_text()
    assert f"create secret generic {SIGNING_KEY} --from-file={posixpath.basename(ENV['MODELCD_SIGNING_KEY'])}=" in readme
    assert f"create configmap {VERIFY_KEY} --from-file={posixpath.basename(ENV['MODELCD_VERIFY_KEY'])}=" in readme


@pytest.mark.parametrize("secret", sorted({s for refs in EXPECTED.values() for s in refs} - {PG}))
def test_readme_creates_every_secret_a_pod_references(secret):
    assert f"create secret generic {secret} " in (K8S / "README.md").read_text()


@pytest.mark.parametrize("secret, user", [(WRITER, "modelcd-writer"), (READER, "modelcd-reader")])
def test_mlflow_logins_are_the_users_mlflow_users_py_makes(secret, user):
    readme = (K8S / "README.md").read_text()
    block = readme[readme.index(f"create secret generic {secret} ") :]
    block = block[: block.index("\n", block.index("MLFLOW_TRACKING_PASSWORD"))]
    assert f"MLFLOW_TRACKING_USERNAME=<(printf %s {user})" in block
    assert f'"{user}"' in (K8S / "mlflow_users.py").read_text()
