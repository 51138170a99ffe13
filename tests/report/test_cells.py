"""A failure's reason in one line: the summary names the cause, the log and Deviations keep the text."""

from __future__ import annotations

import support

from kit.report.cells import CAUSE_LIMIT, one_line_cause

WATCHDOG = (support.FIXTURES / "errors" / "nccl_watchdog_timeout.txt").read_text().strip()


def test_a_raw_nccl_watchdog_line_becomes_its_cause_without_the_works_fields():
    assert one_line_cause(WATCHDOG) == (
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(…) ran for 600060 milliseconds before "
        "timing out."
    )


def test_an_aborted_communicator_is_said_in_its_first_sentence():
    reason = (
        f"rank 5: RuntimeError: NCCL communicator was aborted on rank 5. Original reason for failure was: {WATCHDOG}"
    )
    assert one_line_cause(reason) == "rank 5: RuntimeError: NCCL communicator was aborted on rank 5."


def test_a_cause_of_one_sentence_stays_whole_and_a_long_one_is_cut():
    missing = "rank 0: image ghcr.io/modeltc/lightllm:v1.0.1 (serve-lightllm) is not present locally: kit images pull serve-lightllm"
    assert one_line_cause(missing) == missing
    cut = one_line_cause("x" * 500)
    assert len(cut) == CAUSE_LIMIT and cut.endswith("…")
