from modelcd_assets.lib.judging.promotion import GateRecord, gate_problems, lineage_problems


def test_all_passed_and_current_promotes():
    assert gate_problems([GateRecord("a", "SUCCEEDED", True, True), GateRecord("b", "SUCCEEDED", True, True)]) == []


def test_missing_failed_errored_or_stale_results_refuse():
    problems = gate_problems(
        [
            GateRecord("missing", None, None, False),
            GateRecord("failed", "FAILED", False, True),
            GateRecord("errored", "EXECUTION_FAILED", None, True),
            GateRecord("stale", "SUCCEEDED", True, False),
            GateRecord("planned", "PLANNED", None, True),
        ]
    )
    assert len(problems) == 5
    assert any("no result" in p for p in problems) and any("stale" in p for p in problems)


def test_no_gates_at_all_refuses():
    assert gate_problems([]) != []


def test_lineage_is_judged_all_the_way_up():
    latest = {"candidate": 1, "merged_model": 2, "quantized_model": 3, "evaluation": 4}
    parents = {"candidate": [], "merged_model": ["candidate"], "quantized_model": ["merged_model"], "evaluation": ["quantized_model"]}
    assert lineage_problems(latest, parents) == []
    rebuilt = dict(latest, merged_model=9)  # merged_model re-materialized after everything below it
    problems = lineage_problems(rebuilt, parents)
    assert problems == [
        "merged_model was re-materialized after quantized_model was built from it; results downstream of merged_model are stale: re-run the"
        " gated job"
    ]
    assert lineage_problems(dict(latest, evaluation=None), parents) == ["evaluation was never materialized for this candidate"]
    assert gate_problems([GateRecord("a", "SUCCEEDED", True, True)], problems) == problems


def _graph(*assets_and_checks):
    import dagster as dg

    checks = [c for c in assets_and_checks if isinstance(c, dg.AssetChecksDefinition)]
    from modelcd_assets.gate_results import GateGraph

    return GateGraph.of(dg.Definitions(assets=[a for a in assets_and_checks if a not in checks], asset_checks=checks))


def _partitioned_chain(fail_upstream: bool = False):
    import dagster as dg

    parts = dg.DynamicPartitionsDefinition(name="p")

    @dg.asset(partitions_def=parts)
    def up():
        if fail_upstream:
            raise RuntimeError("upstream broke")

    @dg.asset_check(asset=up, blocking=True, partitions_def=parts)
    def up_ok():
        return dg.AssetCheckResult(passed=True, metadata={"status": "pass", "measured": "1", "threshold": "1", "reason": "fine"})

    @dg.asset(partitions_def=parts, deps=[up])
    def mid():
        pass

    @dg.asset(partitions_def=parts, deps=[mid])
    def production_model():
        pass

    return up, up_ok, mid, production_model


def test_planned_but_never_run_gate_refuses():
    """A gate that a run planned but never executed (blocked upstream) is read back as not passed."""
    import dagster as dg

    from modelcd_assets.gate_results import read_gates

    up, up_ok, mid, prod = _partitioned_chain(fail_upstream=True)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("p", ["k"])
        dg.materialize([up, up_ok], instance=instance, partition_key="k", raise_on_error=False)
        decision = read_gates(instance, "k", _graph(up, up_ok, mid, prod))
    assert decision.records[0].status == "PLANNED" and decision.records[0].passed is None
    assert decision.records[0].shown == "not run"
    assert decision.problems[0] == "up_ok: planned" and not decision.promotable


def test_rematerializing_an_upstream_asset_makes_downstream_results_stale():
    """The old rule looked one step up only: a check on up stayed current after mid was rebuilt from it... and the reverse."""
    import dagster as dg

    from modelcd_assets.gate_results import read_gates

    up, up_ok, mid, prod = _partitioned_chain()
    graph = _graph(up, up_ok, mid, prod)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("p", ["k"])
        dg.materialize([up, up_ok, mid], instance=instance, partition_key="k")
        decision = read_gates(instance, "k", graph)
        assert decision.promotable, decision.problems
        assert [(r.gate, r.shown, r.reason) for r in decision.records] == [("up_ok", "pass", "fine")]
        dg.materialize([up, mid], instance=instance, partition_key="k", selection=[up])  # up rebuilt, its check not re-run
        stale = read_gates(instance, "k", graph)
        assert stale.records[0].shown == "stale" and not stale.promotable
        dg.materialize([up, up_ok, mid], instance=instance, partition_key="k")
        dg.materialize(
            [up, up_ok, mid], instance=instance, partition_key="k", selection=[up, up_ok]
        )  # up and its check again, mid not rebuilt
        lineage = read_gates(instance, "k", graph)
        assert lineage.records[0].shown == "pass"  # the check itself is current...
        assert any("up was re-materialized after mid was built from it" in p for p in lineage.problems)  # ...but mid is not


def test_a_required_gate_that_says_it_does_not_apply_refuses():
    """A gate that judged another task's candidate passes so the run goes on; when it is the candidate's own task's, it refuses."""
    from modelcd_assets.lib.judging.promotion import NOT_APPLICABLE

    record = GateRecord("accuracy_within_tolerance", "SUCCEEDED", True, True, NOT_APPLICABLE)
    assert gate_problems([record]) == [
        "accuracy_within_tolerance: it did not judge this candidate (it judges another task's models), but the candidate's task requires it"
    ]
    assert gate_problems([GateRecord("accuracy_within_tolerance", "SUCCEEDED", True, True, "pass")]) == []


def test_a_failed_gate_leads_with_what_it_measured_against_its_threshold():
    """Issue 28: the gate report's problems read 'perplexity_within_tolerance: failed (passed=False)'."""
    failed = GateRecord("perplexity_within_tolerance", "FAILED", False, True, "fail", "+52.73%", "+8.00%", "worse on most replies")
    assert gate_problems([failed]) == ["perplexity_within_tolerance: fail, measured +52.73% against +8.00%"]
    unsure = GateRecord("throughput_within_tolerance", "FAILED", False, True, "inconclusive", reason="the CI straddles 0.88")
    assert gate_problems([unsure]) == ["throughput_within_tolerance: inconclusive: the CI straddles 0.88"]
    assert gate_problems([GateRecord("odd", "FAILED", False, True)]) == ["odd: fail"]


def test_a_succeeded_check_that_did_not_pass_refuses():
    assert gate_problems([GateRecord("odd", "SUCCEEDED", False, True)]) == ["odd: succeeded (passed=False)"]
    assert gate_problems([GateRecord("odd", "SUCCEEDED", None, True)]) == ["odd: succeeded"]


def test_lineage_reports_every_asset_after_one_never_materialized():
    latest = {"candidate": None, "merged_model": 2, "evaluation": 1}
    parents = {"candidate": [], "merged_model": [], "evaluation": ["merged_model"]}
    assert lineage_problems(latest, parents) == [
        "candidate was never materialized for this candidate",
        (
            "merged_model was re-materialized after evaluation was built from it; results downstream of merged_model are stale: re-run the"
            " gated job"
        ),
    ]


def test_no_gates_at_all_says_why():
    assert gate_problems([]) == ["no gates are defined for this asset; refusing to promote ungated"]
