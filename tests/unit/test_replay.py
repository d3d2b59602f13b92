"""Op replay: `+workload=aten_op` runs one op-table row alone; `compare --replay` prints the commands."""

from __future__ import annotations

import pytest
import torch

from runner import names
from runner.measure.accuracy import check_accuracy
from runner.report.replay import replay_command, replayable_shapes
from workloads.aten_op import AtenOp, out_of_place


def test_an_aten_op_matches_its_reference_and_counts_its_cost() -> None:
    op = AtenOp("aten::mul", [[4, 8, 16], [16]])
    x, w = op.example_inputs(torch.float32, torch.Generator().manual_seed(0))
    assert torch.allclose(op(x, w), op.reference(x, w).float())
    assert op.bytes_moved(x, w) == (4 * 8 * 16 + 16 + 4 * 8 * 16) * 4  # two inputs read, one output written
    assert op.flop_count(x, w) == 4 * 8 * 16  # pointwise: one FLOP per output element
    mm = AtenOp("aten::mm.default", [[4, 8], [8, 3]])
    assert mm.flop_count(*mm.example_inputs(torch.float32, torch.Generator())) == 2 * 4 * 8 * 3


@pytest.mark.parametrize(
    ("op", "shapes", "message"),
    [
        ("aten::mull", [[2]], "workload.op='aten::mull' is not an ATen op"),
        ("mul", [[2]], "workload.op='mul' is not an ATen op"),
        ("aten::mm", [[4, 8], [3, 5]], "aten::mm does not take tensors of these shapes"),
        ("aten::mul", [[4, 0]], "workload.shapes[1] must be a positive integer"),
        ("aten::mul", [4, 8], "give one list of sizes per argument"),
        ("aten::div_", [[4, 8], [8]], "writes into its input, .* replay its out-of-place form, aten::div$"),
        ("aten::contiguous", [[4, 8]], "aten::contiguous' returns its input unchanged .* nothing to time"),
    ],
)
def test_bad_ops_and_shapes_name_their_key(op: str, shapes: list[list[int]], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        AtenOp(op, shapes)


def test_ops_without_defined_values_skip_the_accuracy_check_and_in_place_ones_replay_out_of_place() -> None:
    generator = torch.Generator().manual_seed(0)
    empty = AtenOp("aten::empty_like", [[4, 8]])
    x = empty.example_inputs(torch.float32, generator)
    assert check_accuracy(empty, x, empty(*x), "float32")[1][names.TAG_ACCURACY] == "skipped"
    div = AtenOp("aten::div", [[4, 8], [8]])
    x = div.example_inputs(torch.float32, generator)
    assert check_accuracy(div, x, div(*x), "float32")[1][names.TAG_ACCURACY] == "pass"
    assert out_of_place("aten::div_.Tensor") == "aten::div.Tensor"
    assert out_of_place("aten::_to_copy") == "aten::_to_copy"


def test_recorded_non_tensor_arguments_are_dropped_only_from_the_end() -> None:
    assert replayable_shapes("aten::mul", [[4, 8], [8]]) == ([[4, 8], [8]], "")
    assert replayable_shapes("aten::mean", [[4, 8], [], [], []]) == (
        [[4, 8]],
        "3 non-tensor argument(s) left at their defaults",
    )
    with pytest.raises(ValueError, match="aten::sum does not take tensors of these shapes"):
        replayable_shapes("aten::sum", [[4, 8], [], [], [], [4, 1]])  # an out= tensor after them
    with pytest.raises(ValueError, match="aten::to' returns its input unchanged"):
        replayable_shapes("aten::to", [[], [], [], [], []])  # a dtype conversion, without its dtype
    assert replay_command("aten::mul", [[4, 8], [8]], "bfloat16") == (
        "python -m runner +workload=aten_op workload.op=aten::mul 'workload.shapes=[[4,8],[8]]' workload.dtype=bfloat16"
    )
