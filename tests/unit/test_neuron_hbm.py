"""ProfileMode.DEVICE's HBM reservation, counted per chip (runner.backends.neuron_hbm)."""

from __future__ import annotations

import pytest

from runner.backends.cores import LNC_ENV
from runner.backends.neuron_hbm import reservation_note


def test_four_device_profiled_ranks_on_one_trn2_chip_are_told_their_20_gb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LNC_ENV, raising=False)  # Trn2's default LNC 2: 4 logical cores a chip
    note = reservation_note("distributed.ranks=4", "trn2", [0, 1, 2, 3])
    assert note == (
        "distributed.ranks=4 with profiler.modes DEVICE: 4 device-profiled process(es) on chip 0 reserve ~20 GB "
        "of its 103 GB HBM (5 GB each, neuron-explorer docs), leaving ~21 GB each for the workload"
    )
    # at LNC 1 a chip has 8 cores: ranks on cores 4-7 share chip 0 as well; cores 8-9 are chip 1's
    monkeypatch.setenv(LNC_ENV, "1")
    assert "3 device-profiled process(es) on chip 0 reserve ~15 GB" in str(
        reservation_note("distributed.ranks=5", "trn2", [5, 6, 7, 8, 9])
    )


def test_a_chip_without_an_hbm_figure_gets_no_note() -> None:
    assert reservation_note("this job", "h100", [0]) is None
    assert reservation_note("distributed.ranks=2", "trn2", []) is None  # another device's slots: no NeuronCores
