"""The NetworkPolicies of k8s/manifests/network-policies.yaml admit exactly the connections k8s/README.md lists.

A small evaluator of NetworkPolicy semantics (networking.k8s.io/v1: a pod selected by no policy of a direction is open
in it; one selected by some is open only to what one of their rules admits; a peer without namespaceSelector is this
namespace's; a rule without from/to admits every source; a named port is the destination pod's container port) is run
over every pair of pods of the namespace (modelcd_assets_tests/k8s/pods.py: the manifests' pods, the run pod
dagster-k8s builds, the chart's code server, webserver and daemon with the labels its templates set), a PostgreSQL pod
labelled as the README says, a pod of another namespace and a client outside the cluster. The admitted set must equal
the README's table, so a policy that admits more, or less, or selects pods by a label nobody sets, fails.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from modelcd_assets_tests.k8s.files import NAMESPACE, manifest, manifest_documents
from modelcd_assets_tests.k8s.pods import CODE_SERVER, DAEMON, RUN_POD, WEBSERVER, all_pods

POLICIES = [doc for _, doc in manifest_documents() if doc["kind"] == "NetworkPolicy"]
SERVE_COMMAND = manifest("Deployment", "modelcd-serve")["spec"]["template"]["spec"]["containers"][0]["command"]
ADMIN_PORT = int(SERVE_COMMAND[SERVE_COMMAND.index("--admin-port") + 1])
POSTGRES, OTHER_NAMESPACE, OUTSIDE = "postgresql", "a pod of another namespace", "outside the cluster"
MLFLOW, SERVE, PROMETHEUS, STATE_INIT = "modelcd-mlflow", "modelcd-serve", "modelcd-prometheus", "modelcd-state-init"


@dataclass(frozen=True)
class Endpoint:
    name: str
    labels: dict | None  # None: not a pod (a client outside the cluster)
    namespace: str | None = NAMESPACE
    ports: dict = field(default_factory=dict)  # container port name -> number

    @property
    def namespace_labels(self) -> dict:
        return {"kubernetes.io/metadata.name": self.namespace} if self.namespace else {}


def _endpoints() -> dict[str, Endpoint]:
    out = {}
    for name, pod in all_pods().items():
        ports = {p["name"]: p["containerPort"] for c in pod.spec["containers"] for p in c.get("ports", []) if "name" in p}
        out[name] = Endpoint(name, pod.labels, NAMESPACE, ports)
    out[POSTGRES] = Endpoint(POSTGRES, {"app.kubernetes.io/name": "modelcd-postgresql"})
    out[OTHER_NAMESPACE] = Endpoint(OTHER_NAMESPACE, {"app": "anything"}, "elsewhere")
    out[OUTSIDE] = Endpoint(OUTSIDE, None, None)
    return out


ENDPOINTS = _endpoints()


def selects(selector: dict, labels: dict | None) -> bool:
    if labels is None:
        return False
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for e in selector.get("matchExpressions", []):
        has, value = e["key"] in labels, labels.get(e["key"])
        ok = {
            "In": has and value in e.get("values", []),
            "NotIn": not has or value not in e.get("values", []),
            "Exists": has,
            "DoesNotExist": not has,
        }[e["operator"]]
        if not ok:
            return False
    return True


def peer_admits(peer: dict, other: Endpoint, policy_namespace: str = NAMESPACE) -> bool:
    if "ipBlock" in peer:  # taken as admitting anything: an over-approximation, never an under-one
        return True
    if other.labels is None:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector", {}), other.labels)


def port_matches(rule: dict, port: int, destination: Endpoint, protocol: str = "TCP") -> bool:
    if not rule.get("ports"):
        return True
    for p in rule["ports"]:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        wanted = destination.ports.get(p["port"]) if isinstance(p["port"], str) else p["port"]
        if wanted is not None and wanted <= port <= p.get("endPort", wanted):
            return True
    return False


def _types(policy: dict) -> list[str]:
    return policy["spec"].get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in policy["spec"] else []))


def allowed(policies: list[dict], source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Whether source may open a connection to destination:port, by the policies of the namespace modelcd."""
    if source.namespace == NAMESPACE:
        egress = [p for p in policies if "Egress" in _types(p) and selects(p["spec"]["podSelector"], source.labels)]
        if egress and not any(
            ("to" not in r or any(peer_admits(peer, destination) for peer in r["to"])) and port_matches(r, port, destination, protocol)
            for p in egress
            for r in p["spec"].get("egress", [])
        ):
            return False
    if destination.namespace == NAMESPACE:
        ingress = [p for p in policies if "Ingress" in _types(p) and selects(p["spec"]["podSelector"], destination.labels)]
        if ingress and not any(
            ("from" not in r or any(peer_admits(peer, source) for peer in r["from"])) and port_matches(r, port, destination, protocol)
            for p in ingress
            for r in p["spec"].get("ingress", [])
        ):
            return False
    return True


# Where a connection may go: the ports the pods listen on, the serve pods' admin port, and one any pod might open.
DESTINATION_PORTS = {
    MLFLOW: [5000],
    POSTGRES: [5432],
    CODE_SERVER: [3030],
    PROMETHEUS: [9090],
    SERVE: [8080, ADMIN_PORT],
    WEBSERVER: [80],
    DAEMON: [8080],
    RUN_POD: [8080],
    STATE_INIT: [8080],
}
SOURCES = sorted(set(ENDPOINTS))
# k8s/README.md, "Who can reach what".
EXPECTED = {
    (MLFLOW, 5000): {RUN_POD, CODE_SERVER, SERVE},
    (POSTGRES, 5432): {WEBSERVER, DAEMON, CODE_SERVER, RUN_POD, MLFLOW},
    (CODE_SERVER, 3030): {WEBSERVER, DAEMON},
    (PROMETHEUS, 9090): {CODE_SERVER, RUN_POD},
    (SERVE, 8080): set(SOURCES) - {SERVE},  # any client; a serve pod's own egress reaches DNS and MLflow alone
}
CASES = [(dest, port) for dest, ports in DESTINATION_PORTS.items() for port in ports]


def admitted(policies: list[dict], dest: str, port: int) -> set[str]:
    return {src for src in SOURCES if src != dest and allowed(policies, ENDPOINTS[src], ENDPOINTS[dest], port)}


def test_every_pod_of_the_namespace_is_known_here():
    assert {MLFLOW, SERVE, PROMETHEUS, STATE_INIT, RUN_POD, CODE_SERVER, WEBSERVER, DAEMON} <= set(ENDPOINTS)
    assert set(DESTINATION_PORTS) == set(ENDPOINTS) - {OTHER_NAMESPACE, OUTSIDE}


def test_ingress_is_denied_by_default():
    deny = [p for p in POLICIES if p["spec"]["podSelector"] == {} and _types(p) == ["Ingress"] and not p["spec"].get("ingress")]
    assert deny, "no policy selects every pod with no ingress rule"


@pytest.mark.parametrize("dest, port", CASES, ids=[f"{d}:{p}" for d, p in CASES])
def test_connections_admitted_are_exactly_the_readmes(dest, port):
    assert admitted(POLICIES, dest, port) == EXPECTED.get((dest, port), set())


@pytest.mark.parametrize("name", ["modelcd-mlflow", "modelcd-postgresql"])
def test_mlflow_and_postgresql_admit_only_the_expected_pod_selectors(name):
    (policy,) = [p for p in POLICIES if p["metadata"]["name"] == name]
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    assert all(set(peer) == {"podSelector"} for peer in peers), "a namespaceSelector or ipBlock would admit pods of other namespaces"
    admitted_pods = {n for n, e in ENDPOINTS.items() if any(peer_admits(peer, e) for peer in peers)}
    dest, port = {"modelcd-mlflow": (MLFLOW, 5000), "modelcd-postgresql": (POSTGRES, 5432)}[name]
    assert admitted_pods == EXPECTED[(dest, port)]


def test_every_selector_selects_a_pod_that_exists():
    """A selector with a label no owner sets would silently admit nothing (or deny nothing)."""
    for policy in POLICIES:
        selectors = [policy["spec"]["podSelector"]] + [
            peer["podSelector"]
            for direction in ("ingress", "egress")
            for rule in policy["spec"].get(direction, [])
            for peer in rule.get("from", rule.get("to", []))
            if "podSelector" in peer
        ]
        for selector in selectors:
            assert any(selects(selector, e.labels) for e in ENDPOINTS.values() if e.namespace == NAMESPACE), (
                policy["metadata"]["name"],
                selector,
            )


def test_serve_pods_reach_dns_and_mlflow_alone():
    serve = ENDPOINTS[SERVE]
    reachable = {
        (d, p) for d, ports in DESTINATION_PORTS.items() for p in ports if d != SERVE and allowed(POLICIES, serve, ENDPOINTS[d], p)
    }
    assert reachable == {(MLFLOW, 5000)}
    assert allowed(POLICIES, serve, ENDPOINTS[OUTSIDE], 53, "UDP") and not allowed(POLICIES, serve, ENDPOINTS[OUTSIDE], 443)
    assert not allowed(POLICIES, serve, ENDPOINTS[OUTSIDE], 5432), "PostgreSQL outside the cluster"


def test_the_admin_port_is_loopback_only_and_in_no_service():
    host = SERVE_COMMAND[SERVE_COMMAND.index("--admin-host") + 1]
    assert host in ("127.0.0.1", "::1", "localhost")
    container = manifest("Deployment", "modelcd-serve")["spec"]["template"]["spec"]["containers"][0]
    names = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert ADMIN_PORT not in names.values(), "the admin port is declared on the container"
    for _, doc in manifest_documents():
        if doc["kind"] != "Service":
            continue
        for p in doc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            assert ADMIN_PORT not in (p["port"], target, names.get(target)), f"Service {doc['metadata']['name']} exposes the admin port"


def test_the_admin_port_is_admitted_from_nowhere():
    assert admitted(POLICIES, SERVE, ADMIN_PORT) == set()


@pytest.mark.parametrize(
    "change, dest, port, gains",
    [
        (lambda ps: ps.remove(next(p for p in ps if p["metadata"]["name"] == "default-deny-ingress")), WEBSERVER, 80, OTHER_NAMESPACE),
        (
            lambda ps: next(p for p in ps if p["metadata"]["name"] == "modelcd-mlflow")["spec"]["ingress"][0]["from"].append(
                {"podSelector": {}}
            ),
            MLFLOW,
            5000,
            PROMETHEUS,
        ),
        (
            lambda ps: next(p for p in ps if p["metadata"]["name"] == "modelcd-serve")["spec"]["ingress"][1].pop("ports"),
            SERVE,
            ADMIN_PORT,
            OUTSIDE,
        ),
        (
            lambda ps: next(p for p in ps if p["metadata"]["name"] == "modelcd-postgresql")["spec"]["ingress"][0]["from"].append(
                {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "modelcd-serve"}}}
            ),
            POSTGRES,
            5432,
            None,
        ),
    ],
    ids=["no-default-deny", "mlflow-open-to-the-namespace", "serve-every-port", "postgresql-to-serve"],
)
def test_evaluator_sees_a_loosened_policy(change, dest, port, gains):
    policies = copy.deepcopy(POLICIES)
    change(policies)
    if gains is None:  # the serve pods' egress still keeps them off PostgreSQL
        assert admitted(policies, dest, port) == EXPECTED[(dest, port)]
    else:
        assert gains in admitted(policies, dest, port) - EXPECTED.get((dest, port), set())
