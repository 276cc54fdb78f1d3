"""registry_sensor: first tick, a tick with nothing new, a tick with several new versions, and no duplicates."""

import json

import dagster as dg

from modelcd_assets.defs.sensors.registry_sensor import registry_sensor
from modelcd_assets.resources.registry import MlflowRegistryResource


def tick(env, cursor=None, existing_partitions=()):
    resource = MlflowRegistryResource(tracking_uri=env.env["MLFLOW_TRACKING_URI"], artifact_location=env.env["MODELCD_MLFLOW_ARTIFACTS"])
    with dg.instance_for_test() as instance:
        if existing_partitions:
            instance.add_dynamic_partitions("candidates", list(existing_partitions))
        ctx = dg.build_sensor_context(cursor=cursor, instance=instance, resources={"registry": resource})
        return registry_sensor(ctx)


def skipped(result) -> bool:
    return isinstance(result, dg.SkipReason) or (not result.run_requests and result.skip_reason is not None)


def test_empty_registry_skips(modelcd_env):
    assert skipped(tick(modelcd_env))


def test_versions_already_gated_elsewhere_are_not_launched_again(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-a")
    result = tick(modelcd_env, existing_partitions=["intent-a:1"])
    assert [r.run_key for r in result.run_requests] == ["intent-a:2"]
    assert json.loads(result.cursor) == {"intent-a": 2}
    both = tick(modelcd_env, existing_partitions=["intent-a:1", "intent-a:2"])
    assert skipped(both) and json.loads(both.cursor) == {"intent-a": 2}


def test_first_tick_then_nothing_new_then_several(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "some-base", role="base")  # bases are never gated

    first = tick(modelcd_env)
    assert [r.run_key for r in first.run_requests] == ["intent-a:1"]
    assert [r.partition_key for r in first.run_requests] == ["intent-a:1"]
    assert first.dynamic_partitions_requests[0].partition_keys == ["intent-a:1"]
    assert json.loads(first.cursor) == {"intent-a": 1}

    quiet = tick(modelcd_env, first.cursor)
    assert skipped(quiet)

    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-b")
    several = tick(modelcd_env, first.cursor)
    keys = [r.run_key for r in several.run_requests]
    assert keys == ["intent-a:2", "intent-a:3", "intent-b:1"]
    assert len(set(keys)) == len(keys)
    assert json.loads(several.cursor) == {"intent-a": 3, "intent-b": 1}

    again = tick(modelcd_env, several.cursor)
    assert skipped(again)
