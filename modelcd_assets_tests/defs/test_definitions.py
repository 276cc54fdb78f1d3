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
    proc = subprocess.run([str(dagster), "definitions", "validate", "-w", str(ROOT / "workspace.yaml")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_gated_run_the_sensor_launches_executes_in_process():
    """Each of ~23 steps in its own subprocess made a run's wall time 2.8x its steps (bench/bench_run_overhead.py)."""
    from modelcd_assets.definitions import defs

    job = defs().resolve_job_def("gate_candidate")
    assert job.partitioned_config.get_run_config_for_partition_key("any-model:1")["execution"] == {"config": {"in_process": {}}}
