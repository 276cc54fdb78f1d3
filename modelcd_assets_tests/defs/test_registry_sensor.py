"""registry_sensor: first tick, a tick with nothing new, a tick with several new versions, and no duplicates."""

import json

import dagster as dg

from modelcd_assets.defs.sensors.registry_sensor import registry_sensor
from modelcd_assets.resources.registry import MlflowRegistryResource


def tick(env, cursor=None):
    resource = MlflowRegistryResource(tracking_uri=env.env["MLFLOW_TRACKING_URI"], artifact_location=env.env["MODELCD_MLFLOW_ARTIFACTS"])
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(cursor=cursor, instance=instance, resources={"registry": resource})
        return registry_sensor(ctx)


def test_empty_registry_skips(modelcd_env):
    result = tick(modelcd_env)
    assert isinstance(result, dg.SkipReason)


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
    assert isinstance(quiet, dg.SkipReason)

    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-b")
    several = tick(modelcd_env, first.cursor)
    keys = [r.run_key for r in several.run_requests]
    assert keys == ["intent-a:2", "intent-a:3", "intent-b:1"]
    assert len(set(keys)) == len(keys)
    assert json.loads(several.cursor) == {"intent-a": 3, "intent-b": 1}

    again = tick(modelcd_env, several.cursor)
    assert isinstance(again, dg.SkipReason)
