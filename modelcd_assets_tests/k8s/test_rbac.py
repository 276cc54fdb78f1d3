"""The run launcher's Role grants what the Dagster chart's own Role grants, and nothing wider."""

from modelcd_assets_tests.k8s.files import INSTANCE, NAMESPACE, VALUES, load_yaml, manifest

EIGHT = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
READ = {"get", "watch", "list"}
# helm/dagster/templates/role.yaml of the Dagster chart (dagster-io/dagster at 539a50b03a9a), rule for rule.
CHART_ROLE = {
    ("batch", "jobs"): EIGHT,
    ("batch", "jobs/status"): READ,
    ("", "pods"): EIGHT,
    ("", "events"): EIGHT,
    ("", "pods/log"): READ,
    ("", "pods/status"): READ,
}
# What dagster-k8s calls: create/list/delete jobs, read_namespaced_job_status, pods and their logs, events.
NEEDED = {("batch", "jobs"), ("batch", "jobs/status"), ("", "pods"), ("", "pods/log"), ("", "events")}


def granted(role: dict) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"unexpected rule fields (resourceNames, nonResourceURLs): {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def test_run_launcher_role_grants_the_chart_verbs_and_nothing_wider():
    grants = granted(manifest("Role", "modelcd-run-launcher"))
    assert NEEDED <= set(grants), f"missing: {NEEDED - set(grants)}"
    for key, verbs in grants.items():
        assert key in CHART_ROLE, f"{key} is not granted by the chart's role"
        assert verbs == CHART_ROLE[key], f"{key}: {sorted(verbs)} differs from the chart's {sorted(CHART_ROLE[key])}"


def test_role_binding_binds_the_service_account_dagster_is_told_to_use():
    binding = manifest("RoleBinding", "modelcd-run-launcher")
    account = manifest("ServiceAccount", "modelcd-dagster")["metadata"]["name"]
    values = load_yaml(VALUES)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "modelcd-run-launcher"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    assert values["global"]["serviceAccountName"] == values["serviceAccount"]["name"] == account
    assert load_yaml(INSTANCE)["run_launcher"]["config"]["service_account_name"] == account
