"""registry_sensor's tick time against the number of registered models: 120 models (130 versions) and 10, same registry.

Run: python bench/bench_sensor_tick.py [--backend-uri URI]
A throwaway MLflow registry (SQLite under a temporary folder, or --backend-uri, e.g. a PostgreSQL database from
scripts/postgres.sh) gets candidate models with one version each (every 12th has two) and a base model. The sensor is
evaluated as the daemon evaluates it (page size 100, MLflow's default): first tick (every version new), then a tick
with nothing new, --ticks times each; also the registry calls one tick makes. Writes bench/results/sensor_tick.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import dagster as dg
from machine import machine
from mlflow import MlflowClient

from modelcd_assets.defs.sensors.registry_sensor import registry_sensor
from modelcd_assets.lib.release.registry import ROLE
from modelcd_assets.resources.registry import MlflowRegistryResource

RESULTS = Path(__file__).parent / "results" / "sensor_tick.json"
SEARCHES = ("search_registered_models", "search_model_versions")


def populate(client: MlflowClient, models: int, source: str, prefix: str) -> int:
    versions = 0
    for i in range(models):
        name = f"{prefix}-{i:03d}"
        client.create_registered_model(name, tags={ROLE: "candidate"})
        for _ in range(2 if i % 12 == 0 else 1):
            client.create_model_version(name, source=source)
            versions += 1
    return versions


def ticks(resource: MlflowRegistryResource, n: int) -> dict:
    calls = []
    originals = {m: getattr(MlflowClient, m) for m in SEARCHES}
    for m, real in originals.items():
        setattr(MlflowClient, m, lambda self, *a, _real=real, _m=m, **kw: (calls.append(_m), _real(self, *a, **kw))[1])
    try:
        first, quiet = [], []
        for _ in range(n):
            with dg.instance_for_test() as instance:
                start = time.perf_counter()
                result = registry_sensor(dg.build_sensor_context(instance=instance, resources={"registry": resource}))
                first.append(time.perf_counter() - start)
                launched = len(result.run_requests)
                calls_first = len(calls)
                instance.add_dynamic_partitions("candidates", [r.partition_key for r in result.run_requests])
                start = time.perf_counter()
                registry_sensor(dg.build_sensor_context(instance=instance, cursor=result.cursor, resources={"registry": resource}))
                quiet.append(time.perf_counter() - start)
                calls.clear()
    finally:
        for m, real in originals.items():
            setattr(MlflowClient, m, real)
    return {
        "first_tick_seconds_median": statistics.median(first),
        "quiet_tick_seconds_median": statistics.median(quiet),
        "runs_launched": launched,
        "registry_search_calls_first_tick": calls_first,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend-uri", help="an empty MLflow backend store (default: SQLite in a temporary folder)")
    ap.add_argument("--ticks", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        uri = args.backend_uri or f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        source = Path(tmp).as_uri()
        resource = MlflowRegistryResource(tracking_uri=uri, artifact_location=str(Path(tmp) / "artifacts"))
        client.create_registered_model("base", tags={ROLE: "base"})  # never launched
        rows = {}
        total = 0
        for models in (10, 120):  # 10 first, then 110 more: the same registry at two sizes
            total += populate(client, models - sum(r["models"] for r in rows.values()), source, f"m{models}")
            rows[str(models)] = {"models": models, "versions": total, **ticks(resource, args.ticks)}
            print(
                f"{models} models, {total} versions: first tick {rows[str(models)]['first_tick_seconds_median']:.2f} s, quiet tick"
                f" {rows[str(models)]['quiet_tick_seconds_median']:.2f} s, {rows[str(models)]['registry_search_calls_first_tick']} search"
                " calls",
                flush=True,
            )
    backend = "PostgreSQL" if uri.startswith("postgresql") else "SQLite"
    result = {"machine": machine(), "backend": backend, "page_size": resource.page_size, "ticks": args.ticks, "sizes": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
