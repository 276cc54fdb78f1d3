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
