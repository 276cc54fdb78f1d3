"""The serve Deployment: a command the CLI accepts, probes on the server's own endpoints, a drain before it stops."""

import yaml

from modelcd_assets.cli import cmd_serve, parser
from modelcd_assets_tests.k8s.files import NAMESPACE, code_location_image, manifest
from modelcd_assets_tests.k8s.qos import guaranteed_qos_problems

DEPLOYMENT = manifest("Deployment", "modelcd-serve")
POD = DEPLOYMENT["spec"]["template"]
CONTAINER = POD["spec"]["containers"][0]
PORTS = {p["name"]: p["containerPort"] for p in CONTAINER["ports"]}


def test_serve_command_is_one_the_modelcd_cli_accepts():
    assert CONTAINER["command"][:2] == ["modelcd", "serve"]
    args = parser().parse_args(CONTAINER["command"][1:])
    assert args.func is cmd_serve
    assert (args.host, args.port) == ("0.0.0.0", PORTS["http"])
    assert not args.chaos


def test_admin_api_listens_on_loopback_on_a_port_of_its_own():
    args = parser().parse_args(CONTAINER["command"][1:])
    assert args.admin_host == "127.0.0.1"
    assert args.admin_port not in (0, args.port)


def test_probes_use_readyz_for_readiness_and_healthz_for_liveness():
    assert CONTAINER["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert CONTAINER["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert CONTAINER["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_pod_drains_before_it_stops():
    pre_stop = CONTAINER["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    drain = POD["spec"]["terminationGracePeriodSeconds"] - int(pre_stop[1])
    assert drain >= 30, f"{drain} s left for uvicorn to finish requests in flight after SIGTERM"
    assert DEPLOYMENT["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_serve_pod_has_guaranteed_qos_with_one_core_per_worker():
    assert guaranteed_qos_problems(POD["spec"]) == []
    workers = parser().parse_args(CONTAINER["command"][1:]).workers
    assert int(CONTAINER["resources"]["limits"]["cpu"]) == workers


def test_disruption_budget_keeps_one_serve_pod_through_a_drain():
    pdb = manifest("PodDisruptionBudget", "modelcd-serve")["spec"]
    assert pdb["selector"]["matchLabels"].items() <= POD["metadata"]["labels"].items()
    assert 1 <= pdb["minAvailable"] < DEPLOYMENT["spec"]["replicas"]


def test_services_select_the_serve_pods_on_their_http_port():
    for name in ("modelcd-serve", "modelcd-serve-pods"):
        spec = manifest("Service", name)["spec"]
        assert spec["selector"].items() <= POD["metadata"]["labels"].items(), name
        assert spec["ports"][0]["targetPort"] == "http", name
    assert manifest("Service", "modelcd-serve-pods")["spec"]["clusterIP"] == "None"


def test_prometheus_scrapes_every_serve_pod_and_trigger_sensor_reads_that_prometheus():
    config = yaml.safe_load(manifest("ConfigMap", "modelcd-prometheus")["data"]["prometheus.yml"])
    (job,) = config["scrape_configs"]
    assert (job["job_name"], job["metrics_path"]) == ("modelcd-serve", "/metrics")
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == [f"modelcd-serve-pods.{NAMESPACE}.svc.cluster.local"] and sd["port"] == PORTS["http"]
    prometheus = manifest("Deployment", "modelcd-prometheus")["spec"]["template"]["spec"]
    assert any(v.get("configMap", {}).get("name") == "modelcd-prometheus" for v in prometheus["volumes"])
    port = manifest("Service", "modelcd-prometheus")["spec"]["ports"][0]["port"]
    assert manifest("ConfigMap", "modelcd-env")["data"]["MODELCD_PROMETHEUS_URL"] == f"http://modelcd-prometheus:{port}"


def test_serve_mlflow_and_state_init_run_the_code_location_image():
    for kind, name in (("Deployment", "modelcd-serve"), ("Deployment", "modelcd-mlflow"), ("Job", "modelcd-state-init")):
        assert manifest(kind, name)["spec"]["template"]["spec"]["containers"][0]["image"] == code_location_image(), name
    assert manifest("Deployment", "modelcd-mlflow")["spec"]["template"]["spec"]["containers"][0]["command"][:2] == ["mlflow", "server"]
