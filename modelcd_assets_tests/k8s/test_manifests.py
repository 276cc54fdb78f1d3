"""Every manifest is a valid Kubernetes object, checked strictly and offline."""

import copy

import pytest

from modelcd_assets_tests.k8s.files import NAMESPACE, manifest, manifest_documents
from modelcd_assets_tests.k8s.kube_schema import K8S_VERSION, schema_problems

DOCUMENTS = manifest_documents()


def test_manifests_folder_holds_every_object_the_readme_applies():
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in DOCUMENTS}
    assert {
        ("Namespace", NAMESPACE),
        ("PersistentVolumeClaim", "modelcd-state"),
        ("ConfigMap", "modelcd-env"),
        ("ServiceAccount", "modelcd-dagster"),
        ("Role", "modelcd-run-launcher"),
        ("RoleBinding", "modelcd-run-launcher"),
        ("Deployment", "modelcd-mlflow"),
        ("Service", "modelcd-mlflow"),
        ("Deployment", "modelcd-serve"),
        ("Service", "modelcd-serve"),
        ("Service", "modelcd-serve-pods"),
        ("PodDisruptionBudget", "modelcd-serve"),
        ("ConfigMap", "modelcd-prometheus"),
        ("Deployment", "modelcd-prometheus"),
        ("Service", "modelcd-prometheus"),
        ("Job", "modelcd-state-init"),
        ("NetworkPolicy", "default-deny-ingress"),
        ("NetworkPolicy", "modelcd-mlflow"),
        ("NetworkPolicy", "modelcd-postgresql"),
        ("NetworkPolicy", "modelcd-code-server"),
        ("NetworkPolicy", "modelcd-prometheus"),
        ("NetworkPolicy", "modelcd-serve"),
    } <= kinds


def test_network_policies_validate_against_the_networking_v1_schema():
    """kubernetes-validate knows networking.k8s.io/v1 NetworkPolicy: a misspelt field fails like any other."""
    policy = copy.deepcopy(manifest("NetworkPolicy", "modelcd-serve"))
    assert schema_problems(policy) == []
    policy["spec"]["ingress"][0]["form"] = policy["spec"]["ingress"][0].pop("from")
    assert any("form" in p for p in schema_problems(policy))


@pytest.mark.parametrize("where, doc", DOCUMENTS, ids=[where for where, _ in DOCUMENTS])
def test_manifest_validates_strictly_against_kubernetes_schema(where, doc):
    assert schema_problems(doc) == [], f"{where} does not validate against Kubernetes {K8S_VERSION}"


def test_a_kind_without_a_schema_fails_validation():
    problems = schema_problems({"apiVersion": "modelcd.example/v1", "kind": "GateRun", "metadata": {"name": "x"}})
    assert problems and problems[0].startswith("no schema"), problems


def test_an_unknown_field_fails_strict_validation():
    deployment = copy.deepcopy(manifest("Deployment", "modelcd-serve"))
    deployment["spec"]["replica"] = 2  # misspelt: a lenient check would ignore it
    assert any("replica" in p for p in schema_problems(deployment))


NAMESPACED = [(where, doc) for where, doc in DOCUMENTS if doc["kind"] != "Namespace"]


@pytest.mark.parametrize("where, doc", NAMESPACED, ids=[where for where, _ in NAMESPACED])
def test_namespaced_objects_live_where_the_run_launcher_and_role_binding_point(where, doc):
    assert doc["metadata"].get("namespace") == NAMESPACE, f"{where} is not in namespace {NAMESPACE}"
