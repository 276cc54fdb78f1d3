"""The MLflow server command of manifests/mlflow.yaml, run here: the Service's host names only, authentication on
every request but /health, and the two users k8s/mlflow_users.py makes doing what modelcd's pods do, and no more.

The server runs as the manifest says (basic-auth, its environment, --serve-artifacts), with SQLite in place of
PostgreSQL for both stores, on loopback and a free port. The clients are MLflow's own, with credentials from the
environment as the pods get them (MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD).
"""

import base64
import configparser
import importlib.util
import os
import re
import secrets
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from packaging.requirements import Requirement

from modelcd_assets.lib.operations.processes import start_process, stop_process
from modelcd_assets_tests.k8s.files import K8S, manifest
from modelcd_assets_tests.serving.conftest import free_port

POD = manifest("Deployment", "modelcd-mlflow")["spec"]["template"]["spec"]
CONTAINER = POD["containers"][0]
ENV = manifest("ConfigMap", "modelcd-env")["data"]
HOME = ENV["MODELCD_HOME"]
SERVICE_PORT = manifest("Service", "modelcd-mlflow")["spec"]["ports"][0]["port"]
STARTUP_TIMEOUT = 180
ADMIN = "admin"
WRITER, READER = "modelcd-writer", "modelcd-reader"
MODEL = "ticket-intent"


AUTH_CONFIG_LINE = re.compile(r'"((?:\[mlflow\]|default_permission =|database_uri =|admin_username =)[^"]*)"')


def readme_auth_config() -> configparser.ConfigParser:
    """The basic_auth.ini k8s/README.md has the operator put in the Secret modelcd-mlflow-auth, its lines as written."""
    lines = AUTH_CONFIG_LINE.findall((K8S / "README.md").read_text())
    assert lines[0] == "[mlflow]" and len(lines) == 4, lines
    config = configparser.ConfigParser(interpolation=None)
    config.read_string("\n".join(lines))
    return config


def manifest_env_values() -> dict[str, str]:
    """The environment the manifest sets literally (no Secret behind it)."""
    return {e["name"]: e["value"] for e in CONTAINER["env"] if "value" in e}


def status(url: str, path: str, host: str, user: tuple[str, str] | None = None) -> int | None:
    headers = {"Host": host}
    if user:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, headers=headers), timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


class Server:
    def __init__(self, url: str, passwords: dict[str, str]):
        self.url, self.passwords = url, passwords

    def creds(self, user: str) -> tuple[str, str]:
        return user, self.passwords[user]

    @contextmanager
    def as_user(self, user: str | None):
        """MLflow's clients read the credentials from the environment on every request, as in the pods."""
        saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
        if user is None:
            for k in saved:
                os.environ.pop(k, None)
        else:
            os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = self.creds(user)
        try:
            yield MlflowClient(tracking_uri=self.url, registry_uri=self.url)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def test_the_image_installs_mlflows_auth_app():
    """`pip install .` in k8s/Dockerfile must bring basic-auth's own requirement (Flask-WTF), the extra mlflow[auth]."""
    pyproject = tomllib.loads((K8S.parent / "pyproject.toml").read_text())
    mlflow = [r for r in map(Requirement, pyproject["project"]["dependencies"]) if r.name == "mlflow"]
    assert mlflow and "auth" in mlflow[0].extras, f"pyproject.toml depends on {[str(r) for r in mlflow]}, not on mlflow[auth]"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if importlib.util.find_spec("flask_wtf") is None:
        pytest.fail(
            "MLflow's basic-auth app needs Flask-WTF, which is not installed here: pyproject.toml must depend on "
            "mlflow[auth] (then make install)"
        )
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    # The manifest's command with this environment's mlflow, on loopback and a free port, its volume under tmp. The
    # port-forward addresses it allows name that port, as a port-forward to it would; the Service's names keep theirs.
    argv = [str(Path(sys.executable).with_name("mlflow"))]
    for arg in CONTAINER["command"][1:]:
        if arg.startswith("--host="):
            arg = "--host=127.0.0.1"
        elif arg.startswith("--port="):
            arg = f"--port={port}"
        elif arg.startswith("--allowed-hosts="):
            arg = arg.replace(f"localhost:{SERVICE_PORT}", f"localhost:{port}").replace(f"127.0.0.1:{SERVICE_PORT}", f"127.0.0.1:{port}")
        argv.append(arg.replace(HOME, str(tmp / "state")))
    config = readme_auth_config()
    config["mlflow"]["database_uri"] = f"sqlite:///{tmp / 'auth.db'}"  # in place of PostgreSQL's mlflow_auth
    ini = tmp / "basic_auth.ini"
    with open(ini, "w") as f:
        config.write(f)
    passwords = {user: secrets.token_urlsafe(16) for user in (ADMIN, WRITER, READER)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(manifest_env_values())
    env.update(
        {
            "MLFLOW_BACKEND_STORE_URI": f"sqlite:///{tmp / 'mlflow.db'}",
            "MLFLOW_AUTH_CONFIG_PATH": str(ini),
            "MLFLOW_AUTH_ADMIN_PASSWORD": passwords[ADMIN],
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
        }
    )
    log = tmp / "mlflow.log"
    with open(log, "wb") as out:
        proc = start_process(argv, env=env, stdout=out, stderr=subprocess.STDOUT, die_with_parent=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while status(url, "/health", "kubelet") != 200:  # no user and any Host: what the probes send
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not healthy within {STARTUP_TIMEOUT} s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield Server(url, passwords)
    finally:
        stop_process(proc, timeout=30)


@pytest.fixture(scope="module")
def users(server):
    """k8s/mlflow_users.py run as the README says: the admin's credentials and the two passwords in its environment."""
    env = {
        **os.environ,
        "MLFLOW_TRACKING_USERNAME": ADMIN,
        "MLFLOW_TRACKING_PASSWORD": server.passwords[ADMIN],
        "MODELCD_MLFLOW_WRITER_PASSWORD": server.passwords[WRITER],
        "MODELCD_MLFLOW_READER_PASSWORD": server.passwords[READER],
    }
    for _ in range(2):  # a second run finds both users and their grants, and must succeed too
        done = subprocess.run(
            [sys.executable, str(K8S / "mlflow_users.py"), server.url], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return server


@pytest.fixture(scope="module")
def registered(users, tmp_path_factory):
    """What a run pod does as modelcd-writer: a registration run with files, a version, tags, the production alias."""
    folder = tmp_path_factory.mktemp("model")
    (folder / "model.onnx").write_bytes(b"onnx")
    with users.as_user(WRITER) as client:
        experiment = client.get_experiment_by_name("modelcd-registrations")
        experiment_id = experiment.experiment_id if experiment else client.create_experiment("modelcd-registrations")
        run = client.create_run(experiment_id)
        client.log_artifacts(run.info.run_id, str(folder), artifact_path="model")
        client.log_dict(run.info.run_id, {"verdict": "pass"}, f"attestations/{MODEL}-1.intoto.json")
        client.set_terminated(run.info.run_id)
        client.create_registered_model(MODEL, tags={"modelcd.role": "candidate"})
        mv = client.create_model_version(
            MODEL, source=f"{run.info.artifact_uri}/model", run_id=run.info.run_id, tags={"modelcd.kind": "full"}
        )
        client.set_model_version_tag(MODEL, mv.version, "modelcd.semver", "1.0.0")
        client.delete_model_version_tag(MODEL, mv.version, "modelcd.semver")
        client.set_registered_model_tag(MODEL, "modelcd.calibration_sha256", "0" * 64)
        client.set_registered_model_alias(MODEL, "production", mv.version)
    return {"experiment_id": experiment_id, "run": run, "version": mv.version}


def test_service_host_names_are_served_and_others_refused(server):
    admin = server.creds(ADMIN)
    search = "/api/2.0/mlflow/experiments/search?max_results=1"
    assert status(server.url, search, f"modelcd-mlflow:{SERVICE_PORT}", admin) == 200
    assert status(server.url, search, f"modelcd-mlflow.modelcd.svc.cluster.local:{SERVICE_PORT}", admin) == 200
    assert status(server.url, search, f"attacker.example:{SERVICE_PORT}", admin) == 403


@pytest.mark.parametrize(
    "path",
    [
        "/api/2.0/mlflow/experiments/search?max_results=1",
        "/api/2.0/mlflow/registered-models/search",
        "/api/2.0/mlflow-artifacts/artifacts?path=0",
    ],
)
def test_a_request_without_a_user_is_refused(server, path):
    assert status(server.url, path, f"modelcd-mlflow:{SERVICE_PORT}") == 401
    assert status(server.url, path, f"modelcd-mlflow:{SERVICE_PORT}", (ADMIN, "not-the-password")) == 401


def test_auth_config_grants_nothing_by_default():
    assert readme_auth_config()["mlflow"]["default_permission"] == "NO_PERMISSIONS"
    assert "--app-name=basic-auth" in CONTAINER["command"]


def test_a_user_without_grants_reads_nothing(users, registered):
    """default_permission = NO_PERMISSIONS: a user the admin made but granted nothing sees no model, version or run."""
    from mlflow.server import get_app_client

    users.passwords["nobody"] = secrets.token_urlsafe(16)
    with users.as_user(ADMIN):
        get_app_client("basic-auth", tracking_uri=users.url).create_user("nobody", users.passwords["nobody"])
    with users.as_user("nobody") as client:
        for read in (
            lambda: client.get_registered_model(MODEL),
            lambda: client.get_model_version_by_alias(MODEL, "production"),
            lambda: client.get_run(registered["run"].info.run_id),
            lambda: client.get_experiment(registered["experiment_id"]),
        ):
            with pytest.raises(MlflowException, match="PERMISSION_DENIED|403"):
                read()
        assert client.search_registered_models() == []


def test_writer_does_what_run_pods_do(registered):
    assert registered["version"] == "1"


def test_reader_reads_what_the_server_and_sensors_read(users, registered, tmp_path):
    with users.as_user(READER) as client:
        (model,) = client.search_registered_models(filter_string="tags.`modelcd.role` = 'candidate'")
        assert model.name == MODEL
        assert client.get_model_version_by_alias(MODEL, "production").version == registered["version"]
        assert [v.version for v in client.search_model_versions(f"name='{MODEL}'")] == [registered["version"]]
        mv = client.get_model_version(MODEL, registered["version"])
        got = Path(client.download_artifacts(registered["run"].info.run_id, "model", str(tmp_path)))
        assert (got / "model.onnx").read_bytes() == b"onnx"
        assert client.get_run(mv.run_id).info.status == "FINISHED"


@pytest.mark.parametrize(
    "write",
    [
        lambda c, r: c.set_registered_model_alias(MODEL, "production", r["version"]),
        lambda c, r: c.set_model_version_tag(MODEL, r["version"], "modelcd.promotion", "{}"),
        lambda c, r: c.create_model_version(MODEL, source=f"{r['run'].info.artifact_uri}/model", run_id=r["run"].info.run_id),
        lambda c, r: c.log_dict(r["run"].info.run_id, {"verdict": "pass"}, f"attestations/{MODEL}-2.intoto.json"),
        lambda c, r: c.set_registered_model_tag(MODEL, "modelcd.role", "base"),
        lambda c, r: c.delete_registered_model_alias(MODEL, "production"),
        lambda c, r: c.set_terminated(r["run"].info.run_id, "FAILED"),
    ],
    ids=["move-production", "tag-version", "create-version", "upload-artifact", "tag-model", "delete-alias", "change-run"],
)
def test_reader_can_change_nothing(users, registered, write):
    with users.as_user(READER) as client:
        with pytest.raises((MlflowException, requests.HTTPError)) as e:
            write(client, registered)
    assert "403" in str(e.value) or "PERMISSION_DENIED" in str(e.value), str(e.value)
    with users.as_user(READER) as client:
        assert client.get_model_version_by_alias(MODEL, "production").version == registered["version"]


@pytest.mark.parametrize("user", [WRITER, READER])
def test_neither_user_can_create_users_or_change_grants(users, user):
    from mlflow.server import get_app_client

    with users.as_user(user):
        client = get_app_client("basic-auth", tracking_uri=users.url)
        with pytest.raises(MlflowException, match="403|PERMISSION_DENIED"):
            client.create_user(f"made-by-{user}", "some-password-1")
        with pytest.raises(MlflowException, match="403|PERMISSION_DENIED"):
            client.grant_user_permission(user, "registered_model", "*", "MANAGE")


def test_artifacts_under_a_fixed_root_are_the_admins_alone(users):
    """Why modelcd-env leaves MODELCD_MLFLOW_ARTIFACTS empty: a root such as mlflow-artifacts:/modelcd names no experiment,
    and basic-auth judges a proxied artifact by its experiment, so even modelcd-writer could not upload under it."""
    assert ENV["MODELCD_MLFLOW_ARTIFACTS"] == ""
    with users.as_user(WRITER) as client:
        experiment_id = client.create_experiment("fixed-root", artifact_location="mlflow-artifacts:/modelcd")
        run = client.create_run(experiment_id)
        with pytest.raises(requests.HTTPError, match="403"):
            client.log_dict(run.info.run_id, {}, "x.json")
