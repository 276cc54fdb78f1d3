"""The Job the run launcher creates for a run, built offline by dagster-k8s's own code from the values' run launcher.

Mirrors K8sRunLauncher._launch_k8s_job_with_args up to the API call: the launcher is the real class, configured with
what the chart renders from k8s/values.yaml, pointed at a kubeconfig for an address nothing listens on (only
how it would reach the API differs from the cluster's).
"""

import dagster as dg
import kubernetes
import pytest
from dagster._config import process_config
from dagster_k8s import K8sRunLauncher
from dagster_k8s.job import construct_dagster_k8s_job, get_job_name_from_run_id

from modelcd_assets_tests.k8s.chart_render import rendered_instance
from modelcd_assets_tests.k8s.files import STATE_CLAIM, VALUES, code_location_image, load_yaml
from modelcd_assets_tests.k8s.kube_schema import K8S_VERSION, schema_problems
from modelcd_assets_tests.k8s.qos import guaranteed_qos_problems

IMAGE = code_location_image()
OFFLINE_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: offline, user: {}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
current-context: offline
"""


def run_job(tmp_path) -> dict:
    """The run Job for one gate_candidate run, as the launcher from the values builds it, serialized as the API gets it."""
    config = rendered_instance(load_yaml(VALUES))["run_launcher"]["config"]
    processed = process_config(K8sRunLauncher.config_type(), config)
    assert processed.success, [e.message for e in processed.errors]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(OFFLINE_KUBECONFIG)
    launcher = K8sRunLauncher.from_config_value(None, {**processed.value, "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)})

    run = dg.DagsterRun(job_name="gate_candidate")
    context = launcher.get_container_context_for_run(run)
    job = construct_dagster_k8s_job(
        job_config=context.get_k8s_job_config(job_image=IMAGE, run_launcher=launcher),
        args=["dagster", "api", "execute_run", "{}"],
        job_name=get_job_name_from_run_id(run.run_id),
        pod_name=get_job_name_from_run_id(run.run_id),
        component="run_worker",
        user_defined_k8s_config=context.run_k8s_config,
        labels={"dagster/job": run.job_name, "dagster/run-id": run.run_id},
        env_vars=[{"name": "DAGSTER_RUN_JOB_NAME", "value": run.job_name}],
    )
    return kubernetes.client.ApiClient().sanitize_for_serialization(job)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> dict:
    default = kubernetes.client.Configuration.get_default_copy()
    try:
        return run_job(tmp_path_factory.mktemp("run-job"))
    finally:  # loading a kubeconfig replaces the client's process-wide default configuration
        kubernetes.client.Configuration.set_default(default)


def test_run_job_validates_strictly_against_kubernetes_schema(job):
    assert schema_problems(job) == [], f"the run Job does not validate against Kubernetes {K8S_VERSION}"


def test_run_pod_has_guaranteed_qos_in_whole_cpus(job):
    pod = job["spec"]["template"]["spec"]
    assert guaranteed_qos_problems(pod) == []
    assert pod["containers"][0]["resources"]["limits"]["cpu"] == "4"


@pytest.mark.parametrize("resources, problem", [
    ({"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}, "cpu request 2 != limit 4"),
    ({"requests": {"cpu": "3500m", "memory": "8Gi"}, "limits": {"cpu": "3500m", "memory": "8Gi"}}, "not a whole number"),
    ({"limits": {"cpu": "4"}}, "no memory limit"),
])
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
    password = next(e for e in container["env"] if e["name"] == "DAGSTER_PG_PASSWORD")
    assert password["valueFrom"] == {"secretKeyRef": {"name": "dagster-postgresql-secret", "key": "postgresql-password"}}


def test_run_pod_runs_as_non_root_without_an_api_token(job):
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
