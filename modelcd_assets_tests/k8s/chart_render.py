"""The dagster.yaml sections the Dagster chart (1.13.27) renders from our values, in Python.

Follows helm/dagster/templates/configmap-instance.yaml and helpers/instance/_postgresql.tpl, _run-launcher.tpl,
_concurrency.tpl; only the branches our values reach (K8sRunLauncher, QueuedRunCoordinator, NoOpComputeLogManager,
an external PostgreSQL). Chart defaults our values do not override are written here as the chart's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelcd_assets_tests.k8s.files import NAMESPACE

CHART_DAGSTER_HOME = "/opt/dagster/dagster_home"  # global.dagsterHome in the chart's values.yaml


def _postgres(values: Mapping[str, Any]) -> dict:
    pg = values["postgresql"]
    return {
        "postgres_db": {
            "username": pg["postgresqlUsername"],
            "password": {"env": "DAGSTER_PG_PASSWORD"},
            "hostname": pg["postgresqlHost"],
            "db_name": pg["postgresqlDatabase"],
            "port": pg["service"]["port"],
            "params": pg.get("postgresqlParams", {}),
        }
    }


def _names(refs: list[Mapping[str, str]]) -> list[str]:
    return [ref["name"] for ref in refs if "name" in ref]


def _run_launcher(values: Mapping[str, Any]) -> dict:
    k = values["runLauncher"]["config"]["k8sRunLauncher"]
    g = values.get("global", {})
    config: dict[str, Any] = {"load_incluster_config": k["loadInclusterConfig"]}
    if k.get("kubeconfigFile"):
        config["kubeconfig_file"] = k["kubeconfigFile"]
    config["job_namespace"] = k.get("jobNamespace") or NAMESPACE
    config["image_pull_policy"] = k["imagePullPolicy"]
    if values.get("imagePullSecrets"):
        config["image_pull_secrets"] = values["imagePullSecrets"]
    config["service_account_name"] = g.get("serviceAccountName") or values["serviceAccount"]["name"]
    config["dagster_home"] = g.get("dagsterHome", CHART_DAGSTER_HOME)
    config["instance_config_map"] = f"{values['fullnameOverride']}-instance"
    config["postgres_password_secret"] = g["postgresqlSecretName"]
    for key, out in (("envConfigMaps", "env_config_maps"), ("envSecrets", "env_secrets")):
        if k.get(key):
            config[out] = _names(k[key])
    for key, out in (
        ("envVars", "env_vars"),
        ("volumeMounts", "volume_mounts"),
        ("volumes", "volumes"),
        ("labels", "labels"),
        ("resources", "resources"),
    ):
        if k.get(key):
            config[out] = k[key]
    if k.get("failPodOnRunFailure"):
        config["fail_pod_on_run_failure"] = True
    if k.get("schedulerName"):
        config["scheduler_name"] = k["schedulerName"]
    if k.get("securityContext"):
        config["security_context"] = k["securityContext"]
    if k.get("runK8sConfig"):
        parts = {
            "containerConfig": "container_config",
            "podSpecConfig": "pod_spec_config",
            "podTemplateSpecMetadata": "pod_template_spec_metadata",
            "jobSpecConfig": "job_spec_config",
            "jobMetadata": "job_metadata",
        }
        config["run_k8s_config"] = {out: k["runK8sConfig"][key] for key, out in parts.items() if k["runK8sConfig"].get(key)}
    return {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": config}


def _run_monitoring(m: Mapping[str, Any]) -> dict:
    out = {"enabled": m["enabled"], "start_timeout_seconds": m["startTimeoutSeconds"]}
    if m.get("cancelTimeoutSeconds") is not None:
        out["cancel_timeout_seconds"] = m["cancelTimeoutSeconds"]
    if m.get("maxResumeRunAttempts") is not None:
        out["max_resume_run_attempts"] = m["maxResumeRunAttempts"]
    out["poll_interval_seconds"] = m["pollIntervalSeconds"]
    out["free_slots_after_run_end_seconds"] = m.get("freeSlotsAfterRunEndSeconds", 0)
    return out


def _run_retries(r: Mapping[str, Any]) -> dict:
    out = {"enabled": r["enabled"]}
    if r.get("maxRetries"):
        out["max_retries"] = r["maxRetries"]
    if r.get("retryOnAssetOrOpFailure") is not None:
        out["retry_on_asset_or_op_failure"] = r["retryOnAssetOrOpFailure"]
    return out


def _concurrency(c: Mapping[str, Any]) -> dict:
    out = {}
    pools, runs = c.get("pools", {}), c.get("runs", {})
    if pools.get("defaultLimit") is not None:
        out["pools"] = {"default_limit": pools["defaultLimit"]}
    if runs.get("maxConcurrentRuns") is not None:
        out["runs"] = {"max_concurrent_runs": runs["maxConcurrentRuns"]}
    return out


def rendered_instance(values: Mapping[str, Any]) -> dict:
    """The instance sections our values decide, as the chart renders them."""
    daemon = values["dagsterDaemon"]
    storage = _postgres(values)
    out = {
        "scheduler": {"module": "dagster.core.scheduler", "class": "DagsterDaemonScheduler"},
        "schedule_storage": {"module": "dagster_postgres.schedule_storage", "class": "PostgresScheduleStorage", "config": storage},
        "run_launcher": _run_launcher(values),
        "run_storage": {"module": "dagster_postgres.run_storage", "class": "PostgresRunStorage", "config": storage},
        "event_log_storage": {"module": "dagster_postgres.event_log", "class": "PostgresEventLogStorage", "config": storage},
        "compute_logs": {"module": "dagster.core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"},
        "telemetry": {"enabled": values.get("telemetry", {}).get("enabled", True)},
    }
    if daemon["runCoordinator"]["enabled"]:
        out["run_coordinator"] = {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator"}
    if daemon["runMonitoring"]["enabled"]:
        out["run_monitoring"] = _run_monitoring(daemon["runMonitoring"])
    if daemon["runRetries"]["enabled"]:
        out["run_retries"] = _run_retries(daemon["runRetries"])
    if values.get("concurrency", {}).get("enabled"):
        out["concurrency"] = _concurrency(values["concurrency"])
    return out
