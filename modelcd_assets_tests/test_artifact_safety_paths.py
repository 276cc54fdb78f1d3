"""A malicious pickle never runs, whatever path the candidate takes: CLI register, sensor, gate."""

import json
import shutil

import dagster as dg

from modelcd_assets.cli import main
from modelcd_assets.defs.sensors.registry_sensor import registry_sensor
from modelcd_assets.launch import BAD_INPUT, BLOCKED, run_gate
from modelcd_assets.lib.hashing import folder_manifest, manifest_hash
from modelcd_assets.lib.release.registry import CONTENT, KIND, ROLE, CandidateRef
from modelcd_assets.lib.release.signing import SIGNATURE_FILE, sign_folder
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets_tests.lib.judging.test_safety import _onnx_naming, plant_pickle


def _register_outside_modelcd(reg, folder, name, signed: bool = False):
    """What another tool writing straight to MLflow could do: upload the files and tag a matching manifest; signed, with the key."""
    client = reg.client
    exp = reg._experiment_id()
    run = client.create_run(exp)
    if signed:
        client.log_artifact(run.info.run_id, str(sign_folder(folder, reg.keys.private, folder.parent / SIGNATURE_FILE)))
    client.log_artifacts(run.info.run_id, str(folder), artifact_path="model")
    client.set_terminated(run.info.run_id)
    if not client.search_registered_models(f"name='{name}'"):
        client.create_registered_model(name, tags={ROLE: "candidate"})
    tags = {KIND: "full", CONTENT: manifest_hash(folder_manifest(folder))}
    mv = client.create_model_version(name, source=f"{run.info.artifact_uri}/model", run_id=run.info.run_id, tags=tags)
    return CandidateRef(name, str(mv.version))


def test_malicious_pickle_never_runs(modelcd_env, tiny_base, tmp_path, capsys):
    marker = tmp_path / "pwned"
    evil = shutil.copytree(tiny_base, tmp_path / "evil")
    plant_pickle(evil, marker)

    # CLI register: refused with one line, exit 2.
    assert main(["register", str(evil), "--name", "evil-model"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("modelcd: error:")]
    assert len(errors) == 1 and "pytorch_model.bin: pickle-based weights" in errors[0], err
    assert "Traceback" not in err

    # Registered behind modelcd's back, unsigned: the sensor launches it like any other version, and the fetch refuses it
    # before anything in it is read.
    unsigned = _register_outside_modelcd(modelcd_env.registry, evil, "evil-model")
    # Signed by a tool that holds the key but skips modelcd's scan: the artifact_is_safe gate blocks it.
    ref = _register_outside_modelcd(modelcd_env.registry, evil, "evil-model", signed=True)
    resource = MlflowRegistryResource(
        tracking_uri=modelcd_env.env["MLFLOW_TRACKING_URI"], artifact_location=modelcd_env.env["MODELCD_MLFLOW_ARTIFACTS"]
    )
    with dg.instance_for_test(temp_dir=modelcd_env.env["DAGSTER_HOME"]) as instance:
        result = registry_sensor(dg.build_sensor_context(instance=instance, resources={"registry": resource}))
        assert [r.partition_key for r in result.run_requests] == [unsigned.key, ref.key]
        refused = run_gate(unsigned, instance=instance)
        assert refused.outcome == BAD_INPUT and "has no signature" in refused.error
        assert not marker.exists()
        # ...and the gated run it requests is blocked at the candidate, before anything loads weights.
        run = run_gate(ref, instance=instance)
    assert run.outcome == BLOCKED
    rows = {r.gate: r for r in run.rows}
    assert rows["artifact_is_safe"].status == "fail" and "pickle" in rows["artifact_is_safe"].reason
    assert {r.status for g, r in rows.items() if g != "artifact_is_safe"} == {"not run"}
    assert modelcd_env.registry.production("evil-model") is None
    assert not marker.exists()
    assert json.loads((tiny_base / "config.json").read_text())  # the clean source is untouched


def test_size_limit_comes_from_the_policy(modelcd_env, tiny_base, capsys):
    modelcd_env.policy("small-model", "safety:\n  max_file_mb: 0.01\n")
    assert main(["register", str(tiny_base), "--name", "small-model"]) == 2
    assert "over the per-file limit" in capsys.readouterr().err
    assert main(["register", str(tiny_base), "--name", "roomy-model"]) == 0


def test_a_pickle_named_as_onnx_external_data_is_refused_at_registration(modelcd_env, tiny_base, tmp_path, capsys):
    """Issue 17: an ONNX graph naming a file as its external data exempted that file from every content check
    (artifact_is_safe runs the same scan, lib/judging/test_safety.py)."""
    marker = tmp_path / "pwned"
    evil = shutil.copytree(tiny_base, tmp_path / "evil")
    plant_pickle(evil, marker, "weights.data")
    _onnx_naming(evil, ["weights.data"])
    assert main(["register", str(evil), "--name", "evil-model"]) == 2
    err = capsys.readouterr().err
    assert "weights.data: content is a pickle, which can run code when loaded" in err, err
    assert not marker.exists() and modelcd_env.registry.candidate_models() == []
