"""CI's verdict on the README's main command: every case ok, or unavailable with its reason;
the report rendered. Prints one line per case that is neither, and exits 1 if there is one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

run = Path(sys.argv[1])
info = json.loads((run / "run.json").read_text())
bad = []
for case_id in info["selected"]:
    path = run / "cases" / case_id / "result.json"
    if not path.is_file():
        bad.append(f"{case_id}: no result")
        continue
    result = json.loads(path.read_text())
    if result["status"] == "ok" or (result["status"] == "unavailable" and result.get("reason")):
        continue
    bad.append(f"{case_id}: {result['status']}: {result.get('reason')}")
for name in ("report.html", "report.pdf"):
    if not (run / name).is_file() or (run / name).stat().st_size == 0:
        bad.append(f"{name} was not rendered")
print("\n".join(bad) or f"{len(info['selected'])} cases: each ok, or unavailable with its reason; report rendered")
sys.exit(1 if bad else 0)
