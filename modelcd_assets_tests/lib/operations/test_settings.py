"""The code location's embedded defaults: the CLI's, for every variable left unset, and a variable that is set wins."""

from pathlib import Path

from modelcd_assets.lib.operations.instance_config import PG_URL_VAR
from modelcd_assets.lib.operations.settings import apply_local_defaults, location_defaults


def test_every_unset_variable_gets_the_clis_default_and_its_folder(tmp_path):
    home = tmp_path / "state"
    filled = location_defaults({"MODELCD_HOME": str(home)})
    cli = {"MODELCD_HOME": str(home)}
    apply_local_defaults(cli)
    assert filled == {k: v for k, v in cli.items() if k not in ("DAGSTER_HOME", PG_URL_VAR, "MODELCD_HOME")}
    assert all(Path(filled[k]).is_dir() for k in ("MODELCD_DATA", "MODELCD_POLICY_DIR", "MODELCD_MLFLOW_ARTIFACTS"))


def test_a_variable_that_is_set_wins_even_when_empty_and_the_environment_is_left_alone(tmp_path):
    env = {"MODELCD_HOME": str(tmp_path), "MLFLOW_TRACKING_URI": "http://mlflow:5000", "MODELCD_MLFLOW_ARTIFACTS": ""}
    before = dict(env)
    filled = location_defaults(env)
    assert env == before  # nothing written into the environment, and no instance file
    assert not {"MLFLOW_TRACKING_URI", "MODELCD_MLFLOW_ARTIFACTS", "DAGSTER_HOME", "MODELCD_HOME"} & set(filled)
    assert filled["MODELCD_DATA"] == str(tmp_path.resolve() / "data") and not (tmp_path / "dagster").exists()


def test_with_nothing_set_the_state_folder_is_dot_modelcd_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    filled = location_defaults({})
    assert filled["MODELCD_DATA"] == str(tmp_path.resolve() / ".modelcd" / "data")
    assert filled["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path.resolve() / '.modelcd' / 'mlflow.db'}"
