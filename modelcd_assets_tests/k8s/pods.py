"""Every pod that runs in the namespace, as the cluster would get it, for checks that look at all of them at once.

- modelcd's own pods: the pod templates of the Deployments and Jobs in k8s/manifests/.
- The run pod: the Job dagster-k8s's own K8sRunLauncher and construct_dagster_k8s_job build from the values' run
  launcher (what the chart renders into the instance), serialized as the API gets it.
- The chart's pods (code server, webserver, daemon): the parts of their pod templates the checks read (labels, the
  container's environment, volumes and security context), written from our values as the Dagster chart's templates
  (1.13.27) write them: charts/dagster-user-deployments/templates/deployment-user.yaml, templates/deployment-daemon.yaml
  and templates/helpers/_deployment-webserver.tpl. Only our values' branches; nothing of Dagster's own image is known here.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import dagster as dg
import kubernetes

from modelcd_assets_tests.k8s.chart_render import rendered_instance
from modelcd_assets_tests.k8s.files import VALUES, code_location_image, load_yaml, manifest_documents

OFFLINE_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: offline, user: {}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
current-context: offline
"""
CHART_NAME = "dagster"  # .Chart.Name of the main chart: app.kubernetes.io/name of the webserver's and daemon's pods
SUBCHART_NAME = "dagster-user-deployments"  # .Chart.Name of the user-deployments subchart
RUN_POD, CODE_SERVER, WEBSERVER, DAEMON = "run pod", "code server", "webserver", "daemon"


def run_job(tmp_path: Path) -> dict:
    """The run Job for one gate_candidate run, as the launcher from the values builds it, serialized as the API gets it.

    Mirrors K8sRunLauncher._launch_k8s_job_with_args up to the API call: the launcher is the real class, configured with
    what the chart renders from k8s/values.yaml, pointed at a kubeconfig for an address nothing listens on (only
    how it would reach the API differs from the cluster's).
    """
    from dagster._config import process_config
    from dagster_k8s import K8sRunLauncher
    from dagster_k8s.job import construct_dagster_k8s_job, get_job_name_from_run_id

    config = rendered_instance(load_yaml(VALUES))["run_launcher"]["config"]
    processed = process_config(K8sRunLauncher.config_type(), config)
    assert processed.success, [e.message for e in processed.errors]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(OFFLINE_KUBECONFIG)
    default = kubernetes.client.Configuration.get_default_copy()
    try:
        launcher = K8sRunLauncher.from_config_value(
            None, {**processed.value, "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)}
        )
        run = dg.DagsterRun(job_name="gate_candidate")
        context = launcher.get_container_context_for_run(run)
        job = construct_dagster_k8s_job(
            job_config=context.get_k8s_job_config(job_image=code_location_image(), run_launcher=launcher),
            args=["dagster", "api", "execute_run", "{}"],
            job_name=get_job_name_from_run_id(run.run_id),
            pod_name=get_job_name_from_run_id(run.run_id),
            component="run_worker",
            user_defined_k8s_config=context.run_k8s_config,
            labels={"dagster/job": run.job_name, "dagster/run-id": run.run_id},
            env_vars=[{"name": "DAGSTER_RUN_JOB_NAME", "value": run.job_name}],
        )
        return kubernetes.client.ApiClient().sanitize_for_serialization(job)
    finally:  # loading a kubeconfig replaces the client's process-wide default configuration
        kubernetes.client.Configuration.set_default(default)


@cache
def rendered_run_job() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return run_job(Path(tmp))


def _postgres_password(values: dict) -> dict:
    return {
        "name": "DAGSTER_PG_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": values["global"]["postgresqlSecretName"], "key": "postgresql-password"}},
    }


def code_server_pod() -> dict:
    """The code server's pod template as deployment-user.yaml renders it from our values (the parts checks read)."""
    values = load_yaml(VALUES)
    d = values["dagster-user-deployments"]["deployments"][0]
    full = f"dagster-{SUBCHART_NAME}"  # the subchart's fullname for the release dagster (k8s/README.md installs it so)
    env_from = [
        {"configMapRef": {"name": f"{full}-user-deployments-shared-env"}},
        {"configMapRef": {"name": f"{full}-{d['name']}-user-env"}},
    ]
    env_from += [{"configMapRef": ref} for ref in d.get("envConfigMaps", [])] + [{"secretRef": ref} for ref in d.get("envSecrets", [])]
    return {
        "metadata": {
            "labels": {
                "app.kubernetes.io/name": SUBCHART_NAME,
                "app.kubernetes.io/instance": "dagster",
                "component": "user-deployments",
                "deployment": d["name"],
                **d.get("labels", {}),
            }
        },
        "spec": {
            "securityContext": d.get("podSecurityContext", {}),
            "containers": [
                {
                    "name": SUBCHART_NAME,
                    "image": f"{d['image']['repository']}:{d['image']['tag']}",
                    "args": ["dagster", "api", "grpc", "-h", "0.0.0.0", "-p", str(d["port"]), *d["dagsterApiGrpcArgs"]],
                    "securityContext": d.get("securityContext", {}),
                    "env": [
                        {"name": "DAGSTER_CURRENT_IMAGE", "value": f"{d['image']['repository']}:{d['image']['tag']}"},
                        _postgres_password(values),
                    ],
                    "envFrom": env_from,
                    "volumeMounts": d.get("volumeMounts", []),
                    "ports": [],  # the template declares none; its Service targets deployment.port
                }
            ],
            "volumes": d.get("volumes", []),
        },
    }


def dagster_pod(component: str) -> dict:
    """The webserver's or the daemon's pod template, as far as our values decide it (labels, the PostgreSQL password)."""
    values = load_yaml(VALUES)
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": CHART_NAME, "app.kubernetes.io/instance": "dagster", "component": component}},
        "spec": {
            "containers": [{"name": CHART_NAME, "env": [_postgres_password(values)], "envFrom": [], "volumeMounts": []}],
            "volumes": [],
        },
    }


@dataclass(frozen=True)
class Pod:
    where: str  # where its spec comes from
    template: dict  # {"metadata": {"labels"}, "spec": pod spec}

    @property
    def labels(self) -> dict[str, str]:
        return self.template["metadata"].get("labels", {})

    @property
    def spec(self) -> dict:
        return self.template["spec"]

    def containers(self) -> list[dict]:
        return self.spec.get("initContainers", []) + self.spec["containers"]


def manifest_pods() -> dict[str, Pod]:
    """The pods k8s/manifests/ creates, by their app.kubernetes.io/name."""
    pods = {}
    for where, doc in manifest_documents():
        if doc["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            template = doc["spec"]["template"]
            pods[template["metadata"]["labels"]["app.kubernetes.io/name"]] = Pod(where, template)
    return pods


def all_pods() -> dict[str, Pod]:
    """Every pod in the namespace: modelcd's, the run pod, and the chart's three."""
    job = rendered_run_job()
    return {
        **manifest_pods(),
        RUN_POD: Pod("the run Job dagster-k8s builds from values.yaml", job["spec"]["template"]),
        CODE_SERVER: Pod("values.yaml dagster-user-deployments, as the subchart renders it", code_server_pod()),
        WEBSERVER: Pod("the chart's webserver", dagster_pod("dagster-webserver")),
        DAEMON: Pod("the chart's daemon", dagster_pod("dagster-daemon")),
    }


def modelcd_containers() -> list[tuple[str, Pod, dict]]:
    """(id, pod, container) for every container whose spec this repository decides: the manifests', the run pod's and
    the code server's (the webserver's and the daemon's keep the chart's)."""
    pods = all_pods()
    out = []
    for name, pod in pods.items():
        if name in (WEBSERVER, DAEMON):
            continue
        for c in pod.containers():
            out.append((f"{name}/{c['name']}", pod, c))
    return out
