"""The code location loads, validates, and no gate can disappear silently."""

import subprocess
import sys
from pathlib import Path

from modelcd_assets.launch import definitions

ROOT = Path(__file__).resolve().parents[2]


def test_definitions_import_and_snapshot(modelcd_env, snapshot):
    from modelcd_assets.definitions import defs

    d = defs()
    graph = d.resolve_asset_graph()
    assets = sorted(k.to_user_string() for k in graph.get_all_asset_keys())
    checks = sorted((k.to_user_string(), graph.get_check_spec(k).blocking) for k in graph.asset_check_keys)
    sensors = sorted(s.name for s in d.sensors)
    jobs = sorted({j.name for j in d.jobs})
    assert {"assets": assets, "checks": checks, "sensors": sensors, "jobs": jobs} == snapshot


def test_every_gate_is_blocking_and_upstream_of_production(modelcd_env):
    """A check on anything production depends on is a gate, and blocks; the only other checks are monitoring ones,
    which warn about production after the fact and can never stand in for a gate."""
    import dagster as dg

    graph = definitions().resolve_asset_graph()
    upstream = graph.get_ancestor_asset_keys(dg.AssetKey("production_model"))
    for key in graph.asset_check_keys:
        if key.asset_key in upstream:
            assert graph.get_check_spec(key).blocking, key
        else:
            assert graph.get(key.asset_key).group_name == "monitoring" and not graph.get_check_spec(key).blocking, key


def test_dagster_definitions_validate(modelcd_env):
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", str(ROOT / "workspace.yaml")], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_gated_run_the_sensor_launches_executes_in_process():
    """Each of ~23 steps in its own subprocess made a run's wall time 2.8x its steps (bench/bench_run_overhead.py)."""
    from modelcd_assets.definitions import defs

    job = defs().resolve_job_def("gate_candidate")
    assert job.partitioned_config.get_run_config_for_partition_key("any-model:1")["execution"] == {"config": {"in_process": {}}}


def test_the_gate_graph_reads_the_code_location_as_dagster_does(modelcd_env):
    """The gate_graph resource runs judge by, derived through Dagster's public API, against Dagster's own asset graph."""
    import dagster as dg

    from modelcd_assets.gate_results import PRODUCTION_KEY, GateGraph, required_gates

    d = definitions()
    graph, ours = d.resolve_asset_graph(), GateGraph.of(d)
    upstream = graph.get_ancestor_asset_keys(PRODUCTION_KEY)
    stage = {key: i for i, key in enumerate(graph.toposorted_asset_keys)}
    expected = sorted(
        (k for k in graph.asset_check_keys if k.asset_key in upstream and graph.get_check_spec(k).blocking),
        key=lambda k: (stage[k.asset_key], k.name),
    )
    assert required_gates(ours) == expected and len(expected) >= 15
    assert ours.ancestors(PRODUCTION_KEY) == upstream
    assert ours.pipeline_order(upstream) == [k for k in graph.toposorted_asset_keys if k in upstream]
    for key in upstream:
        assert ours.parents[key] == graph.get(key).parent_keys and (key in ours.partitioned) == graph.get(key).is_partitioned, key
    with dg.build_resources({"gate_graph": d.resources["gate_graph"]}) as resources:  # what a run is handed is that same graph
        assert resources.gate_graph == ours


def test_each_task_requires_the_gates_that_judge_it(modelcd_env):
    """A one-task check declares its task in its spec's metadata; the other task's candidates never require it."""
    from modelcd_assets.gate_results import GateGraph, required_gates

    graph = GateGraph.of(definitions())
    every, classifier, llm = ({k.name for k in required_gates(graph, t)} for t in (None, "classification", "causal-lm"))
    assert classifier == every - {"perplexity_within_tolerance", "generation_is_healthy"}
    assert llm == every - {"accuracy_within_tolerance"}
    shared = {
        "artifact_is_safe",
        "weights_are_finite",
        "adapter_fits_base",
        "semver_covers_contract_change",
        "int8_agrees_with_fp32",
        "golden_cases_pass",
        "no_drift_detected",
        "throughput_within_tolerance",
        "cost_within_budget",
    }
    assert shared <= classifier & llm


def test_the_gate_graph_orders_an_asset_below_one_declared_elsewhere_as_dagster_does():
    """A parent declared only as an AssetSpec (or defined nowhere here) is a root at level 0, as in Dagster's graph."""
    import dagster as dg

    from modelcd_assets.gate_results import PRODUCTION_KEY, GateGraph, required_gates

    outside = dg.AssetSpec("outside")

    @dg.asset(deps=[outside])
    def b():
        pass

    @dg.asset
    def a():
        pass

    @dg.asset(deps=[a, b])
    def production_model():
        pass

    @dg.asset_check(asset=b, blocking=True)
    def b_ok():
        return dg.AssetCheckResult(passed=True)

    @dg.asset_check(asset=a, blocking=True)
    def a_ok():
        return dg.AssetCheckResult(passed=True)

    d = dg.Definitions(assets=[outside, a, b, production_model], asset_checks=[a_ok, b_ok])
    ours, graph = GateGraph.of(d), d.resolve_asset_graph()
    assert ours.pipeline_order(ours.ancestors(PRODUCTION_KEY)) == [k for k in graph.toposorted_asset_keys if k != PRODUCTION_KEY]
    assert [k.name for k in required_gates(ours)] == ["a_ok", "b_ok"]  # a is a root (level 0), b sits below outside (level 1)
