"""One ReadWriteMany volume, mounted at MODELCD_HOME in every pod that runs modelcd code (read-only where the server
checks what it loads), the MLflow server's own folder of it, and one environment."""

import shlex

import pytest

from modelcd_assets.lib.layout import TRAFFIC_DIR
from modelcd_assets.lib.operations.settings import local_defaults
from modelcd_assets_tests.k8s.files import DOCKERFILE, STATE_CLAIM, VALUES, dockerfile_env, load_yaml, manifest

ENV = manifest("ConfigMap", "modelcd-env")["data"]
HOME = ENV["MODELCD_HOME"]


def _state_mounts(volumes: list[dict], mounts: list[dict]) -> list[dict]:
    names = {v["name"] for v in volumes if v.get("persistentVolumeClaim", {}).get("claimName") == STATE_CLAIM}
    return [m for m in mounts if m["name"] in names]


def _mount_path(volumes: list[dict], mounts: list[dict]) -> str | None:
    """Where the whole volume is mounted (no subPath), if it is mounted so once."""
    paths = [m["mountPath"] for m in _state_mounts(volumes, mounts) if not m.get("subPath")]
    return paths[0] if len(paths) == 1 else None


def _pods() -> dict[str, tuple[list[dict], list[dict]]]:
    """The pods that mount the whole volume: the code server, run pods, the serve pods and the state-init Job."""
    values = load_yaml(VALUES)
    code = values["dagster-user-deployments"]["deployments"][0]
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    pods = {"code server": (code["volumes"], code["volumeMounts"]), "run pod": (launcher["volumes"], launcher["volumeMounts"])}
    for kind, name in (("Deployment", "modelcd-serve"), ("Job", "modelcd-state-init")):
        spec = manifest(kind, name)["spec"]["template"]["spec"]
        pods[name] = (spec["volumes"], spec["containers"][0]["volumeMounts"])
    return pods


def _pod_mounts(kind: str, name: str) -> list[dict]:
    spec = manifest(kind, name)["spec"]["template"]["spec"]
    return _state_mounts(spec["volumes"], spec["containers"][0]["volumeMounts"])


def test_state_volume_is_read_write_many():
    assert manifest("PersistentVolumeClaim", STATE_CLAIM)["spec"]["accessModes"] == ["ReadWriteMany"]


@pytest.mark.parametrize("pod", sorted(_pods()))
def test_pod_mounts_the_state_volume_at_modelcd_home(pod):
    assert _mount_path(*_pods()[pod]) == HOME


def test_image_and_environment_agree_on_modelcd_home():
    assert dockerfile_env(DOCKERFILE.read_text())["MODELCD_HOME"] == HOME == "/var/lib/modelcd"


def test_environment_sets_every_variable_the_embedded_default_sets():
    # DAGSTER_HOME is the chart's (global.dagsterHome), set by it on its pods and by the run launcher on run pods.
    expected = set(local_defaults(HOME)) - {"DAGSTER_HOME"}
    assert expected <= set(ENV), f"missing from modelcd-env: {sorted(expected - set(ENV))}"


@pytest.mark.parametrize("key", ["MODELCD_DATA", "MODELCD_POLICY_DIR"])
def test_state_folders_lie_on_the_state_volume(key):
    assert ENV[key].startswith(HOME + "/")


def test_mlflow_keeps_artifacts_on_the_state_volume_and_clients_go_through_it():
    command = manifest("Deployment", "modelcd-mlflow")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--serve-artifacts" in command
    destination = next(a.split("=", 1)[1] for a in command if a.startswith("--artifacts-destination="))
    assert destination.startswith(HOME + "/")
    # Empty: the server's default root, mlflow-artifacts:/<experiment id> (test_mlflow_server.py says why).
    assert ENV["MODELCD_MLFLOW_ARTIFACTS"] == ""
    hosts = next(a.split("=", 1)[1] for a in command if a.startswith("--allowed-hosts=")).split(",")
    service_port = manifest("Service", "modelcd-mlflow")["spec"]["ports"][0]["port"]
    assert ENV["MLFLOW_TRACKING_URI"] == f"http://modelcd-mlflow:{service_port}"
    assert f"modelcd-mlflow:{service_port}" in hosts


def test_mlflow_mounts_only_its_artifact_folder_of_the_state_volume():
    command = manifest("Deployment", "modelcd-mlflow")["spec"]["template"]["spec"]["containers"][0]["command"]
    destination = next(a.split("=", 1)[1] for a in command if a.startswith("--artifacts-destination="))
    (mount,) = _pod_mounts("Deployment", "modelcd-mlflow")
    assert mount["mountPath"] == destination and mount["subPath"] == destination.removeprefix(HOME + "/")
    assert "/" not in mount["subPath"]


def test_serve_pods_mount_the_state_volume_read_only_but_for_the_traffic_log():
    mounts = _pod_mounts("Deployment", "modelcd-serve")
    whole = [m for m in mounts if not m.get("subPath")]
    assert [(m["mountPath"], m.get("readOnly")) for m in whole] == [(HOME, True)]
    writable = [m for m in mounts if not m.get("readOnly")]
    assert [(m["mountPath"], m.get("subPath")) for m in writable] == [(f"{HOME}/{TRAFFIC_DIR}", TRAFFIC_DIR)]


def test_state_init_makes_every_folder_a_pod_mounts_on_its_own_and_those_serve_cannot_make():
    job = manifest("Job", "modelcd-state-init")["spec"]["template"]["spec"]
    container = job["containers"][0]
    assert container["workingDir"] == HOME and _mount_path(job["volumes"], container["volumeMounts"]) == HOME
    made = {word for word in shlex.split(container["command"][-1]) if not word.startswith("-") and word not in ("mkdir", "&&", "0700")}
    sub_paths = {
        m["subPath"]
        for kind, name in (("Deployment", "modelcd-serve"), ("Deployment", "modelcd-mlflow"))
        for m in _pod_mounts(kind, name)
        if m.get("subPath")
    }
    folders = {ENV[key].removeprefix(HOME + "/") for key in ("MODELCD_DATA", "MODELCD_POLICY_DIR")}
    assert sub_paths | folders <= made, f"not made by the state-init Job: {sorted(sub_paths | folders - made)}"
    assert f"mkdir -p -m 0700 {TRAFFIC_DIR}" in container["command"][-1], "the traffic log's folder is owner-only"


def test_serve_pod_reads_no_dagster_instance():
    """Gate results reach the server as signed attestations from the registry, not from Dagster's database."""
    spec = manifest("Deployment", "modelcd-serve")["spec"]["template"]["spec"]
    assert not any("configMap" in v and v["configMap"]["name"].endswith("-instance") for v in spec["volumes"])
    assert "DAGSTER_HOME" not in {e["name"] for e in spec["containers"][0].get("env", [])}
