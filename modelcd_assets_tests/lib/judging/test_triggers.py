"""Feedback triggers: what a policy may say, and when a trigger fires."""

import pytest

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.policy import Policy
from modelcd_assets.lib.judging.trigger_policy import CANDIDATE, PRODUCTION, ROLLBACK, SLO_METRIC, TriggerPolicy
from modelcd_assets.lib.judging.triggers import Held, Reading, firing_name, refuse_foreign_triggers, step, trigger_query
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION


def trigger(**kw) -> TriggerPolicy:
    return TriggerPolicy.model_validate({"metric": "p99_latency_ms", "above": 45, "for": "10s", "action": "rollback", **kw})


def test_the_seed_trigger_reads_as_policy():
    p = Policy.model_validate({"triggers": [{"metric": "p99_latency_ms", "above": 45, "for": "2m", "action": "rollback"}]})
    (t,) = p.triggers
    assert (t.hold_seconds, t.reads, t.threshold, t.label) == (120.0, PRODUCTION, 45, "p99_latency_ms > 45: rollback")
    assert trigger(action="abort_rollout").reads == CANDIDATE
    assert Policy().triggers == []
    # The slo: section is the first trigger of every policy, and keeps its meaning: N failing evaluations in a row roll back.
    (slo,) = Policy.model_validate({"slo": {"consecutive_failures": 4}}).feedback_triggers
    assert (slo.metric, slo.above, slo.times, slo.action, slo.label) == (SLO_METRIC, 0, 4, ROLLBACK, "slo")
    assert [t.label for t in p.feedback_triggers] == ["slo", "p99_latency_ms > 45: rollback"]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"promql": "up"}, "metric \\(a name\\) or promql, not both"),
        ({"below": 1}, "one of above and below"),
        ({"action": "run_job"}, "job names the job"),
        ({"job": "x"}, "job names the job"),
        ({"action": "page"}, "action"),
        ({"metric": None, "promql": 'sum(up{model="$model"})'}, "must select one version"),
        ({"for": "soon"}, "not a duration"),
        ({"version": "both"}, "production or candidate"),
        ({"metric": "slo", "window": "1m"}, "set them there"),
        ({"metric": None, "promql": 'sum(up{version="$version"})', "min_samples": 5}, "in its own PromQL"),
        ({"times": 0}, "times"),
    ],
)
def test_a_trigger_that_cannot_be_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        trigger(**fields)


def test_a_trigger_reads_its_tasks_metric_or_its_own_promql_for_one_version():
    promql, samples = trigger_query(trigger(), "m", "3", CLASSIFICATION)
    assert 'version="3"' in promql and "histogram_quantile" in promql and 'version="3"' in samples
    own = trigger(metric=None, promql='sum(rate(x{model="$model",version="$version"}[1m]))')
    assert trigger_query(own, "m", "3", CLASSIFICATION) == ('sum(rate(x{model="m",version="3"}[1m]))', None)
    with pytest.raises(ModelcdError, match="'p99_latency_ms', which is not a metric of causal-lm models \\(p99_ttft_ms"):
        refuse_foreign_triggers(CAUSAL_LM, [trigger()], "the policy file")
    refuse_foreign_triggers(CAUSAL_LM, [trigger(metric="p99_ttft_ms")], "the policy file")


def test_a_trigger_fires_once_after_holding_and_no_data_neither_starts_nor_resets_it():
    t, held = trigger(), Held("3")
    held, fire = step(held, t, Reading(50.0, "q"), now=100.0)
    assert (held.since, fire) == (100.0, False)
    held, fire = step(held, t, Reading(None, "q"), now=105.0)  # no data: the clock goes on
    assert (held.since, fire) == (100.0, False)
    held, fire = step(held, t, Reading(60.0, "q"), now=110.0)
    assert fire and held.fired
    held, fire = step(held, t, Reading(70.0, "q"), now=120.0)
    assert not fire  # once per version while it holds
    held, fire = step(held, t, Reading(10.0, "q"), now=130.0)
    assert held == Held("3")  # it stopped holding: it may fire again later
    assert Held.of({"version": "3", "since": 1.0, "fired": True}, "4") == Held("4")  # another version starts afresh
    assert firing_name(t, 0) == "0:p99_latency_ms_45_rollback"


def test_a_trigger_with_times_fires_after_that_many_readings_in_a_row_and_keeps_their_evaluations():
    t = TriggerPolicy.of_slo(3)
    failing = [Reading(1.0, "q", {"outcome": "fail", "n": i}) for i in range(4)]
    held, fire = step(Held("3"), t, failing[0], now=0.0)
    held, fire = step(held, t, Reading(None, "q", {"outcome": "inconclusive"}), now=1.0)  # neither counts nor resets
    assert (held.count, fire) == (1, False)
    held, fire = step(held, t, failing[1], now=2.0)
    assert (held.count, fire) == (2, False)
    again, _ = step(held, t, Reading(0.0, "q", {"outcome": "pass"}), now=3.0)
    assert again == Held("3")  # a pass resets the streak
    held, fire = step(held, t, failing[2], now=3.0)
    assert fire and [e["n"] for e in held.evaluations] == [0, 1, 2]
    held, fire = step(held, t, failing[3], now=4.0)
    assert not fire and [e["n"] for e in held.evaluations] == [1, 2, 3]  # the last `times` kept
    assert Held.of(held.as_dict(), "3") == held and Held.of(held.as_dict(), "3").evaluations == held.evaluations
