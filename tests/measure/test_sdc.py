"""kit.measure.sdc with kit.workloads.sdc_check: the silent-data-corruption check run for real on
two CPU ranks through the local executor (the smoke profile's tiny Llama cut to 2 layers, gloo's
all-reduce), clean, and with one rank's arithmetic corrupted by a flipped bit."""

from pathlib import Path

import pytest

from kit.execute.choice import named
from kit.execute.preflight import check_silent_data_corruption
from kit.host.this_host import this_host
from kit.measure.sdc import sdc_case
from kit.plan.protocol import plan_for
from kit.workloads.sdc_check import FLIP_HOOK, float_bits


@pytest.fixture(scope="module")
def case():
    found = sdc_case(plan_for(this_host(), "smoke").cases, 0)
    assert found is not None and found.gpus == 2 and found.device == "cpu"
    return found


def test_float_bits_are_the_float32_pattern():
    assert (float_bits(1.0), float_bits(-2.0)) == ("0x3f800000", "0xc0000000")


def test_two_clean_ranks_compute_the_same_bits(case, tmp_path: Path, monkeypatch):
    monkeypatch.delenv(FLIP_HOOK, raising=False)
    line, record = check_silent_data_corruption(case, named("local"), tmp_path)
    assert line.status == "ok", line.detail
    assert record is not None and record.status == "pass"
    assert [device.identical for device in record.devices] == [True, True]
    assert [(pair.ranks, pair.wrong_elements) for pair in record.pairs] == [((0, 1), 0)]
    assert record.summary.startswith("2 devices computed identical fingerprints over 8 steps")


def test_a_flipped_bit_on_one_rank_is_caught_and_named(case, tmp_path: Path, monkeypatch):
    monkeypatch.setenv(FLIP_HOOK, "1:3")  # rank 1 flips a bit of a weight after step 3
    line, record = check_silent_data_corruption(case, named("local"), tmp_path)
    assert line.status == "fail"
    assert record is not None and record.status == "fail"
    (differing,) = [device for device in record.devices if not device.identical]
    assert (differing.rank, differing.device) == (1, "CPU rank 1")
    assert differing.first_difference is not None and differing.first_difference.startswith("step 4: loss 0x")
    (pair,) = record.pairs
    assert pair.wrong_elements == 1 and pair.first_wrong is not None
    assert "CPU rank 1 (rank 1) differs at step 4" in line.detail
