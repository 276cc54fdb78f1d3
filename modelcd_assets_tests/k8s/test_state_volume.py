"""One ReadWriteMany volume, mounted at MODELCD_HOME in every pod that runs modelcd code, and one environment."""

import pytest

from modelcd_assets.lib.settings import local_defaults
from modelcd_assets_tests.k8s.chart_render import CHART_DAGSTER_HOME
from modelcd_assets_tests.k8s.files import DOCKERFILE, STATE_CLAIM, VALUES, dockerfile_env, load_yaml, manifest

ENV = manifest("ConfigMap", "modelcd-env")["data"]
HOME = ENV["MODELCD_HOME"]


def _mount_path(volumes: list[dict], mounts: list[dict]) -> str | None:
    names = {v["name"] for v in volumes if v.get("persistentVolumeClaim", {}).get("claimName") == STATE_CLAIM}
    paths = [m["mountPath"] for m in mounts if m["name"] in names]
    return paths[0] if len(paths) == 1 else None


def _pods() -> dict[str, tuple[list[dict], list[dict]]]:
    values = load_yaml(VALUES)
    code = values["dagster-user-deployments"]["deployments"][0]
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    pods = {"code server": (code["volumes"], code["volumeMounts"]), "run pod": (launcher["volumes"], launcher["volumeMounts"])}
    for name in ("modelcd-serve", "modelcd-mlflow"):
        spec = manifest("Deployment", name)["spec"]["template"]["spec"]
        pods[name] = (spec["volumes"], spec["containers"][0]["volumeMounts"])
    return pods


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
    assert ENV["MODELCD_MLFLOW_ARTIFACTS"].startswith("mlflow-artifacts:")
    hosts = next(a.split("=", 1)[1] for a in command if a.startswith("--allowed-hosts=")).split(",")
    service_port = manifest("Service", "modelcd-mlflow")["spec"]["ports"][0]["port"]
    assert ENV["MLFLOW_TRACKING_URI"] == f"http://modelcd-mlflow:{service_port}"
    assert f"modelcd-mlflow:{service_port}" in hosts


def test_serve_pod_reads_the_instance_the_chart_renders():
    spec = manifest("Deployment", "modelcd-serve")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["DAGSTER_HOME"]["value"] == CHART_DAGSTER_HOME
    instance_volume = next(v for v in spec["volumes"] if "configMap" in v)
    assert instance_volume["configMap"]["name"] == f"{load_yaml(VALUES)['fullnameOverride']}-instance"
    mount = next(m for m in container["volumeMounts"] if m["name"] == instance_volume["name"])
    assert mount["mountPath"] == f"{CHART_DAGSTER_HOME}/dagster.yaml"
