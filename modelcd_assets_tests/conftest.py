"""Tiny models built from configs, a throwaway state folder per test module, and crafted candidates."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["pytester", "modelcd_assets_tests.process_leaks", "modelcd_assets_tests.postgres_server", "modelcd_assets_tests.tiny_lm"]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from safetensors.torch import load_file, save_file  # noqa: E402

from modelcd_assets.lib.classifier.base_model import build_tiny_base  # noqa: E402
from modelcd_assets.lib.classifier.training import Training, train_adapter, train_classifier  # noqa: E402
from modelcd_assets.lib.demo.replies import write_chat_splits  # noqa: E402
from modelcd_assets.lib.demo.tickets import LABELS, generate, write_splits  # noqa: E402
from modelcd_assets.lib.operations.instance_config import PG_URL_VAR, normalize_pg_url  # noqa: E402
from modelcd_assets.lib.operations.settings import local_defaults  # noqa: E402
from modelcd_assets.lib.release.alias_lock import FileAliasLock  # noqa: E402
from modelcd_assets.lib.release.registry import Registry  # noqa: E402
from modelcd_assets.lib.release.signing import SIGNING_KEY_ENV, VERIFY_KEY_ENV, Keys, init_keys  # noqa: E402

# The production alias's lock for tests that move an alias by hand, as every writer must (lib/release/alias_lock.py).
TEST_LOCK = FileAliasLock(Path(tempfile.mkdtemp(prefix="mcd-alias-locks-")))
# The tiny model's policy where a module gates several candidates. The INT8 variant is pinned: with `auto`, two
# FP32-equivalent models may get different variants (the fastest differs), and on a 2-layer model that alone moves
# accuracy by ~0.4 points. An inconclusive throughput verdict passes: on a loaded 2-core machine a clean candidate's CI
# can straddle the threshold, and that is not what those modules test (the inconclusive path is tested in
# lib/judging/test_gates.py); a clearly slow candidate still fails (test_gated_pipeline's crafted 'slow' case).
TINY_GATED_POLICY = (
    "accuracy:\n  absolute_floor: 0.6\nquantization:\n  variant: dynamic\nthroughput:\n  p99_slo_ms: 250\n  on_inconclusive: pass\n"
)


@dataclass(frozen=True)
class Env:
    home: Path
    env: dict[str, str]

    @property
    def registry(self) -> Registry:
        return Registry.from_env(self.env)

    @property
    def data(self) -> Path:
        return Path(self.env["MODELCD_DATA"])

    def sensor_resources(self, prometheus_url: str) -> dict:
        """The resources trigger_sensor and rollout_sensor take, bound to this state folder and a Prometheus."""
        from modelcd_assets.resources.policy import PolicyResource
        from modelcd_assets.resources.prometheus import PrometheusResource
        from modelcd_assets.resources.registry import MlflowRegistryResource
        from modelcd_assets.resources.state import LocalStateResource

        return {
            "registry": MlflowRegistryResource(
                tracking_uri=self.env["MLFLOW_TRACKING_URI"], artifact_location=self.env["MODELCD_MLFLOW_ARTIFACTS"]
            ),
            "policy": PolicyResource(policy_dir=self.env["MODELCD_POLICY_DIR"]),
            "prometheus": PrometheusResource(url=prometheus_url),
            "state": LocalStateResource(home=self.env["MODELCD_HOME"], data_dir=self.env["MODELCD_DATA"]),
        }

    def policy(self, model_name: str, text: str) -> Path:
        path = Path(self.env["MODELCD_POLICY_DIR"]) / f"{model_name}.yaml"
        path.write_text(text)
        return path


@pytest.fixture(autouse=True)
def _stop_signals_as_they_were():
    """Tests that run Dagster in process themselves (dg.materialize) would leave SIGTERM mapped onto SIGINT's handler,
    which is SIG_IGN when the suite was started in the background; every later child would then ignore SIGTERM."""
    from modelcd_assets.lib.operations.processes import preserved_stop_signals

    with preserved_stop_signals():
        yield


_registry_keys: dict[str, Keys] = {}  # PostgreSQL URL -> the key pair of the registry on it


def make_env(home: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str = "") -> Env:
    """Embedded defaults under home, exported for Dagster's EnvVar resources: SQLite, or the Postgres server pg_url names.

    MODELCD_PG_URL is always set (empty for SQLite), so a developer's exported URL never switches a test's storage."""
    env = {**local_defaults(home, normalize_pg_url(pg_url) if pg_url else ""), PG_URL_VAR: normalize_pg_url(pg_url) if pg_url else ""}
    if pg_url:  # every state folder on this server shares its registry, so they share the key its versions are signed with
        keys = _registry_keys.setdefault(
            pg_url, Keys(*(Path(tempfile.mkdtemp(prefix="mcd-keys-")) / f for f in ("signing.key", "signing.pub")))
        )
        env.update({SIGNING_KEY_ENV: str(keys.private), VERIFY_KEY_ENV: str(keys.public)})
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("MODELCD_DATA", "MODELCD_POLICY_DIR", "MODELCD_MLFLOW_ARTIFACTS", "DAGSTER_HOME"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    write_splits(Path(env["MODELCD_DATA"]))
    write_chat_splits(Path(env["MODELCD_DATA"]))
    keys = Keys.from_env(env)
    if not keys.private.exists():  # a state folder's own key pair, as 'modelcd keys init' makes it
        init_keys(keys)
    return Env(home, env)


def module_state_fixtures(name: str, policies: dict[str, str], backends: tuple[str, ...] = ("sqlite",)):
    """Module-scoped fixtures `env` (a state folder, its policies written and exported to the environment) and
    `instance` (a Dagster instance on it), for a test module that gates several candidates in one state:
    `env, instance = module_state_fixtures("name", {MODEL: POLICY})`.

    backends ("sqlite", "postgres"): the module runs once per backend; on "postgres", Dagster's storage and MLflow's
    backend store are on the session's PostgreSQL server (postgres_server.py) and its tests are marked postgres."""
    import dagster as dg

    params = [b if b == "sqlite" else pytest.param(b, marks=pytest.mark.postgres) for b in backends]

    @pytest.fixture(scope="module", params=params)
    def env(request, tmp_path_factory):
        pg_url = request.getfixturevalue("pg_server").url if request.param == "postgres" else ""
        mp = pytest.MonkeyPatch()
        e = make_env(tmp_path_factory.mktemp(f"{name}-{request.param}") / "home", mp, pg_url)
        for model, text in policies.items():
            e.policy(model, text)
        yield e
        mp.undo()

    @pytest.fixture(scope="module")
    def instance(env):
        if env.env[PG_URL_VAR]:  # the instance file modelcd writes for Postgres, as every modelcd command loads it
            from modelcd_assets.lib.operations.settings import apply_local_defaults

            apply_local_defaults(dict(env.env))
            with dg.DagsterInstance.get() as inst:
                assert type(inst.run_storage).__name__ == "PostgresRunStorage"
                yield inst
            return
        with dg.instance_for_test(temp_dir=env.env["DAGSTER_HOME"]) as inst:
            yield inst

    return env, instance


def closed_port_uri(monkeypatch: pytest.MonkeyPatch) -> str:
    """An MLflow tracking URI on a port nothing listens on (bound and closed), with MLflow's HTTP retries off and a short timeout."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    return f"http://user:secret@127.0.0.1:{port}"


@pytest.fixture
def modelcd_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    return make_env(tmp_path / "home", monkeypatch)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer BERT classifier (hidden 32) with MiniLM's tokenizer."""
    return build_tiny_base(tmp_path_factory.mktemp("tiny") / "random", list(LABELS))


@pytest.fixture(scope="session")
def tiny_trained(tiny_base: Path, tmp_path_factory) -> Path:
    """The tiny classifier fine-tuned on the synthetic tickets: about 89% accurate."""
    return train_classifier(
        tiny_base, generate(3000, 1), tmp_path_factory.mktemp("tiny") / "trained", Training(steps=150, learning_rate=3e-3), desc="tiny"
    )


@pytest.fixture(scope="session")
def tiny_adapters(tiny_trained: Path, tmp_path_factory) -> dict[str, Path]:
    """LoRA adapters on the trained tiny classifier; they declare the base as models:/tiny-base/1."""
    root = tmp_path_factory.mktemp("adapters")
    train = generate(3000, 1)
    return {
        "good": train_adapter(
            tiny_trained, train, root / "good", Training(steps=10, learning_rate=1e-4, rank=4, alpha=8, seed=3), "models:/tiny-base/1"
        ),
        # A second passable adapter, different weights: serving swaps between the two. The same seed as good, so the two differ
        # only by their step size: with another seed (5), on an AVX2-only AMD EPYC, its INT8 disagreed with good's on 45 of
        # the 2,400 evaluation texts, 42 of them against it, and the paired accuracy gate rightly blocked it (p=4.3e-10).
        # The step is 3x good's: at 1.2x the two versions' logits were 3.7e-4 apart at the closest request, too close for
        # test_live_swaps to tell a mixed response from a served one (it asks for 50x its 1e-5 tolerance); at 3x the
        # closest of 200 texts is 9.6e-4 apart in FP32, and every argmax is good's.
        "good2": train_adapter(
            tiny_trained, train, root / "good2", Training(steps=10, learning_rate=3e-4, rank=4, alpha=8, seed=3), "models:/tiny-base/1"
        ),
        "worse": train_adapter(
            tiny_trained,
            train,
            root / "worse",
            Training(steps=60, learning_rate=3e-3, rank=4, alpha=8, seed=4, label_noise=0.5),
            "models:/tiny-base/1",
        ),
    }


def _copy_model(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _widen_ffn(src: Path, dst: Path, extra: int, bias: float) -> Path:
    """A copy of src whose FFNs gain `extra` neurons with zero input weights, the given bias, and zero outgoing weights."""
    import torch

    d = _copy_model(src, dst)
    w = load_file(str(d / "model.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    for k in list(w):
        if k.endswith("intermediate.dense.weight"):
            w[k] = torch.cat([w[k], torch.zeros(extra, w[k].shape[1])], 0)
        elif k.endswith("intermediate.dense.bias"):
            w[k] = torch.cat([w[k], torch.full((extra,), bias)], 0)
        elif k.endswith("output.dense.weight") and "attention" not in k:
            w[k] = torch.cat([w[k], torch.zeros(w[k].shape[0], extra)], 1)
    save_file({k: v.contiguous() for k, v in w.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    cfg["intermediate_size"] += extra
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="session")
def crafted(tiny_trained: Path, tiny_adapters: dict[str, Path], tmp_path_factory) -> dict[str, Path]:
    """Full-model candidates derived from the good adapter merged into its base (what production runs),
    each built to break one gate and nothing before it."""
    from modelcd_assets.lib.classifier.model_io import merge_adapter

    root = tmp_path_factory.mktemp("crafted")
    good = root / "good-merged"
    merge_adapter(tiny_trained, tiny_adapters["good"], good)
    out = {}
    # INT8-unfaithful: one extra FFN neuron that always fires at 1e4 and feeds nothing (zero outgoing
    # weights). FP32 outputs are unchanged; INT8 activation ranges stretch to 1e4 and every other value rounds to 0.
    out["unfaithful"] = _widen_ffn(good, root / "unfaithful", extra=1, bias=1e4)
    # NaN in the last position-embedding row: outputs are untouched (short inputs never reach it), the weight scan is not.
    d = _copy_model(good, root / "nan_weights")
    w = load_file(str(d / "model.safetensors"))
    w["bert.embeddings.position_embeddings.weight"][-1, 0] = float("nan")
    save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
    out["nan_weights"] = d
    # Label order swapped in the config only: a MAJOR contract change, registered without declaring it.
    d = _copy_model(good, root / "relabelled")
    cfg = json.loads((d / "config.json").read_text())
    names = [cfg["id2label"][str(i)] for i in range(len(cfg["id2label"]))]
    names[0], names[1] = names[1], names[0]
    cfg["id2label"] = {str(i): n for i, n in enumerate(names)}
    cfg["label2id"] = {n: i for i, n in enumerate(names)}
    (d / "config.json").write_text(json.dumps(cfg))
    out["relabelled"] = d
    # Slow: every FFN widened 128-fold with silent neurons. Outputs are identical, compute is not.
    out["slow"] = _widen_ffn(good, root / "slow", extra=127 * 64, bias=0.0)
    return out


def gate_report_page(instance, ref) -> dict:
    """The latest gate_report materialization's metadata for one candidate."""
    import dagster as dg

    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("gate_report"), asset_partitions=[ref.key]), limit=1
    ).records
    assert records, f"no gate_report for {ref.key}"
    return {k: getattr(v, "value", v) for k, v in records[0].asset_materialization.metadata.items()}
