"""The SemVer report of a version: its I/O contract's diff against production's, the bump that diff requires, and the
bump the version declared (what semver_covers_contract_change judges), for every task alike."""

import json

from modelcd_assets.lib.judging.contract import Change, bump, changes_to_dicts, level_between, required_level
from modelcd_assets.lib.release.registry import BUMP_DECLARED, CONTRACT, SEMVER, SEMVER_DECLARED
from modelcd_assets.lib.tasks.names import DEFAULT_TASK, declaration_of, load_declared

FIRST_SEMVER = "1.0.0"


def contract_changes(old: dict, new: dict, token_ids_changed: bool) -> list[Change]:
    """Every difference between two versions' contracts with the bump it requires, by the contract's task (the declaration's
    `contract`); a contract of another task is a MAJOR change. A contract without a task is a classifier's: modelcd recorded
    no task before it gated causal LMs."""
    before, after = old.get("task", DEFAULT_TASK), new.get("task", DEFAULT_TASK)
    if before != after:
        return [Change("major", f"the task changed: {before} -> {after}")]
    return load_declared(declaration_of(after).contract, f"task {after!r}'s contract diff")(old, new, token_ids_changed)


def semver_report(contract: dict, tags: dict, prod_tags: dict | None, token_ids_changed: bool, regating_production: bool = False) -> dict:
    """The contract diff against production, the bump it requires, and the bump this version declared."""
    declared_semver, declared_bump = tags.get(SEMVER_DECLARED), tags.get(BUMP_DECLARED)
    if regating_production and SEMVER in tags:  # production judged again: it keeps its version
        return {
            "contract": contract,
            "changes": [],
            "required_level": "patch",
            "declared_level": "patch",
            "declared": tags[SEMVER],
            "semver": tags[SEMVER],
            "production_semver": tags[SEMVER],
        }
    if prod_tags is None or CONTRACT not in prod_tags:
        semver = declared_semver or FIRST_SEMVER
        return {
            "contract": contract,
            "changes": [],
            "required_level": "patch",
            "declared_level": None,
            "declared": semver,
            "semver": semver,
            "production_semver": None,
        }
    prod_semver = prod_tags.get(SEMVER, FIRST_SEMVER)
    changes = contract_changes(json.loads(prod_tags[CONTRACT]), contract, token_ids_changed)
    if declared_semver:
        level, semver = level_between(prod_semver, declared_semver), declared_semver
    else:
        level = declared_bump or "patch"  # undeclared means weights only
        semver = bump(prod_semver, level)
    return {
        "contract": contract,
        "changes": changes_to_dicts(changes),
        "required_level": required_level(changes),
        "declared_level": level,
        "declared": declared_semver or f"{level} bump",
        "semver": semver,
        "production_semver": prod_semver,
    }


PARITY_EXAMPLES = 64
