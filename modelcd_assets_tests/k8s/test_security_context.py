"""Every container this repository specifies runs hardened: a read-only root filesystem, not as root, no privilege
escalation, no capabilities, the runtime's default seccomp profile; and it has writable scratch space where it needs it.

The containers: each of k8s/manifests/ (initContainers included), the run pod dagster-k8s builds from values.yaml, and
the code server as the chart renders it from values.yaml (modelcd_assets_tests/k8s/pods.py). One test per container
and property, so removing any one of them from any one container fails by name.
"""

import copy

import pytest

from modelcd_assets_tests.k8s.files import code_location_image, manifest
from modelcd_assets_tests.k8s.pods import CODE_SERVER, RUN_POD, Pod, modelcd_containers

CONTAINERS = modelcd_containers()
IDS = [cid for cid, _, _ in CONTAINERS]
ENV = manifest("ConfigMap", "modelcd-env")["data"]
DAGSTER_HOME = "/opt/dagster/dagster_home"

PROPERTIES = {
    "readOnlyRootFilesystem": lambda sc: sc.get("readOnlyRootFilesystem") is True,
    "runAsNonRoot": lambda sc: sc.get("runAsNonRoot") is True,
    "allowPrivilegeEscalation": lambda sc: sc.get("allowPrivilegeEscalation") is False,
    "capabilities.drop": lambda sc: "ALL" in sc.get("capabilities", {}).get("drop", []),
    "seccompProfile": lambda sc: sc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
}


def security_problems(container: dict) -> list[str]:
    """The hardening settings a container's own securityContext lacks; [] when it has all five."""
    sc = container.get("securityContext") or {}
    return [name for name, holds in PROPERTIES.items() if not holds(sc)]


def test_every_pod_of_the_repository_is_checked():
    pods = {cid.split("/")[0] for cid in IDS}
    assert {"modelcd-serve", "modelcd-mlflow", "modelcd-prometheus", "modelcd-state-init", RUN_POD, CODE_SERVER} <= pods, pods


@pytest.mark.parametrize("prop", sorted(PROPERTIES))
@pytest.mark.parametrize("cid, pod, container", CONTAINERS, ids=IDS)
def test_container_is_hardened(cid, pod, container, prop):
    assert prop not in security_problems(container), f"{cid} ({pod.where}): securityContext lacks {prop}"


@pytest.mark.parametrize("prop", sorted(PROPERTIES))
def test_check_fails_when_a_setting_is_removed_or_loosened(prop):
    container = copy.deepcopy(manifest("Deployment", "modelcd-serve")["spec"]["template"]["spec"]["containers"][0])
    assert security_problems(container) == []
    sc = container["securityContext"]
    loosened = {
        "readOnlyRootFilesystem": False,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": True,
        "capabilities.drop": ["NET_RAW"],
        "seccompProfile": {"type": "Unconfined"},
    }[prop]
    key = prop.split(".")[0]
    if prop == "capabilities.drop":
        sc["capabilities"]["drop"] = loosened
    else:
        sc[key] = loosened
    assert security_problems(container) == [prop]
    del sc[key]
    assert security_problems(container) == [prop]


@pytest.mark.parametrize("cid, pod, container", CONTAINERS, ids=IDS)
def test_pod_runs_as_a_non_root_user_with_the_default_seccomp_profile(cid, pod, container):
    sc = pod.spec.get("securityContext") or {}
    assert sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) > 0, f"{cid}: pod securityContext {sc}"
    assert sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{cid}: pod securityContext {sc}"


def _emptydir_mounts(pod, container) -> set[str]:
    scratch = {v["name"] for v in pod.spec.get("volumes", []) if "emptyDir" in v}
    return {m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in scratch and not m.get("readOnly")}


# Containers running modelcd's image, but the state-init Job's, which runs mkdir alone.
MODELCD_CODE = [
    (cid, pod, c) for cid, pod, c in CONTAINERS if c.get("image") == code_location_image() and not cid.startswith("modelcd-state-init/")
]


@pytest.mark.parametrize("cid, pod, container", MODELCD_CODE, ids=[cid for cid, _, _ in MODELCD_CODE])
def test_modelcd_code_has_a_writable_tmp(cid, pod, container):
    """Python's tempfile, ONNX Runtime, MLflow's downloads: /tmp must be writable under a read-only root."""
    assert "/tmp" in _emptydir_mounts(pod, container), f"{cid}: no writable emptyDir at /tmp"


def test_caches_go_to_the_writable_tmp():
    for key in ("XDG_CACHE_HOME", "MPLCONFIGDIR"):
        assert ENV[key].startswith("/tmp/"), key


def _env(container: dict) -> dict[str, str]:
    env = {}
    for source in container.get("envFrom", []):
        if source.get("configMapRef", {}).get("name") == "modelcd-env":
            env.update(ENV)
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


HOME_CASES = MODELCD_CODE + [c for c in CONTAINERS if c[0].startswith("modelcd-mlflow/")]


@pytest.mark.parametrize("cid, pod, container", HOME_CASES, ids=[cid for cid, _, _ in HOME_CASES])
def test_home_is_writable(cid, pod, container):
    """The image's home folder is on the read-only root: HOME points into the /tmp emptyDir."""
    home = _env(container).get("HOME", "")
    assert any(home == m or home.startswith(m + "/") for m in _emptydir_mounts(pod, container)), f"{cid}: HOME={home!r}"


@pytest.mark.parametrize("name", [RUN_POD, CODE_SERVER])
def test_dagster_processes_have_a_writable_dagster_home(name):
    cid, pod, container = next(c for c in CONTAINERS if c[0].startswith(f"{name}/"))
    assert DAGSTER_HOME in _emptydir_mounts(pod, container), f"{cid}: DAGSTER_HOME is not writable"


def test_prometheus_writes_its_tsdb_to_an_emptydir():
    pod = manifest("Deployment", "modelcd-prometheus")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    path = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--storage.tsdb.path="))
    assert path in _emptydir_mounts(Pod("prometheus.yaml", pod), container)
