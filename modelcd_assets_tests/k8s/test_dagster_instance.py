"""The cluster's dagster.yaml (k8s/dagster-instance.yaml) passes Dagster's own validation and is what the values imply.

Dagster has no public API that validates an instance file without connecting to its storage, so this reaches into
dagster._core.instance.config (what DagsterInstance.from_config runs first) and dagster._config.
"""

import importlib

import pytest
import yaml
from dagster._config import validate_config
from dagster._core.errors import DagsterInvalidConfigError
from dagster._core.instance.config import dagster_instance_config
from dagster._serdes.config_class import ConfigurableClassData

from modelcd_assets_tests.k8s.chart_render import rendered_instance
from modelcd_assets_tests.k8s.files import INSTANCE, VALUES, load_yaml

CLASS_SECTIONS = ("scheduler", "schedule_storage", "run_launcher", "run_storage", "event_log_storage", "run_coordinator", "compute_logs")


def load_instance_file(folder, name) -> dict:
    config, custom_instance_class = dagster_instance_config(str(folder), name)
    assert custom_instance_class is None
    return config


def class_config_problems(section: dict) -> list[str]:
    """Why the class a section names rejects its config; [] when it accepts it. Nothing is instantiated or connected."""
    # ConfigurableClassData maps the chart's dagster.core.* module names to dagster._core.*, as the instance does.
    data = ConfigurableClassData(section["module"], section["class"], yaml.safe_dump(section.get("config") or {}))
    klass = getattr(importlib.import_module(data.module_name), data.class_name)
    result = validate_config(klass.config_type(), data.config_dict)
    return [] if result.success else [error.message for error in result.errors]


def test_instance_file_loads_with_dagster_instance_config_validation():
    config = load_instance_file(INSTANCE.parent, INSTANCE.name)
    assert config["run_retries"] == {"enabled": True, "max_retries": 2, "retry_on_asset_or_op_failure": False}
    assert config["concurrency"]["pools"] == {"default_limit": 1}
    assert config["run_monitoring"]["enabled"] is True


@pytest.mark.parametrize("section", CLASS_SECTIONS)
def test_instance_class_accepts_its_config(section):
    assert class_config_problems(load_yaml(INSTANCE)[section]) == []


def _broken(tmp_path, change) -> tuple:
    config = load_yaml(INSTANCE)
    change(config)
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    return tmp_path, "dagster.yaml"


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.update(run_retry={"enabled": True}),  # misspelt section
        lambda c: c["run_retries"].update(retry_on_asset_or_op_failure="no"),  # not a boolean
        lambda c: c["run_monitoring"].update(start_timeout="600"),  # unknown field
    ],
    ids=["misspelt-section", "retry-flag-not-boolean", "unknown-monitoring-field"],
)
def test_broken_instance_file_fails_dagster_validation(tmp_path, change):
    with pytest.raises(DagsterInvalidConfigError):
        load_instance_file(*_broken(tmp_path, change))


def test_run_launcher_with_an_unknown_field_is_rejected_by_k8s_run_launcher():
    section = load_yaml(INSTANCE)["run_launcher"]
    section["config"]["job_image_pull_policy"] = "Always"
    assert any("job_image_pull_policy" in p for p in class_config_problems(section))


@pytest.mark.parametrize("section", sorted(rendered_instance(load_yaml(VALUES))))
def test_instance_file_section_is_what_the_chart_renders_from_the_values(section):
    assert load_yaml(INSTANCE).get(section) == rendered_instance(load_yaml(VALUES))[section]
