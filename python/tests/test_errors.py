"""Bad inputs raise ValueError (a value the argument cannot take) or TypeError (an argument of a
type it does not take), with a message naming the value; nothing crashes the interpreter. Each
case runs in this process, so a crash would fail the suite."""
import dataclasses
import math

import pytest
import torch

import circlerope

START, IMAGE, END = 151652, 151655, 151653
IDS = torch.tensor([[5, START] + [IMAGE] * 6 + [END, 6]])
GRID = torch.tensor([[1, 4, 6]])


def qk(dtype=torch.float32, s=10, d=128, layout="bhsd"):
    shape = (lambda h: (1, h, s, d)) if layout == "bhsd" else (lambda h: (1, s, h, d))
    return torch.randn(shape(4)).to(dtype), torch.randn(shape(2)).to(dtype)


POSITIONS = circlerope.get_rope_index(IDS, GRID)[0]
TABLE = circlerope.rotary_table(POSITIONS)

CASES = {
    # get_rope_index
    "float input_ids": (lambda: circlerope.get_rope_index(IDS.float(), GRID), "input_ids must hold integers"),
    "1-D input_ids": (lambda: circlerope.get_rope_index(IDS[0], GRID), "input_ids must have 2 dimension"),
    "grid shape": (lambda: circlerope.get_rope_index(IDS, GRID[0]), "image_grid_thw must have shape [N, 3]"),
    "float grid": (lambda: circlerope.get_rope_index(IDS, GRID.float()), "image_grid_thw must hold integers"),
    "grid not divisible": (lambda: circlerope.get_rope_index(IDS, [[1, 3, 6]]), "h=3 is not divisible by spatial_merge_size=2"),
    "grid too large": (lambda: circlerope.get_rope_index(IDS, [[1, 4, 8]]), "image"),
    "more grids than blocks": (lambda: circlerope.get_rope_index(IDS, [[1, 4, 6], [1, 2, 2]]), "image_grid_thw"),
    "fewer grids than blocks": (lambda: circlerope.get_rope_index(IDS, None), "image"),
    "zero grid": (lambda: circlerope.get_rope_index(IDS, [[1, 0, 6]]), "[1, 0, 6] (image block 0 of row 0): every side must be >= 1"),
    "negative grid": (lambda: circlerope.get_rope_index(IDS, [[1, -4, 6]]), "-4"),
    "mask shape": (lambda: circlerope.get_rope_index(IDS, GRID, attention_mask=torch.ones(1, 5)), "attention_mask has shape"),
    "mask values": (lambda: circlerope.get_rope_index(IDS, GRID, attention_mask=torch.full_like(IDS, 2)), "mask"),
    "float mask": (lambda: circlerope.get_rope_index(IDS, GRID, attention_mask=torch.ones(IDS.shape)), "attention_mask must hold integers"),
    "scheme": (lambda: circlerope.get_rope_index(IDS, GRID, scheme="circular"), "circular"),
    "seconds too short": (lambda: circlerope.get_rope_index(
        torch.tensor([[START] + [151656] * 4]), video_grid_thw=[[2, 2, 4]], second_per_grid_ts=[]), "second_per_grid_ts has 0 entries but video_grid_thw has 1"),
    "seconds too long": (lambda: circlerope.get_rope_index(
        torch.tensor([[START] + [151656] * 4]), video_grid_thw=[[2, 2, 4]], second_per_grid_ts=[1.0, 2.0]),
        "second_per_grid_ts has 2 entries but video_grid_thw has 1"),
    "seconds 2-D": (lambda: circlerope.get_rope_index(IDS, GRID, second_per_grid_ts=[[1.0]]), "second_per_grid_ts must be 1-D"),
    "ragged input_ids": (lambda: circlerope.get_rope_index([[1, 2], [3]]), "input_ids: cannot be read as a tensor"),
    # configs
    "radius negative": (lambda: circlerope.CircleConfig(radius=-1), "radius"),
    "radius nan": (lambda: circlerope.CircleConfig(radius=math.nan), "radius"),
    "radius text": (lambda: circlerope.CircleConfig(radius="big"), "(got 'big')"),
    "radius auto-k": (lambda: circlerope.CircleConfig(radius="auto-x"), "CircleConfig.radius must be a finite number > 0, \"auto\" or \"auto-k\" with a number k > 0 (got 'auto-x')"),
    "radius auto-0": (lambda: circlerope.CircleConfig(radius="auto-0"), "radius"),
    "alpha": (lambda: circlerope.CircleConfig(alpha=1.5), "alpha must be in [0, 1] (got 1.5)"),
    "dff": (lambda: circlerope.CircleConfig(dff_rate=-0.1), "dff"),
    "positive": (lambda: circlerope.CircleConfig(move_to_positive="yes"), "CircleConfig.move_to_positive must be false, \"auto\" or a finite number (an offset) (got 'yes')"),
    "merge size": (lambda: circlerope.VisionConfig(spatial_merge_size=0), "spatial_merge_size"),
    "time": (lambda: circlerope.VisionConfig(time="frames"), "VisionConfig.time: unknown time mode 'frames'"),
    "sections sum": (lambda: circlerope.RotaryConfig(sections=(16, 24, 23), rotary_dim=128), "sections [16, 24, 23]"),
    "theta": (lambda: circlerope.RotaryConfig(theta=0), "RotaryConfig.theta must be a finite number > 0 (got 0)"),
    "pairing config": (lambda: circlerope.RotaryConfig(pairing="llama"), "RotaryConfig.pairing: unknown pairing 'llama' (expected neox or gptj)"),
    "layout config": (lambda: circlerope.RotaryConfig(frequency_layout="spiral"),
                      "RotaryConfig.frequency_layout: unknown frequency layout 'spiral'"),
    "odd rotary dim": (lambda: circlerope.RotaryConfig(frequency_layout="single", rotary_dim=7), "RotaryConfig.rotary_dim must be an even integer in [2, 1024] (got 7)"),
    "plan": (lambda: circlerope.AgePlan("zigzag", 4), "zigzag"),
    "plan layers": (lambda: circlerope.AgePlan("all", 0), "layers"),
    "plan layer index": (lambda: circlerope.AgePlan("all", 2).layer_scheme(2), "layer 2 is outside"),
    # rotary_table
    "positions shape": (lambda: circlerope.rotary_table(POSITIONS[:2]), "position_ids must have shape [3, batch, seq_len]"),
    "positions nan": (lambda: circlerope.rotary_table(POSITIONS.clone().index_fill_(2, torch.tensor([3]), math.nan)),
                      "token 3 is nan (positions must be finite)"),
    "positions complex": (lambda: circlerope.rotary_table(POSITIONS.to(torch.complex64)), "real numbers"),
    # apply_rotary / apply_multimodal_rotary
    "3-D q": (lambda: circlerope.apply_rotary(qk()[0][0], qk()[1], TABLE), "q must be 4-D"),
    "int q": (lambda: circlerope.apply_rotary(*(t.to(torch.int32) for t in qk()), TABLE), "must be float32, bfloat16, float16 or float64, got Int"),
    "q/k dtypes": (lambda: circlerope.apply_rotary(qk()[0], qk()[1].double(), TABLE), "q is Float but k is Double"),
    "table dtype": (lambda: circlerope.apply_rotary(*qk(), TABLE.double()), "table must be float32"),
    "table shape": (lambda: circlerope.apply_rotary(*qk(), TABLE[0]), "table must be float32 [batch, seq_len, rotary_dim]"),
    "table odd": (lambda: circlerope.apply_rotary(*qk(), TABLE[..., :7]), "rotary dim) is 7"),
    "seq mismatch": (lambda: circlerope.apply_rotary(*qk(s=11), TABLE),
                     "q has shape [1, 4, 11, 128] (bhsd): batch 1 and seq_len 11, but the table was built for batch 1 and seq_len 10"),
    "head too small": (lambda: circlerope.apply_rotary(*qk(d=64), TABLE), "q has head_dim 64, smaller than the table's rotary dim 128"),
    "head too small f64": (lambda: circlerope.apply_rotary(*qk(torch.float64, d=64), TABLE), "q has head_dim 64, smaller"),
    "seq mismatch f64": (lambda: circlerope.apply_rotary(*qk(torch.float64, s=9), TABLE), "batch 1 and seq_len 9, but"),
    "layout swap": (lambda: circlerope.apply_rotary(*qk(layout="bshd"), TABLE), "(bhsd): batch 1 and seq_len 4"),
    "pairing": (lambda: circlerope.apply_rotary(*qk(), TABLE, pairing="llama"), "llama"),
    "qk_layout": (lambda: circlerope.apply_rotary(*qk(), TABLE, qk_layout="sbhd"), "qk_layout 'sbhd'"),
    "meta device": (lambda: circlerope.apply_rotary(*(t.to("meta") for t in qk()), TABLE), "q is on meta"),
    "table sections": (lambda: circlerope.rotary_table(POSITIONS, sections=(16, 24)), "sections"),
    "token id too large": (lambda: circlerope.VisionConfig(image_token_id=2 ** 70), "VisionConfig.image_token_id must be an integer in [-2^63, 2^63) (got '1180591620717411303424')"),
    "plan layers huge": (lambda: circlerope.AgePlan("all", 2 ** 31), "AGE plan needs 1..100000 layers (got 2147483648)"),
    "table on meta": (lambda: circlerope.apply_rotary(*qk(), TABLE.to("meta")), "table is on meta"),
    "ptd seconds 2-D": (lambda: circlerope.ptd(IDS, GRID, second_per_grid_ts=[[0.5]]), "second_per_grid_ts must be 1-D"),
    # metrics and decoding
    "ptd layout": (lambda: circlerope.ptd(layout="text:3,picture:2x2"), "picture"),
    "ptd float ids": (lambda: circlerope.ptd(IDS.float(), GRID), "input_ids must hold integers"),
    "decode negative": (lambda: circlerope.decode_position_ids(torch.zeros(1, 1), -1), "first_cache_position"),
    "decode shape": (lambda: circlerope.decode_position_ids(torch.zeros(2, 2), 0), "rope_deltas must have shape"),
}

# Arguments of a type the parameter does not take: TypeError, with the same words.
TYPE_CASES = {
    "circle as dict": (lambda: circlerope.get_rope_index(IDS, GRID, circle={"radius": 10}), "must be a circlerope.CircleConfig"),
    "vision as dict": (lambda: circlerope.get_rope_index(IDS, GRID, vision={}), "must be a circlerope.VisionConfig"),
    "q not a tensor": (lambda: circlerope.apply_rotary([1.0], qk()[1], TABLE), "q must be a torch.Tensor (got 'list')"),
    "alpha None": (lambda: circlerope.CircleConfig(alpha=None), "CircleConfig.alpha must be a number in [0, 1] (got None)"),
    "alpha text": (lambda: circlerope.CircleConfig(alpha="0.3"), "CircleConfig.alpha must be a number in [0, 1] (got '0.3')"),
    "move_to_origin text": (lambda: circlerope.CircleConfig(move_to_origin="False"), "CircleConfig.move_to_origin must be true or false (got 'False')"),
    "merge size float": (lambda: circlerope.VisionConfig(spatial_merge_size=2.7), "VisionConfig.spatial_merge_size must be an integer >= 1 (got 2.7)"),
    "merge size bool": (lambda: circlerope.VisionConfig(spatial_merge_size=True), "VisionConfig.spatial_merge_size must be an integer >= 1 (got True)"),
    "rotary dim float": (lambda: circlerope.RotaryConfig(rotary_dim=128.9), "RotaryConfig.rotary_dim must be an even integer in [2, 1024] (got 128.9)"),
    "section float": (lambda: circlerope.RotaryConfig(sections=(16.9, 24, 24)), "RotaryConfig.sections must be three integers t,h,w (got (16.9, 24, 24))"),
    "sections scalar": (lambda: circlerope.RotaryConfig(sections=64), "RotaryConfig.sections must be three integers t,h,w (got 64)"),
    "theta bool": (lambda: circlerope.RotaryConfig(theta=True), "RotaryConfig.theta must be a finite number > 0 (got True)"),
    "plan layer bool": (lambda: circlerope.AgePlan("CM", 4).geometry(True), "layer must be an integer (got True)"),
    "ptd layout type": (lambda: circlerope.ptd(layout=5), "ptd: layout must be a string (got 5)"),
    "decode position float": (lambda: circlerope.decode_position_ids(torch.zeros(1, 1), 7.9), "cache_position must be an integer (got 7.9)"),
    "decode position vector": (lambda: circlerope.decode_position_ids(torch.zeros(1, 1), torch.arange(3)), "cache_position must be an integer (got tensor([0, 1, 2]))"),
    "ptd both": (lambda: circlerope.ptd(IDS, GRID, layout="text:3"), "either input_ids or layout"),
    "ptd none": (lambda: circlerope.ptd(), "input_ids or layout is required"),
    "table config and a setting": (lambda: circlerope.rotary_table(POSITIONS, circlerope.RotaryConfig(), theta=1e4),
                                   "rotary_table takes a RotaryConfig or its settings as keywords, not both (got "
                                   "rotary and theta)"),
    "pairing type": (lambda: circlerope.RotaryConfig(pairing=1), "RotaryConfig.pairing must be \"neox\" or \"gptj\" (got 1)"),
    "plan without layers": (lambda: circlerope.AgePlan("alternate"), "missing 1 required positional argument: 'layers'"),
    "embedding of a spec": (lambda: circlerope.RotaryEmbedding("alternate"), "plan must be a circlerope.AgePlan"),
}


@pytest.mark.parametrize("name, error", [(name, ValueError) for name in sorted(CASES)] +
                         [(name, TypeError) for name in sorted(TYPE_CASES)])
def test_bad_input_raises_with_the_offending_value(name, error):
    call, message = (CASES if error is ValueError else TYPE_CASES)[name]
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error, type(info.value)  # not a subclass: one or the other
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value).strip(), "one-line messages, no C++ backtrace"


@pytest.mark.parametrize("config", [circlerope.CircleConfig, circlerope.VisionConfig, circlerope.RotaryConfig])
def test_every_field_refuses_a_wrong_type_with_type_error_and_the_cores_words(config):
    # A list, a dict and an object are no field's type; the message names the field as the
    # core does ("CircleConfig.alpha must be ...").
    for field in dataclasses.fields(config):
        for value in ([[1.0]], {"a": 1}, object()):
            with pytest.raises(TypeError) as info:
                config(**{field.name: value})
            assert f"{config.__name__}.{field.name}" in str(info.value), str(info.value)
            assert "\n" not in str(info.value)


def test_numpy_and_tensor_scalars_are_numbers():
    import numpy as np
    assert circlerope.CircleConfig(radius=np.float32(5), alpha=np.float64(0.25)) == circlerope.CircleConfig(radius=5.0, alpha=0.25)
    assert circlerope.AgePlan("alternate", np.int64(4)).geometry(np.int64(1)) == 1
    assert circlerope.VisionConfig(spatial_merge_size=np.int32(2)).spatial_merge_size == 2
    cache_position = torch.arange(12, 13)  # Hugging Face passes cache_position[0], a tensor
    step = circlerope.decode_position_ids(torch.tensor([[0.5]]), cache_position[0])
    assert step.flatten().tolist() == [12.5, 12.5, 12.5]


def test_a_failed_call_leaves_the_library_usable():
    with pytest.raises(ValueError):
        circlerope.get_rope_index(IDS, [[1, 3, 6]])
    pos, _ = circlerope.get_rope_index(IDS, GRID)
    assert torch.equal(pos, POSITIONS)


def test_cuda_tensors_are_refused_with_a_clear_message_or_skipped():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    # With CUDA kernels, a CPU table beside CUDA q/k is the mistake; without, any CUDA tensor.
    match = "must be on one device" if circlerope.has_cuda_kernels() else "CPU tensors"
    with pytest.raises(ValueError, match=match):
        circlerope.apply_rotary(*(t.cuda() for t in qk()), TABLE)


def test_tensors_on_other_devices_are_refused_with_a_clear_message():
    q, k = qk()
    with pytest.raises(ValueError, match="q is on meta; circlerope's operators take CPU or CUDA tensors"):
        circlerope.apply_rotary(q.to("meta"), k, TABLE)
    with pytest.raises(ValueError, match="table is on meta"):
        circlerope.apply_rotary(q, k, TABLE.to("meta"))
