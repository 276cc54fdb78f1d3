"""gate_selftest: the fault sandbox run against a model's current production; its table and interception rate in the UI."""

import json
import os
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.errors import ModelcdError, RegistryUnavailable
from modelcd_assets.lib.operations.instance_config import PG_URL_VAR
from modelcd_assets.lib.operations.processes import interrupt_process, start_process
from modelcd_assets.lib.release.signing import SIGNING_KEY_ENV, VERIFY_KEY_ENV
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

OUTPUT_TAIL = 40  # lines of the sandbox's output an error quotes


class SelftestConfig(dg.Config):
    model: str = Field("ticket-intent", description="Registered model whose production the fault classes are derived from")
    controls: int = Field(10, ge=0, description="Clean controls: half byte-identical re-registrations, half retrained with other seeds")
    under_load: bool = Field(True, description="Gate half of the controls beside a server under load, as in production use")
    only: list[str] = Field(default_factory=list, description="Run only these fault classes (default: all)")


def selftest_command(config: SelftestConfig, report: Path) -> list[str]:
    """`modelcd faults run` for this config, writing its report as JSON to report."""
    argv = [
        sys.executable,
        "-m",
        "modelcd_assets.cli",
        "faults",
        "run",
        "--name",
        config.model,
        "--controls",
        str(config.controls),
        "--json",
        str(report),
        "--no-progress",
    ]
    if config.only:
        argv += ["--only", *config.only]
    if not config.under_load:
        argv.append("--no-load")
    return argv


@dg.asset(group_name="selftest", kinds={"mlflow"})
def gate_selftest(
    context: dg.AssetExecutionContext,
    config: SelftestConfig,
    registry: MlflowRegistryResource,
    policy: PolicyResource,
    state: LocalStateResource,
) -> dg.MaterializeResult:
    """Every fault class and the clean controls, gated in an isolated copy of production; production never moves.

    The sandbox is `modelcd faults run --json`, started as its own process on this run's registry, data and policies: the code
    location never imports the fault sandbox, and the sandbox's own Dagster instance never mixes with this one.
    """
    keys = registry.registry().keys  # production's files are fetched from the user's registry, verified with the user's public key
    with tempfile.TemporaryDirectory(prefix="modelcd-selftest-") as tmp:
        report_file = Path(tmp) / "selftest.json"
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": registry.tracking_uri,
            "MODELCD_MLFLOW_ARTIFACTS": registry.artifact_location,
            "MODELCD_HOME": str(state.root),
            "MODELCD_DATA": state.data_dir,
            "MODELCD_POLICY_DIR": policy.policy_dir,
            SIGNING_KEY_ENV: str(keys.private),
            VERIFY_KEY_ENV: str(keys.public),
            # The CLI writes the instance file of the DAGSTER_HOME it is given: never this run's. The sandbox gates in an
            # instance of its own either way.
            "DAGSTER_HOME": str(Path(tmp) / "dagster"),
            PG_URL_VAR: "",
        }
        proc = start_process(
            selftest_command(config, report_file),
            die_with_parent=True,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        tail: deque[str] = deque(maxlen=OUTPUT_TAIL)
        try:
            for line in proc.stdout:
                if line.strip():
                    tail.append(line.rstrip())
                    context.log.info(line.rstrip())
            code = proc.wait()
        except BaseException:  # the run was stopped: the sandbox cleans up after itself (its folder, its instance), then goes
            interrupt_process(proc)
            raise
        if not report_file.is_file():
            last = "\n".join(tail)
            if code == 1 and "registry unavailable" in last:  # the CLI's exit 1: the user's registry did not answer
                raise RegistryUnavailable(f"'modelcd faults run' could not read the registry; nothing was judged. Its last output:\n{last}")
            raise ModelcdError(f"'modelcd faults run' exited {code} without a report; nothing was judged. Its last output:\n{last}")
        report = json.loads(report_file.read_text())
    return dg.MaterializeResult(
        metadata={
            "passed": report["ok"],
            "interception_rate": report["interception_rate"],
            "classes_in_expected_outcome": f"{report['caught']}/{report['reproduced']}",
            "not_in_expected_outcome": ", ".join(report["missed"]) or "none",
            # Counted apart, neither caught nor missed: the fault could not be produced on this model, with what was measured.
            "not_reproducible": "; ".join(f"{name}: {detail}" for name, detail in report["not_reproducible_details"].items()) or "none",
            "false_blocks": f"{report['false_blocks']}/{report['controls']}",
            "false_block_rate": report["false_block_rate"],
            "false_block_upper_95": report["false_block_upper_95"],
            "production": report["production"],
            "classes": dg.MetadataValue.md(report["markdown"]["classes"]),
            "controls": dg.MetadataValue.md(report["markdown"]["controls"]),
            "summary": dg.MetadataValue.md("\n".join(f"- {line}" for line in report["summary"])),
        }
    )
