"""The registry through a real `mlflow server` (as on Kubernetes): files go through the server's proxied artifact store.

The Host check of the cluster's server (k8s/manifests/mlflow.yaml) is tested on that manifest's own command in
modelcd_assets_tests/k8s/test_mlflow_server.py.
"""

from __future__ import annotations

import socket
import sys
import time

import httpx
import pytest

from modelcd_assets.lib.operations.processes import start_process, stop_process
from modelcd_assets.lib.release.registry import CONTENT, Registry
from modelcd_assets.lib.release.signing import SIGNATURE_FILE, Keys, init_keys

SERVICE_HOST = "mlflow.modelcd.svc.cluster.local:5000"  # the in-cluster name clients use


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(root / "server.log", "w")
    proc = start_process(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--serve-artifacts",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--allowed-hosts",
            f"127.0.0.1:{port},{SERVICE_HOST}",
        ],
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not come up: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield url, root
    finally:
        stop_process(proc)
        log.close()


def test_registration_through_the_server_stores_files_as_mlflow_artifacts_and_fetches_them_verified(mlflow_server, tiny_base, tmp_path):
    url, root = mlflow_server
    keys = init_keys(Keys(tmp_path / "keys" / "signing.key", tmp_path / "keys" / "signing.pub"))
    reg = Registry(url, artifact_location="", keys=keys)  # the server's own artifact store
    ref = reg.register(tiny_base, "served-model")
    mv = reg.version(ref)
    assert mv.source.startswith("mlflow-artifacts:/"), mv.source
    assert any((root / "artifacts").rglob("model.safetensors"))  # the server wrote them, not this process's folder
    assert any((root / "artifacts").rglob(SIGNATURE_FILE))  # the signature travels with the version
    got = reg.fetch(ref, tmp_path / "fetched")
    assert (got / "config.json").read_bytes() == (tiny_base / "config.json").read_bytes()
    assert reg.tags(ref)[CONTENT] == reg.verify_local(ref, got)
    # A version's signed verdict is stored with it through the server, and "none" is an answer, not an error.
    assert reg.attestation(ref) is None
    reg.put_attestation(ref, {"payload": "e30=", "payloadType": "application/vnd.in-toto+json", "signatures": []})
    assert reg.attestation(ref)["payload"] == "e30="


def test_an_empty_artifact_location_needs_a_tracking_server(tmp_path):
    from modelcd_assets.lib.errors import ModelcdError

    with pytest.raises(ModelcdError, match="not a tracking server that stores artifacts itself"):
        Registry(f"sqlite:///{tmp_path / 'db'}", artifact_location="")._artifact_uri()
    assert Registry("http://mlflow:5000", artifact_location="mlflow-artifacts:/modelcd")._artifact_uri() == "mlflow-artifacts:/modelcd"
    assert Registry("http://mlflow:5000", artifact_location=str(tmp_path / "a"))._artifact_uri() == (tmp_path / "a").as_uri()
