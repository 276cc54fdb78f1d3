"""Write the mutation score of `make mutation` (mutmut's counts for the gate code) to bench/results/mutation.json."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

COMMAND = "make mutation  # rm -rf mutants; mutmut run --max-children 2; mutmut export-cicd-stats"


def main(stats: Path = Path("mutants/mutmut-cicd-stats.json"), out: Path = Path("bench/results/mutation.json")) -> int:
    counts = json.loads(stats.read_text())
    total = counts["total"]
    # Only a mutant a test failed on counts as killed; timeouts, survivors and mutants no test reaches do not.
    score = counts["killed"] / total if total else 0.0
    result = {"command": COMMAND, "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), **counts, "score": round(score, 4)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"mutation score {score:.1%}: {counts['killed']} of {total} killed, {counts['survived']} survived, "
        f"{counts['timeout']} timed out, {counts['no_tests']} without tests -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
