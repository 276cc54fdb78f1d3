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


def versions(cursor: str) -> dict[str, int]:
    """The highest version seen per model, from a sensor cursor."""
    return {name: seen["version"] for name, seen in json.loads(cursor).items()}


def keys_of(result) -> list[str]:
    return [r.partition_key for r in result.run_requests]


def skipped(result) -> bool:
    return isinstance(result, dg.SkipReason) or (not result.run_requests and result.skip_reason is not None)


def test_empty_registry_skips(modelcd_env):
    assert skipped(tick(modelcd_env))


def test_versions_already_gated_elsewhere_are_not_launched_again(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-a")
    result = tick(modelcd_env, existing_partitions=["intent-a:1"])
    assert keys_of(result) == ["intent-a:2"]
    assert versions(result.cursor) == {"intent-a": 2}
    both = tick(modelcd_env, existing_partitions=["intent-a:1", "intent-a:2"])
    assert skipped(both) and versions(both.cursor) == {"intent-a": 2}


def test_first_tick_then_nothing_new_then_several(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "some-base", role="base")  # bases are never gated

    first = tick(modelcd_env)
    assert keys_of(first) == ["intent-a:1"]
    assert [r.run_key.partition("@")[0] for r in first.run_requests] == ["intent-a:1"]
    assert first.dynamic_partitions_requests[0].partition_keys == ["intent-a:1"]
    assert versions(first.cursor) == {"intent-a": 1}

    quiet = tick(modelcd_env, first.cursor)
    assert skipped(quiet)

    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-b")
    several = tick(modelcd_env, first.cursor)
    keys = keys_of(several)
    assert keys == ["intent-a:2", "intent-a:3", "intent-b:1"]
    assert len({r.run_key for r in several.run_requests}) == len(keys)
    assert versions(several.cursor) == {"intent-a": 3, "intent-b": 1}

    again = tick(modelcd_env, several.cursor)
    assert skipped(again)


def test_120_models_are_found_in_one_tick_with_paged_listings_and_launched_once(modelcd_env, monkeypatch):
    """MLflow returns one page per search (100 registered models by default): listing without paging missed the 101st.

    One listing per model would also cost a registry call per model every tick; the sensor now reads two paged listings.
    """
    import math
    from pathlib import Path

    from mlflow import MlflowClient

    from modelcd_assets.lib.release.registry import ROLE

    client = MlflowClient(tracking_uri=modelcd_env.env["MLFLOW_TRACKING_URI"])
    source = Path(modelcd_env.env["MODELCD_MLFLOW_ARTIFACTS"]).as_uri()  # the sensor reads the registry only, never the files
    expected = []
    for i in range(120):
        name = f"fleet-{i:03d}"
        client.create_registered_model(name, tags={ROLE: "candidate"})
        for _ in range(2 if i % 12 == 0 else 1):  # 130 versions in all
            expected.append(f"{name}:{client.create_model_version(name, source=source).version}")
    client.create_registered_model("fleet-base", tags={ROLE: "base"})
    client.create_model_version("fleet-base", source=source)  # a base's version is never launched
    page = 7
    calls = []
    for method in ("search_registered_models", "search_model_versions", "get_registered_model", "get_model_version", "get_latest_versions"):
        real = getattr(MlflowClient, method)
        monkeypatch.setattr(
            MlflowClient, method, lambda self, *a, _real=real, _m=method, **kw: (calls.append(_m), _real(self, *a, **kw))[1]
        )
    resource = MlflowRegistryResource(
        tracking_uri=modelcd_env.env["MLFLOW_TRACKING_URI"], artifact_location=modelcd_env.env["MODELCD_MLFLOW_ARTIFACTS"], page_size=page
    )
    with dg.instance_for_test() as instance:
        first = registry_sensor(dg.build_sensor_context(instance=instance, resources={"registry": resource}))
        keys = keys_of(first)
        assert sorted(keys) == sorted(expected) and len({r.run_key for r in first.run_requests}) == 130  # exactly one run per NAME:VERSION
        assert sorted(first.dynamic_partitions_requests[0].partition_keys) == sorted(expected)
        # Bounded by pages, not by models: 120 candidate models in pages of 7, 132 versions in pages of 7.
        # Two paged listings: the candidate models (names and creation times, listed once) and the versions.
        assert calls.count("search_registered_models") == math.ceil(120 / page), calls
        assert len(calls) <= math.ceil(121 / page) + math.ceil(132 / page) + 2, calls
        instance.add_dynamic_partitions("candidates", keys)
        second = registry_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"registry": resource}))
    assert skipped(second) and not second.run_requests


def test_a_model_deleted_and_re_created_is_gated_again_under_its_old_version_numbers(modelcd_env, tiny_base, tiny_trained):
    """Re-created, a model restarts at version 1 with other bytes: skipping numbers already gated would let old passes stand for new
    bytes."""
    import time

    reg = modelcd_env.registry
    reg.register(tiny_base, "intent-a")
    first = tick(modelcd_env, existing_partitions=[])
    assert keys_of(first) == ["intent-a:1"]
    assert skipped(tick(modelcd_env, first.cursor, existing_partitions=["intent-a:1"]))
    reg.client.delete_registered_model("intent-a")
    time.sleep(0.01)  # creation times are in milliseconds
    reg.register(tiny_trained, "intent-a")
    again = tick(modelcd_env, first.cursor, existing_partitions=["intent-a:1"])
    assert keys_of(again) == ["intent-a:1"]
    assert again.run_requests[0].run_key != first.run_requests[0].run_key  # a new run, not deduplicated as the old one
    assert versions(again.cursor) == {"intent-a": 1}
    assert skipped(tick(modelcd_env, again.cursor, existing_partitions=["intent-a:1"]))


def test_a_cursor_written_before_creation_times_were_kept_still_skips_what_it_saw(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    reg.register(tiny_base, "intent-a")
    reg.register(tiny_base, "intent-a")
    result = tick(modelcd_env, json.dumps({"intent-a": 1}))
    assert keys_of(result) == ["intent-a:2"] and versions(result.cursor) == {"intent-a": 2}
