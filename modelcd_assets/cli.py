"""The `modelcd` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError, RegistryUnavailable
from modelcd_assets.lib.operations.settings import apply_local_defaults
from modelcd_assets.lib.tasks.names import DEFAULT_TASK, demo_models, known_tasks

EXIT_PROMOTED, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_BLOCKED = 0, 1, 2, 3


def _registry():
    from modelcd_assets.lib.release.registry import Registry

    return Registry.from_env()


def _without_password(text: object) -> str:
    """An error's text without the registry's password (MLflow's HTTP errors quote the URL they called)."""
    from modelcd_assets.lib.release.registry import masked_text

    return masked_text(text, os.environ.get("MLFLOW_TRACKING_URI", ""))


def _registry_error(e) -> str:
    """An MLflow error no registry method classified, as one line without the registry's password."""
    from modelcd_assets.lib.release.registry import masked_uri

    shown = masked_uri(os.environ.get("MLFLOW_TRACKING_URI", ""))
    return f"{_without_password(e.message)} (registry: {shown}); nothing was decided, retry when the registry answers"


def cmd_register(args) -> int:
    from modelcd_assets.lib.judging.contract import parse_semver
    from modelcd_assets.lib.release.registry import BUMP_DECLARED, SEMVER_DECLARED, TOKENIZER_CHANGE

    tags = {TOKENIZER_CHANGE: "true"} if args.tokenizer_change else {}
    if args.semver and args.bump:
        raise ModelcdError("give either --semver or --bump, not both")
    if args.semver:
        parse_semver(args.semver)
        tags[SEMVER_DECLARED] = args.semver
    if args.bump:
        tags[BUMP_DECLARED] = args.bump
    from modelcd_assets.lib.judging.policy import policy_for

    limits = policy_for(Path(os.environ["MODELCD_POLICY_DIR"]), args.name).safety.limits()
    path = Path(args.path)
    if path.suffix == ".gguf":  # a GGUF checkpoint is registered as the FP32 safetensors folder it de-quantizes to
        from modelcd_assets.lib.causal_lm.base import prepare_causal_lm_base
        from modelcd_assets.lib.hashing import file_sha256

        if not path.is_file():
            raise ModelcdError(f"{path} does not exist; pass a .gguf file, a peft adapter folder or a Hugging Face model folder")
        path = prepare_causal_lm_base(path, Path(os.environ["MODELCD_HOME"]) / "work" / "gguf" / file_sha256(path)[:24])
        print(f"{args.path}: de-quantized to FP32 safetensors in {path}")
    ref = _registry().register(path, args.name, base=args.base, tags=tags, limits=limits, task=args.task)
    print(f"registered {ref.uri} (candidate key {ref.key})")
    return 0


def cmd_contract_diff(args) -> int:
    import json

    from modelcd_assets.lib.judging.contract import required_level
    from modelcd_assets.lib.release.registry import CONTRACT, SEMVER, CandidateRef
    from modelcd_assets.lib.tasks.semver import contract_changes

    reg = _registry()
    contracts = []
    for version in (args.v1, args.v2):
        ref = CandidateRef(args.name, str(version))
        tags = reg.tags(ref)
        if CONTRACT not in tags:
            raise ModelcdError(f"{ref.uri} has no recorded contract yet; run 'modelcd gate {args.name} {version}' first")
        contracts.append((json.loads(tags[CONTRACT]), tags.get(SEMVER, "?")))
    (old, old_semver), (new, new_semver) = contracts
    ids_changed = old["tokenizer_sha256"] != new["tokenizer_sha256"]  # without probes, any tokenizer change counts as new ids
    changes = contract_changes(old, new, ids_changed)
    print(f"{args.name} {args.v1} ({old_semver}) -> {args.v2} ({new_semver}): requires a {required_level(changes)} bump")
    for c in changes:
        print(f"  {c.level.upper():5}  {c.what}")
    if not changes:
        print("  no contract change (weights only)")
    return 0


def _gated(run, label: str) -> int:
    """Print a gated run's table as `modelcd gate` does; its exit code: 0 promoted or rolling out (every gate passed), 3 blocked or
    superseded, 2 bad input, 1 error."""
    from modelcd_assets.launch import BAD_INPUT, BLOCKED, PROMOTED, REGISTRY_UNAVAILABLE, ROLLING_OUT, SUPERSEDED, print_gate_table

    print_gate_table([(label, run)])
    print(f"run {run.run_id}")
    if run.outcome == SUPERSEDED:
        print(f"superseded: {run.error}")
    elif run.outcome == ROLLING_OUT:
        print(f"its rollout takes it to production on live traffic: follow it with 'modelcd rollout status {run.ref.name}'")
        return EXIT_PROMOTED
    elif run.outcome not in (PROMOTED, BLOCKED, BAD_INPUT):  # the run failed: nothing was decided
        what = "registry unavailable" if run.outcome == REGISTRY_UNAVAILABLE else "error"
        print(
            f"modelcd: {what}: {_without_password(run.error)}; nothing was promoted, see run {run.run_id} in the Dagster UI",
            file=sys.stderr,
        )
    return {PROMOTED: EXIT_PROMOTED, BLOCKED: EXIT_BLOCKED, SUPERSEDED: EXIT_BLOCKED, BAD_INPUT: EXIT_BAD_INPUT}.get(
        run.outcome, EXIT_ERROR
    )


def cmd_gate(args) -> int:
    from modelcd_assets.launch import run_gate
    from modelcd_assets.lib.release.registry import CandidateRef

    ref = CandidateRef(args.name, str(args.version))
    _registry().version(ref)  # a clear error before any run is launched
    return _gated(run_gate(ref, traffic_sample=args.traffic, progress=True), "candidate")


def cmd_calibrate(args) -> int:
    from modelcd_assets.launch import RunFailed, run_calibration

    _registry().require_candidate_model(args.name)
    try:
        done = run_calibration(args.name, Path(args.source), gate=not args.no_gate)
    except RunFailed as e:  # exit 2 means the set was refused; a failed run decided nothing
        print(f"modelcd: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    if done.refused:
        print(f"refused: {done.refused}", file=sys.stderr)
        return EXIT_BAD_INPUT
    s = done.summary
    print(
        f"{args.name}: calibration set {done.sha256[:12]} is current ({s['examples']} texts, median {s['median_tokens']:g} tokens; "
        f"evaluation split {s['evaluation_median_tokens']:g})"
    )
    print(f"production: {done.action}: {done.why}")
    if done.gate is None:
        if done.revision is not None:
            print(
                f"{done.revision.uri} is registered; the registry sensor under 'modelcd up' gates it, or run 'modelcd gate {args.name}"
                f" {done.revision.version}'"
            )
        return EXIT_PROMOTED
    return _gated(done.gate, f"revision {done.revision.version}")


def cmd_status(args) -> int:
    import dagster as dg

    from modelcd_assets.defs.assets.gate_report import report_url
    from modelcd_assets.launch import code_location_graph, latest_gate_rows
    from modelcd_assets.lib.presentation.report import table
    from modelcd_assets.lib.release import servable
    from modelcd_assets.lib.release.registry import REVISION_OF, ROLLED_BACK
    from modelcd_assets.lib.release.rollout import read_state

    reg = _registry()
    names = [args.name] if args.name else reg.candidate_models()
    if not names:
        print("no candidate models registered yet; use 'modelcd register PATH --name NAME'")
        return 0
    instance = dg.DagsterInstance.get()
    graph = code_location_graph()
    state = Path(os.environ["MODELCD_HOME"])
    for name in names:
        prod = reg.production(name)
        # The alias is a registry tag anyone with write access can move: say when it points at bytes no valid verdict covers.
        refused = servable.reason(reg, state, prod) if prod else ""
        print(
            f"{name}: production = {prod.version if prod else 'none'}"
            + (f" ({servable.NO_VERDICT}; the server keeps serving the last version that had one: {refused})" if refused else "")
        )
        try:
            rolling = read_state(reg, name)
        except ModelcdError as e:  # a state that does not verify is followed by nobody: say so
            print(f"  rollout: its state is not followed ({e})")
            rolling = None
        if rolling is not None:
            print(f"  rollout: {rolling.describe()}" + (f": {rolling.reason}" if rolling.reason else ""))
        rows = []
        for ref in reg.versions(name):
            gates, problems = latest_gate_rows(instance, ref, graph)
            passed = sum(g.status == "pass" for g in gates)
            others = ", ".join(f"{g.gate}={g.status}" for g in gates if g.status != "pass")
            verdict = "promotable" if not problems else "not promotable"
            summary = (
                "never gated"
                if all(g.status == "not run" for g in gates)
                else f"{verdict}: {passed}/{len(gates)} pass" + (f"; {others}" if others else "")
            )
            if problems and not others:  # every gate passed, but on an outdated lineage
                summary += "; " + problems[0]
            tags = reg.tags(ref)
            alias = "production" if prod == ref else ("rolled back from" if ROLLED_BACK in tags else "")
            if rolling is not None and rolling.version == ref.version and rolling.serving_share:
                alias = f"{rolling.kind} {rolling.share:g}"
            if REVISION_OF in tags:
                alias = ", ".join(filter(None, [alias, f"calibration revision of {tags[REVISION_OF]}"]))
            why = refused if ref == prod else servable.reason(reg, state, ref)
            verdict_shown = "valid" if not why else ("withdrawn" if ROLLED_BACK in tags else "none")
            rows.append([ref.version, alias, verdict_shown, summary, report_url(args.ui_url, ref.key) if summary != "never gated" else ""])
        print(table(["version", "alias", "signed verdict", "last gate results", "gate report in the UI"], rows, max_width=200))
    return 0


def cmd_audit(args) -> int:
    """The production chain of each model (default: every candidate model) walked back and checked against its promotion records and
    attestations (lib/release/chain_audit.py). Exit 0 when every chain is intact, 3 when one is broken."""
    import json

    from modelcd_assets.lib.release.chain_audit import audit

    reg = _registry()
    names = args.names or reg.candidate_models()
    for name in args.names:
        reg.require_candidate_model(name)
    audits = [audit(reg, name) for name in names]
    if args.json:
        print(json.dumps([a.to_dict() for a in audits]))
    else:
        print("\n".join(a.shown for a in audits) or "no candidate models are registered: no chain to audit")
    return 0 if all(a.intact for a in audits) else EXIT_BLOCKED


def cmd_verdict(args) -> int:
    """Whether one version may be served or promoted: a valid signed verdict over its bytes (lib/release/servable.py, the reader the server,
    promotion and rollback use), with its gates' latest results beside it. Exit 0 when it holds one, 3 when not."""
    import json

    import dagster as dg

    from modelcd_assets.gate_results import read_gates
    from modelcd_assets.launch import code_location_graph
    from modelcd_assets.lib.release import servable
    from modelcd_assets.lib.release.registry import CandidateRef

    reg = _registry()
    ref = CandidateRef(args.name, str(args.version))
    why = servable.reason(reg, Path(os.environ["MODELCD_HOME"]), ref)
    decision = read_gates(dg.DagsterInstance.get(), ref.key, code_location_graph())
    answer = {
        "model": ref.name,
        "version": ref.version,
        "servable": not why,
        "why_not": why,
        "promotable": decision.promotable,
        "problems": decision.problems,
    }
    if args.json:
        print(json.dumps(answer))
    else:
        print(f"{ref.uri}: " + ("valid verdict: may be served" if not why else why))
        print("gates: " + ("every gate passed" if decision.promotable else "not promotable: " + "; ".join(decision.problems)))
    return 0 if not why else EXIT_BLOCKED


def cmd_keys_init(args) -> int:
    from modelcd_assets.lib.release.signing import Keys, init_keys

    keys = init_keys(Keys.from_env(), force=args.force)
    print(
        f"signing key: {keys.private} (keep it with whoever registers, gates and promotes)\npublic key:  {keys.public} (all that serving"
        " needs)"
    )
    return 0


def cmd_demo(args) -> int:
    from modelcd_assets.demo import main as demo_main

    return demo_main(args.task, Path(args.timings) if args.timings else None)


def cmd_ui(args) -> int:
    workspace = Path(__file__).resolve().parents[1] / "workspace.yaml"
    if not workspace.is_file():
        raise ModelcdError(f"{workspace} not found; run 'modelcd ui' from an editable install of the repository (make install)")
    # The dagster CLI installed beside this interpreter, so the UI runs in the same environment without activating it.
    dagster = Path(sys.executable).with_name("dagster")
    os.execv(str(dagster), [str(dagster), "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(args.port)])
    return 0


def cmd_serve(args) -> int:
    from modelcd_assets.serving.server import serve

    return serve(args.name, args.host, args.port, args.workers, chaos=args.chaos, admin_host=args.admin_host, admin_port=args.admin_port)


def cmd_rollback(args) -> int:
    from modelcd_assets.launch import run_rollback

    prod = _registry().production(args.name)
    if prod is None:
        raise ModelcdError(f"{args.name} has no production version; nothing to roll back")
    result = run_rollback(args.name, prod.version, {"operator": os.environ.get("USER", "unknown"), "note": args.reason})
    if result.get("outcome") != "rolled back":
        print(f"{args.name}: {result.get('outcome')}")
        return EXIT_ERROR
    print(f"{args.name}: production rolled back from {result['from_version']} to {result['to_version']}")
    passed_over = result.get("passed_over") or {}
    for version, why in passed_over.items():
        print(f"  passed over {version}: {why}")
    return 0


def cmd_rollout(args) -> int:
    """`modelcd rollout status|pause|resume|abort NAME`: where a model's rollout stands, each step's analysis, and a person's moves."""
    from modelcd_assets.lib.release.registry import CandidateRef
    from modelcd_assets.lib.release.rollout import RolloutHistory, read_state

    reg = _registry()
    reg.require_candidate_model(args.name)
    state = read_state(reg, args.name)
    if state is None:
        print(f"{args.name} has no rollout: its policy has no rollout section, or no version passed its gates under one")
        return 0 if args.action == "status" else EXIT_BAD_INPUT
    ref = CandidateRef(args.name, state.version)
    if args.action != "status":
        from modelcd_assets.launch import run_rollout_move

        who = os.environ.get("USER", "unknown")
        moved = run_rollout_move(ref, args.action, state.sequence, by=f"{who} (modelcd rollout)", reason=args.reason)
        print(f"{args.name}: {moved.state}" + (" (promoted)" if moved.promoted else ""))
        return 0
    print(state.describe() + (f": {state.reason}" if state.reason else ""))
    history = RolloutHistory(Path(os.environ["MODELCD_HOME"]), args.name, state.version).read()
    if history:
        from modelcd_assets.lib.presentation.rollout_report import rollout_table

        print(rollout_table(history))
    return 0


def cmd_up(args) -> int:
    from modelcd_assets.stack import run_stack

    return run_stack(
        args.names or list(demo_models().values()),
        serve_port=args.port,
        prometheus_port=args.prometheus_port,
        ui_port=args.ui_port,
        required=bool(args.names),
    )


def cmd_faults_run(args) -> int:
    from modelcd_assets.faults.runner import run_selftest

    if args.controls < 0:
        raise ModelcdError("--controls must be 0 or more")
    name = args.name or demo_models().get(args.task or DEFAULT_TASK)
    if name is None:
        raise ModelcdError(f"the demo has no {args.task} model to derive faults from; name a registered one with --name")
    report = run_selftest(
        name,
        dict(os.environ),
        only=args.only,
        identical_controls=args.controls - args.controls // 2,
        retrained_controls=args.controls // 2,
        under_load=not args.no_load,
        keep=args.keep,
        progress=not args.no_progress,
        task=args.task,
        live_step_seconds=args.live_step_seconds,
    )
    print()
    print(report.render())
    if args.json:
        report.write_json(Path(args.json))
        print(f"report written to {args.json}")
    return report.exit_code


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="modelcd", description="Gated continuous delivery for fine-tuned models.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("register", help="register a peft adapter folder, a Hugging Face model folder or a GGUF causal LM as a new version")
    r.add_argument("path")
    r.add_argument("--name", required=True, help="registered model name")
    r.add_argument("--base", help="models:/NAME/VERSION of the base, when the adapter does not declare it")
    r.add_argument(
        "--tokenizer-change", action="store_true", help="declare that this version's tokenizer maps text to different ids on purpose"
    )
    r.add_argument("--semver", help="this version's Model SemVer, MAJOR.MINOR.PATCH")
    r.add_argument(
        "--bump", choices=["patch", "minor", "major"], help="or the bump over production's SemVer (default: patch, weights only)"
    )
    r.add_argument(
        "--task",
        choices=known_tasks(),
        help="what kind of model a base or full model is (default: from its config's architecture); an adapter carries its base's",
    )
    r.set_defaults(func=cmd_register)
    g = sub.add_parser(
        "gate",
        help=(
            "run the gated pipeline for one version; exit 0 promoted (or rolling out, under a rollout policy), 3 blocked or"
            " superseded, 2 bad input, 1 the run failed (nothing promoted)"
        ),
    )
    g.add_argument("name")
    g.add_argument("version", type=int)
    g.add_argument("--traffic", default="traffic_current", help="traffic split to judge drift on (default traffic_current)")
    g.set_defaults(func=cmd_gate)
    ca = sub.add_parser(
        "calibrate",
        help=(
            "register a new calibration set for a model (refused with the reason unless valid), re-quantize production "
            "under it as a calibration revision and gate that; exit codes as for gate, 2 when the set is refused"
        ),
    )
    ca.add_argument("name")
    ca.add_argument("--from", dest="source", required=True, help='JSON-lines file, one {"text": ...} object per line')
    ca.add_argument(
        "--no-gate", action="store_true", help="only register the set and the revision; the registry sensor under 'modelcd up' gates it"
    )
    ca.set_defaults(func=cmd_calibrate)
    c = sub.add_parser("contract", help="I/O contracts of registered versions")
    csub = c.add_subparsers(dest="contract_command", required=True)
    cd = csub.add_parser("diff", help="the contract diff between two versions and the SemVer bump it requires")
    cd.add_argument("name")
    cd.add_argument("v1", type=int)
    cd.add_argument("v2", type=int)
    cd.set_defaults(func=cmd_contract_diff)
    s = sub.add_parser("status", help="production version, candidates and their last gate results")
    s.add_argument("name", nargs="?")
    s.add_argument(
        "--ui-url",
        default=os.environ.get("MODELCD_UI_URL", "http://127.0.0.1:3000"),
        help="the Dagster UI the gate report links point at ($MODELCD_UI_URL; 'modelcd ui' serves http://127.0.0.1:3000)",
    )
    s.set_defaults(func=cmd_status)
    v = sub.add_parser("verdict", help="whether one version holds a valid signed verdict over its bytes (may be served); exit 0 yes, 3 no")
    v.add_argument("name")
    v.add_argument("version", type=int)
    v.add_argument("--json", action="store_true", help="print {model, version, servable, why_not, promotable, problems} as JSON")
    v.set_defaults(func=cmd_verdict)
    au = sub.add_parser(
        "audit",
        help="walk each production chain back to the first version against its promotion records and attestations; exit 0 intact, 3 broken",
    )
    au.add_argument("names", nargs="*", metavar="NAME", help="registered models (default: every candidate model)")
    au.add_argument("--json", action="store_true", help="print [{model, production, chain, intact, problems, unseen}] as JSON")
    au.set_defaults(func=cmd_audit)
    k = sub.add_parser(
        "keys", help="the signing key pair: registrations and verdicts are signed with it, and verified with its public half"
    )
    ksub = k.add_subparsers(dest="keys_command", required=True)
    ki = ksub.add_parser("init", help="make an EC P-256 key pair ($MODELCD_SIGNING_KEY, 0600; $MODELCD_VERIFY_KEY); refuses to replace one")
    ki.add_argument("--force", action="store_true", help="replace an existing pair: every earlier signature and verdict stops verifying")
    ki.set_defaults(func=cmd_keys_init)
    d = sub.add_parser("demo", help="train two adapters on MiniLM and two on SmolLM2-135M-Instruct, and gate all four")
    d.add_argument("--task", choices=["all", *demo_models()], default="all", help="which demo to run (default: all)")
    d.add_argument("--timings", metavar="FILE", help="write each phase's seconds (trainings, gates and their steps) as JSON to FILE")
    d.set_defaults(func=cmd_demo)
    u = sub.add_parser("ui", help="the Dagster UI on this instance")
    u.add_argument("--port", type=int, default=3000)
    u.set_defaults(func=cmd_ui)
    sv = sub.add_parser("serve", help="serve a registered model's production version, hot-swapping adapters as the alias moves")
    sv.add_argument("name", help="registered model name")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8080)
    sv.add_argument("--workers", type=int, default=2, help="inference threads, one core each")
    sv.add_argument("--chaos", action="store_true", help="enable POST /v1/admin/faults, fault injection for chaos testing (off: 404)")
    sv.add_argument("--admin-host", default="127.0.0.1", help="where the admin API (/v1/admin/*) listens; it is not on --port")
    sv.add_argument(
        "--admin-port", type=int, default=8081, help="the admin API's port (opened only with $MODELCD_ADMIN_TOKEN set; 0: no admin API)"
    )
    sv.set_defaults(func=cmd_serve)
    rb = sub.add_parser("rollback", help="move production back to the most recent earlier version that passed its gates")
    rb.add_argument("name")
    rb.add_argument("--reason", default="rolled back by hand", help="why, recorded on the versions and the rollback materialization")
    rb.set_defaults(func=cmd_rollback)
    ro = sub.add_parser(
        "rollout",
        help="where a model's rollout on live traffic stands (status), or move it by hand: pause, resume (an inconclusive step "
        "paused), abort (the candidate's share goes to 0; production is untouched)",
    )
    ro.add_argument("action", choices=["status", "pause", "resume", "abort"])
    ro.add_argument("name")
    ro.add_argument("--reason", default="", help="why, recorded with the move")
    ro.set_defaults(func=cmd_rollout)
    up = sub.add_parser("up", help="serving, Prometheus and the Dagster UI and daemon together, on loopback")
    up.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"registered models to serve, a server each (default: the demo's, {' and '.join(demo_models().values())}, those registered)",
    )
    up.add_argument(
        "--port", type=int, default=8080, help="the first server's port; the i-th serves on PORT + 2i, its admin API on the port after"
    )
    up.add_argument("--prometheus-port", type=int, default=9090)
    up.add_argument("--ui-port", type=int, default=3000)
    up.set_defaults(func=cmd_up)
    f = sub.add_parser("faults", help="the fault sandbox: faulty candidates derived from production, gated in an isolated copy")
    fsub = f.add_subparsers(dest="faults_command", required=True)
    fr = fsub.add_parser(
        "run",
        help="gate every fault class and clean controls in a sandbox; exit 0 only if each class ends as expected and no control is blocked",
    )
    fr.add_argument("--name", help="registered model whose production the faults are derived from (default: the demo's of the task)")
    fr.add_argument(
        "--task",
        choices=known_tasks(),
        help="the fault classes of this task (default: the task of the model's production)",
    )
    fr.add_argument("--only", nargs="+", metavar="CLASS", help="run only these fault classes")
    fr.add_argument(
        "--controls",
        type=int,
        default=10,
        help="clean controls: half byte-identical re-registrations, half retrained with other seeds (default 10)",
    )
    fr.add_argument(
        "--live-step-seconds",
        type=float,
        metavar="S",
        help="how long each step of a live class's rollout lasts (default: 10 s for the policy's steps, 8 s for the sandbox's"
        " default rollout); a real causal LM on few cores needs a minute for its shadow step to gather the pairs it judges",
    )
    fr.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    fr.add_argument("--no-load", action="store_true", help="gate the controls without a server under load beside them")
    fr.add_argument("--keep", action="store_true", help="keep the sandbox folder (its Dagster instance and registry) for inspection")
    fr.add_argument(
        "--no-progress", action="store_true", help="no progress bars: plain lines, for a log (the gate_selftest asset runs it so)"
    )
    fr.set_defaults(func=cmd_faults_run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # MLflow announces database migrations at INFO on stderr; keep stderr for modelcd's own one-line errors.
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        apply_local_defaults()  # a bad MODELCD_PG_URL is a one-line error too
        return args.func(args)
    except (ModelcdError, FileNotFoundError, ValueError) as e:
        print(f"modelcd: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RegistryUnavailable as e:
        print(f"modelcd: registry unavailable: {_without_password(e)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        from mlflow.exceptions import MlflowException

        if not isinstance(e, MlflowException):
            raise
        # A registry call the client does not classify (a listing, a write): an error answer is not bad input.
        print(f"modelcd: registry unavailable: {_registry_error(e)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
