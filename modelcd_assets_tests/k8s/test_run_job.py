"""The run Job dagster-k8s builds from the values' run launcher (modelcd_assets_tests/k8s/pods.py builds it with the real
K8sRunLauncher): valid, Guaranteed QoS in whole CPUs, the state volume, the writer's login and the private key."""

import pytest

from modelcd_assets_tests.k8s.files import STATE_CLAIM, code_location_image, manifest
from modelcd_assets_tests.k8s.kube_schema import K8S_VERSION, schema_problems
from modelcd_assets_tests.k8s.pods import rendered_run_job
from modelcd_assets_tests.k8s.qos import guaranteed_qos_problems

IMAGE = code_location_image()
ENV = manifest("ConfigMap", "modelcd-env")["data"]


@pytest.fixture(scope="module")
def job() -> dict:
    return rendered_run_job()


def test_run_job_validates_strictly_against_kubernetes_schema(job):
    assert schema_problems(job) == [], f"the run Job does not validate against Kubernetes {K8S_VERSION}"


def test_run_pod_has_guaranteed_qos_in_whole_cpus(job):
    pod = job["spec"]["template"]["spec"]
    assert guaranteed_qos_problems(pod) == []
    assert pod["containers"][0]["resources"]["limits"]["cpu"] == "4"


@pytest.mark.parametrize(
    "resources, problem",
    [
        ({"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}, "cpu request 2 != limit 4"),
        ({"requests": {"cpu": "3500m", "memory": "8Gi"}, "limits": {"cpu": "3500m", "memory": "8Gi"}}, "not a whole number"),
        ({"limits": {"cpu": "4"}}, "no memory limit"),
    ],
)
def test_guaranteed_qos_check_rejects_burstable_or_fractional_pods(resources, problem):
    found = guaranteed_qos_problems({"containers": [{"name": "dagster", "resources": resources}]})
    assert any(problem in p for p in found), found


def test_run_pod_mounts_the_state_volume_and_reads_modelcd_env(job):
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == IMAGE
    assert {"name": "modelcd-state", "persistentVolumeClaim": {"claimName": STATE_CLAIM}} in pod["volumes"]
    assert {"name": "modelcd-state", "mountPath": "/var/lib/modelcd"} in container["volumeMounts"]
    assert {"configMapRef": {"name": "modelcd-env"}} in container["envFrom"]
    assert {"secretRef": {"name": "modelcd-mlflow-writer"}} in container["envFrom"]
    password = next(e for e in container["env"] if e["name"] == "DAGSTER_PG_PASSWORD")
    assert password["valueFrom"] == {"secretKeyRef": {"name": "dagster-postgresql-secret", "key": "postgresql-password"}}


def test_run_pod_runs_as_non_root_without_an_api_token(job):
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False


def test_run_pod_mounts_the_private_key_where_modelcd_env_says():
    pod = rendered_run_job()["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "modelcd-signing-key"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    key = ENV["MODELCD_SIGNING_KEY"]
    assert mount["readOnly"] is True and key == f"{mount['mountPath']}/signing.key"
