"""`dcgmi diag -r LEVEL -j` read into each test's result per GPU. Pure: a recorded output of a
real run tests it (tests/fixtures/health).

DCGM 3.x writes the document under "DCGM GPU Diagnostic", each test's results with `gpu_ids`
("0,1,2" for a test run once for the group, or one number per GPU) and upper- or mixed-case
statuses, and may leave `null` between tests; DCGM 4.x writes it under "DCGM Diagnostic", each
result with `entity_group` / `entity_id`, a `test_summary` per test and the versions under
`metadata` (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json). dcgmi may print a line before the
document ("Successfully ran diagnostic for group."), which is skipped.
"""

from __future__ import annotations

import json

from kit.host.health import DcgmDiag, DcgmTestResult

STATUSES = {"pass": "pass", "warn": "warn", "warning": "warn", "fail": "fail", "skip": "skip", "not run": "not_run"}
ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


class DiagParseError(ValueError):
    """Output that holds no dcgmi diag JSON document."""


def _document(text: str) -> dict:
    start = text.find("{")
    if start < 0:
        raise DiagParseError("no JSON document in the output")
    try:
        found = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise DiagParseError(f"the JSON document does not parse: {exc}") from None
    if not isinstance(found, dict) or not any(root in found for root in ROOTS):
        raise DiagParseError(f"the JSON document has neither {' nor '.join(repr(r) for r in ROOTS)}")
    return found


def _gpus(result: dict) -> str:
    if "entity_id" in result:
        return str(result["entity_id"])
    return str(result.get("gpu_ids", result.get("gpu_id", "all")))


def _warnings(result: dict) -> str | None:
    found = result.get("warnings")
    if isinstance(found, list):
        texts = [item.get("warning", "") if isinstance(item, dict) else str(item) for item in found]
        return "; ".join(text for text in texts if text) or None
    return str(found) if found else None


def parse_diag(text: str, level: int) -> DcgmDiag:
    """Each test's result on each GPU (or group of GPUs) as dcgmi reported it."""
    document = _document(text)
    body = next(document[root] for root in ROOTS if root in document)
    metadata = document.get("metadata") or {}
    version = metadata.get("version") or body.get("version")
    results = []
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or []:
            if not isinstance(test, dict):  # DCGM 3.x writes null between some tests
                continue
            for result in test.get("results") or []:
                status = str(result.get("status", "")).strip().lower()
                results.append(
                    DcgmTestResult(
                        category=str(category.get("category", "")),
                        test=str(test.get("name", "")),
                        gpus=_gpus(result),
                        status=STATUSES.get(status, "not_run"),  # a word DCGM never used is no pass
                        detail=_warnings(result),
                    )
                )
    return DcgmDiag(
        level=level,
        version=str(version) if version else None,
        results=results,
        unavailable=body.get("runtime_error") or (None if results else "the document lists no test result"),
    )
