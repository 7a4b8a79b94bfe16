"""The operators themselves (torch.ops.circlerope.*, as C++ and TorchScript callers reach them,
with no Python wrapper in front): every size check before any conversion or allocation, the
kinds of tensor they refuse by name, and the float64 path's in-place rules.

An expand() view of 2^40 tokens costs nothing until something copies it: an operator that
converted or copied before checking asked the allocator for terabytes and failed with its
RuntimeError (or took the machine's memory), where the limit of one call gives a ValueError."""
import pytest
import torch

import circlerope  # noqa: F401  (loads the operators)

ops = torch.ops.circlerope
HUGE = 2 ** 40


def rope_index(input_ids, attention_mask=None, images=None, seconds=None):
    return ops.rope_index(input_ids, images, None, seconds, attention_mask, "circle", "10", 0.5, True, 0.0,
                          "false", 2, 2.0, 151652, 151655, 151656, "seconds")


def test_rope_index_refuses_expanded_inputs_before_converting_them():
    ids = torch.zeros(1, 1, dtype=torch.int64).expand(1, HUGE)
    with pytest.raises(ValueError, match=r"input_ids: batch 1 x seq_len 1099511627776 is more than 16777216 tokens"):
        rope_index(ids)
    # int32 is converted to int64 by the operator: the check comes first (a 2^36-token view would
    # need 512 GiB as int64)
    ids32 = torch.zeros(1, 1, dtype=torch.int32).expand(1, 2 ** 36)
    with pytest.raises(ValueError, match="the limit of one call"):
        rope_index(ids32)
    ok = torch.zeros(1, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        rope_index(ok, attention_mask=torch.ones(1, 1, dtype=torch.int32).expand(1, HUGE))
    with pytest.raises(ValueError, match=r"image_grid_thw has shape \[1099511627776, 3\]: more than"):
        rope_index(ok, images=torch.ones(1, 3, dtype=torch.int32).expand(HUGE, 3))
    with pytest.raises(ValueError, match=r"second_per_grid_ts has shape \[1099511627776\]: more than"):
        rope_index(ok, seconds=torch.ones(1).expand(HUGE))


def test_rotary_table_refuses_expanded_positions_before_converting_them():
    pos = torch.zeros(3, 1, 1, dtype=torch.int32).expand(3, 1, HUGE)
    with pytest.raises(ValueError, match=r"position_ids: batch 1 x seq_len 1099511627776 is more than"):
        ops.rotary_table(pos, 128, [16, 24, 24], 1e6, "chunked")


def test_rotary_apply_refuses_an_expanded_table_before_allocating_outputs():
    table = torch.zeros(1, 1, 128).expand(1, HUGE, 128)
    q = torch.zeros(1, 1, 1, 128).expand(1, 1, HUGE, 128)
    with pytest.raises(ValueError, match=r"table: batch 1 x seq_len 1099511627776 is more than"):
        ops.rotary_apply(q, q, table, "neox", "bhsd", False)
    with pytest.raises(ValueError, match=r"table: batch 1 x seq_len 1099511627776 is more than"):
        ops.rotary_apply_(q, q, table, "neox", "bhsd", False)


def small_call():
    pos = torch.arange(4.0).expand(3, 1, 4).contiguous()
    table = ops.rotary_table(pos, 8, [4, 0, 0], 1e4, "chunked")
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 1, 4, 8)
    return pos, table, q, k


def test_nested_and_quantized_tensors_are_refused_by_name():
    pos, table, q, k = small_call()
    nested = torch.nested.nested_tensor([torch.randn(2, 4, 8), torch.randn(2, 3, 8)])
    with pytest.raises(ValueError, match=r"q is a nested tensor; .*to_padded_tensor"):
        ops.rotary_apply(nested, k, table, "neox", "bhsd", False)
    quantized = torch.quantize_per_tensor(q, 0.1, 0, torch.qint8)
    with pytest.raises(ValueError, match=r"q is a quantized tensor \(QInt8\).*dequantize"):
        ops.rotary_apply(quantized, k, table, "neox", "bhsd", False)
    with pytest.raises(ValueError, match="k is a quantized tensor"):
        ops.rotary_apply_(q, torch.quantize_per_tensor(k, 0.1, 0, torch.qint8), table, "neox", "bhsd", False)
    with pytest.raises(ValueError, match="position_ids is a quantized tensor"):
        ops.rotary_table(torch.quantize_per_tensor(pos, 0.1, 0, torch.qint8), 8, [4, 0, 0], 1e4, "chunked")
    with pytest.raises(ValueError, match="input_ids is a nested tensor"):
        rope_index(torch.nested.nested_tensor([torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)]))


def test_float64_in_place_refuses_a_table_that_shares_memory_with_q():
    # The table's 8 floats are the bytes of q's first 4 doubles: rotating q in place would
    # overwrite the angles it reads (float32 refuses such a layout through the kernels' overlap
    # check; float64 rotated it, with results off by up to 1e31).
    shared = torch.randn(8, dtype=torch.float64)
    q = shared.view(1, 1, 1, 8)
    table = shared.view(torch.float32)[:8].view(1, 1, 8)
    k = torch.randn(1, 1, 1, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="float64 q shares memory with the table"):
        ops.rotary_apply_(q, k, table, "neox", "bshd", False)
    with pytest.raises(ValueError, match="float64 k shares memory with the table"):
        ops.rotary_apply_(k, q, table, "neox", "bshd", False)
    ops.rotary_apply(q, k, table, "neox", "bshd", False)  # out of place the table is only read
    ops.rotary_apply_(q, k, table.clone(), "neox", "bshd", False)  # its own memory


def test_float64_in_place_rotates_a_strided_view_that_does_not_overlap_itself():
    pos, table, q, k = small_call()
    wide = torch.randn(1, 2, 4, 16, dtype=torch.float64)
    q64 = wide[..., ::2]  # not dense, no two elements share memory: float32 rotates such a view
    k64 = k.double()
    want = ops.rotary_apply(q64, k64, table, "neox", "bhsd", False)
    ops.rotary_apply_(q64, k64, table, "neox", "bhsd", False)
    assert torch.equal(q64, want[0]) and torch.equal(k64, want[1])
    expanded = torch.randn(1, 2, 1, 8, dtype=torch.float64).expand(1, 2, 4, 8)
    with pytest.raises(ValueError, match="has elements that share memory"):
        ops.rotary_apply_(expanded, k64.clone(), table, "neox", "bhsd", False)
