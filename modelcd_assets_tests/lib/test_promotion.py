from modelcd_assets.lib.promotion import GateRecord, gate_problems


def test_all_passed_and_current_promotes():
    assert gate_problems([GateRecord("a", "SUCCEEDED", True, True), GateRecord("b", "SUCCEEDED", True, True)]) == []


def test_missing_failed_errored_or_stale_results_refuse():
    problems = gate_problems([
        GateRecord("missing", None, None, False),
        GateRecord("failed", "FAILED", False, True),
        GateRecord("errored", "EXECUTION_FAILED", None, True),
        GateRecord("stale", "SUCCEEDED", True, False),
        GateRecord("planned", "PLANNED", None, True),
    ])
    assert len(problems) == 5
    assert any("no result" in p for p in problems) and any("stale" in p for p in problems)


def test_no_gates_at_all_refuses():
    assert gate_problems([]) != []


def test_planned_but_never_run_gate_refuses(tmp_path, monkeypatch):
    """A gate that a run planned but never executed (blocked upstream) is read back as not passed."""
    import dagster as dg

    from modelcd_assets.defs.assets.production_model import gate_records

    parts = dg.DynamicPartitionsDefinition(name="p")

    @dg.asset(partitions_def=parts)
    def up():
        raise RuntimeError("upstream broke")

    @dg.asset_check(asset=up, blocking=True, partitions_def=parts)
    def up_ok():
        return dg.AssetCheckResult(passed=True)

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("p", ["k"])
        dg.materialize([up, up_ok], instance=instance, partition_key="k", raise_on_error=False)
        records = gate_records(instance, [up_ok.check_key], "k")
    assert records[0].status == "PLANNED" and records[0].passed is None
    assert gate_problems(records) == ["up_ok: planned"]
