"""The fused rotary op against the pure-PyTorch Hugging Face formula (circlerope.hf.reference), its
gradients (gradcheck in float64, and against autograd through the formula), and the 16-bit error
bound."""
import itertools

import pytest
import torch

import circlerope
import circlerope.hf
from circlerope.hf import reference
from conftest import hf_cos_sin

START, IMAGE, END = 151652, 151655, 151653

# float32 math on unit-scale inputs: the table is float32 (one rounding of the exact cos/sin),
# each output two products and a sum; 1e-5 is a few ulps of values up to ~4.
FLOAT32_TOLERANCE = 1e-5
# The float64 path uses the same float32 cos/sin (each within 2^-25 of exact): per output
# |x0| 2^-25 + |x1| 2^-25, well under 1e-6 for unit-scale inputs.
FLOAT64_TOLERANCE = 1e-6
# One rounding to the storage type is half an ulp: at most 2^-8 |v| (bf16), 2^-11 |v| (fp16).
UNIT = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -11}


def within_one_rounding(truth, dtype):
    """Elementwise error bound against the exact result for an output stored in `dtype`."""
    if dtype == torch.float64:
        return torch.full_like(truth, FLOAT64_TOLERANCE)
    if dtype == torch.float32:
        return torch.full_like(truth, FLOAT32_TOLERANCE)
    return UNIT[dtype] * truth.abs() + FLOAT32_TOLERANCE


def multimodal_positions(seq_len, scheme="circle", batch=1):
    """Circle-RoPE positions of text + one image + text, seq_len tokens per row."""
    hm, wm = 4, 6
    text = seq_len - hm * wm - 2
    assert text >= 2
    row = [11] * (text // 2) + [START] + [IMAGE] * (hm * wm) + [END] + [12] * (text - text // 2)
    return circlerope.get_rope_index(torch.tensor([row] * batch), [[1, 2 * hm, 2 * wm]] * batch,
                                     scheme=scheme)[0]


def rotate(q, k, position_ids, pairing="neox", qk_layout="bhsd", **settings):
    """q and k rotated by the fused operator with the table of position_ids (rotary_table's
    settings as keywords)."""
    table = circlerope.rotary_table(position_ids, **settings)
    return circlerope.apply_rotary(q, k, table, pairing=pairing, qk_layout=qk_layout)


def hf_rotate(q, k, cos, sin, qk_layout="bhsd", pairing="neox"):
    """transformers' formula (circlerope.hf.reference) on q and k in qk_layout."""
    return reference.apply_rotary_pos_emb(q, k, cos, sin, 1 if qk_layout == "bhsd" else 2, pairing)


def make_qk(batch, seq, hq, hk, head_dim, dtype, qk_layout, generator):
    def one(h):
        shape = (batch, h, seq, head_dim) if qk_layout == "bhsd" else (batch, seq, h, head_dim)
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
    return one(hq), one(hk)


CASES = list(itertools.product(
    [torch.float32, torch.bfloat16, torch.float16, torch.float64],
    ["neox", "gptj"],
    [("chunked", (16, 24, 24)), ("interleaved", (24, 20, 20)), ("single", (16, 24, 24))],
    ["bhsd", "bshd"]))


@pytest.mark.parametrize("dtype,pairing,freq,qk_layout", CASES,
                         ids=lambda v: str(v).replace("torch.", "") if not isinstance(v, tuple) else v[0])
def test_rotation_equals_the_hugging_face_formula(dtype, pairing, freq, qk_layout, rng):
    frequency_layout, sections = freq
    position_ids = multimodal_positions(77, batch=2)
    q, k = make_qk(2, 77, 4, 2, 128, dtype, qk_layout, rng)
    got_q, got_k = rotate(q, k, position_ids, pairing, qk_layout, sections=sections, theta=1e6,
                          frequency_layout=frequency_layout)
    assert got_q.dtype == dtype and got_q.shape == q.shape and got_k.shape == k.shape
    # The formula in float64 (exact angles) is the truth; 16-bit outputs are within one
    # rounding of it, like the formula's own output is within its few roundings.
    cos, sin = hf_cos_sin(position_ids, 128, sections, 1e6, frequency_layout)
    want_q, want_k = hf_rotate(q.double(), k.double(), cos, sin, qk_layout, pairing)
    for got, want in ((got_q, want_q), (got_k, want_k)):
        bound = within_one_rounding(want, dtype)
        assert torch.all((got.double() - want).abs() <= bound), ((got.double() - want).abs() - bound).max()


def test_float32_equals_hugging_faces_own_float32_formula_at_small_positions(rng):
    # HF computes the angle in float32 (|phi| * 2^-24 of phase lost); at positions < 100 that
    # is below 1e-5, so the two float32 results agree outright.
    position_ids = multimodal_positions(60)
    assert position_ids.abs().max() < 100
    q, k = make_qk(1, 60, 16, 2, 128, torch.float32, "bhsd", rng)
    cos, sin = hf_cos_sin(position_ids, 128, angle_dtype=torch.float32)
    want_q, want_k = hf_rotate(q, k, cos, sin)
    got_q, got_k = rotate(q, k, position_ids)
    assert torch.allclose(got_q, want_q, atol=FLOAT32_TOLERANCE, rtol=0)
    assert torch.allclose(got_k, want_k, atol=FLOAT32_TOLERANCE, rtol=0)


def test_rotary_dim_below_head_dim_passes_the_rest_through(rng):
    position_ids = multimodal_positions(40)
    q, k = make_qk(1, 40, 3, 1, 80, torch.float32, "bhsd", rng)
    got_q, got_k = rotate(q, k, position_ids, sections=(8, 12, 12))
    cos, sin = hf_cos_sin(position_ids, 64, (8, 12, 12))
    want_q, want_k = hf_rotate(q.double(), k.double(), cos, sin)
    assert torch.equal(got_q[..., 64:], q[..., 64:]) and torch.equal(got_k[..., 64:], k[..., 64:])
    assert (got_q.double() - want_q).abs().max() < FLOAT32_TOLERANCE


def test_strided_views_give_the_same_result_as_contiguous_copies(rng):
    # A fused qkv projection viewed as q and k, Hugging Face's transpose, a broadcast (stride 0).
    position_ids = multimodal_positions(33)
    qkv = torch.randn(1, 33, 4 + 2 + 2, 64, generator=rng)
    q, k = qkv[:, :, :4].transpose(1, 2), qkv[:, :, 4:6].transpose(1, 2)
    assert not q.is_contiguous()
    sections = (8, 12, 12)
    got = rotate(q, k, position_ids, sections=sections)
    want = rotate(q.contiguous(), k.contiguous(), position_ids, sections=sections)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    one_head = torch.randn(1, 1, 33, 64, generator=rng)
    broadcast = one_head.expand(1, 4, 33, 64)
    got = rotate(broadcast, k, position_ids, sections=sections)
    want = rotate(broadcast.contiguous(), k, position_ids, sections=sections)
    assert torch.equal(got[0], want[0])


def test_inputs_are_not_modified(rng):
    position_ids = multimodal_positions(30)
    q, k = make_qk(1, 30, 2, 1, 128, torch.bfloat16, "bhsd", rng)
    q0, k0 = q.clone(), k.clone()
    rotate(q, k, position_ids)
    assert torch.equal(q, q0) and torch.equal(k, k0)


@pytest.mark.parametrize("pairing,qk_layout", [("neox", "bhsd"), ("gptj", "bshd")])
def test_gradcheck_in_float64(pairing, qk_layout, rng):
    position_ids = multimodal_positions(30)[:, :, 10:17] * 0.37  # fractional, 7 tokens
    table = circlerope.rotary_table(position_ids, sections=(2, 1, 1))
    q, k = make_qk(1, 7, 2, 1, 10, torch.float64, qk_layout, rng)  # head 10 > rotary dim 8
    q.requires_grad_(True)
    k.requires_grad_(True)
    fn = lambda q, k: circlerope.apply_rotary(q, k, table, pairing=pairing, qk_layout=qk_layout)
    assert torch.autograd.gradcheck(fn, (q, k))
    assert torch.autograd.gradgradcheck(fn, (q, k))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gradients_equal_autograd_through_the_formula(dtype, rng):
    position_ids = multimodal_positions(50, batch=2)
    q, k = make_qk(2, 50, 4, 2, 128, dtype, "bhsd", rng)
    gq, gk = make_qk(2, 50, 4, 2, 128, dtype, "bhsd", rng)
    q.requires_grad_(True)
    k.requires_grad_(True)
    out = rotate(q, k, position_ids)
    torch.autograd.backward(out, [gq, gk])
    got = (q.grad.double(), k.grad.double())
    assert q.grad.dtype == dtype
    q64, k64 = q.detach().double().requires_grad_(True), k.detach().double().requires_grad_(True)
    cos, sin = hf_cos_sin(position_ids, 128)
    torch.autograd.backward(hf_rotate(q64, k64, cos, sin), [gq.double(), gk.double()])
    for ours, exact in zip(got, (q64.grad, k64.grad)):
        assert torch.all((ours - exact).abs() <= within_one_rounding(exact, dtype))


def test_an_unused_output_gets_zero_gradient(rng):
    position_ids = multimodal_positions(40)
    q, k = make_qk(1, 40, 2, 1, 128, torch.float32, "bhsd", rng)
    q.requires_grad_(True)
    k.requires_grad_(True)
    q_out, _ = rotate(q, k, position_ids)
    q_out.sum().backward()
    assert k.grad is None or torch.count_nonzero(k.grad) == 0
    assert q.grad is not None and torch.count_nonzero(q.grad) > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_error_is_within_twice_the_pure_pytorch_error(dtype, rng):
    # Qwen2.5-VL-3B shapes at S = 1024; truth = the formula in float64 on the same 16-bit inputs.
    position_ids = multimodal_positions(1024)
    q, k = make_qk(1, 1024, 16, 2, 128, dtype, "bhsd", rng)
    cos, sin = hf_cos_sin(position_ids, 128)
    truth = hf_rotate(q.double(), k.double(), cos, sin)
    ours = rotate(q, k, position_ids)
    naive = hf_rotate(q, k, cos.float(), sin.float())  # HF: cos/sin cast to the dtype, math in it
    ours_err = max((o.double() - t).abs().max().item() for o, t in zip(ours, truth))
    naive_err = max((n.double() - t).abs().max().item() for n, t in zip(naive, truth))
    print(f"{dtype}: circlerope max error {ours_err:.3e}, pure PyTorch {naive_err:.3e}")
    assert ours_err <= 2 * naive_err
    for o, t in zip(ours, truth):
        assert torch.all((o.double() - t).abs() <= within_one_rounding(t, dtype))


def test_adjoint_identity_of_the_fused_backward(rng):
    # <R x, g> = <x, R^T g> in float32 on the kernels (no float64 path involved).
    position_ids = multimodal_positions(64)
    table = circlerope.rotary_table(position_ids)
    x, y = make_qk(1, 64, 16, 2, 128, torch.float32, "bhsd", rng)
    g, h = make_qk(1, 64, 16, 2, 128, torch.float32, "bhsd", rng)
    rx, ry = torch.ops.circlerope.rotary_apply(x, y, table, "neox", "bhsd", False)
    tg, th = torch.ops.circlerope.rotary_apply(g, h, table, "neox", "bhsd", True)
    lhs = (rx.double() * g.double()).sum() + (ry.double() * h.double()).sum()
    rhs = (x.double() * tg.double()).sum() + (y.double() * th.double()).sum()
    assert abs(lhs - rhs) <= 1e-5 * (x.numel() ** 0.5)


def test_the_table_holds_the_exact_cos_and_sin_halves(rng):
    # cos, sin = table.chunk(2, -1): the exact angles' cosines and sines, rounded once
    position_ids = multimodal_positions(40)
    table = circlerope.rotary_table(position_ids)
    cos, sin = (torch.cat([half, half], -1) for half in table.chunk(2, -1))
    want_cos, want_sin = hf_cos_sin(position_ids, 128)
    assert cos.shape == (1, 40, 128)
    assert (cos.double() - want_cos).abs().max() < 1e-7 and (sin.double() - want_sin).abs().max() < 1e-7


def test_hugging_faces_cos_sin_rotate_as_the_table_does(rng):
    # circlerope.hf.rotary_cos_sin (transformers' float32 angles), sections picked, through
    # transformers' formula: the fused rotation within float32 rounding at positions < 100
    position_ids = multimodal_positions(40)
    assert position_ids.abs().max() < 100
    cos, sin = (reference.select_sections(t, (16, 24, 24))
                for t in circlerope.hf.rotary_cos_sin(position_ids, head_dim=128, rope_theta=1e6))
    q, k = make_qk(1, 40, 2, 1, 128, torch.float32, "bhsd", rng)
    via_hf = hf_rotate(q, k, cos, sin)
    fused = circlerope.apply_rotary(q, k, circlerope.rotary_table(position_ids))
    assert torch.allclose(via_hf[0], fused[0], atol=FLOAT32_TOLERANCE, rtol=0)
    assert torch.allclose(via_hf[1], fused[1], atol=FLOAT32_TOLERANCE, rtol=0)


def test_one_dimensional_position_ids_mean_plain_rope(rng):
    pos = torch.arange(25, dtype=torch.float32).view(1, 25)
    a = circlerope.rotary_table(pos, frequency_layout="single", rotary_dim=64)
    b = circlerope.rotary_table(pos.unsqueeze(0).expand(3, 1, 25), frequency_layout="single", rotary_dim=64)
    assert torch.equal(a, b) and a.shape == (1, 25, 64)


def test_threads_do_not_change_the_result(rng):
    position_ids = multimodal_positions(512)
    q, k = make_qk(1, 512, 16, 2, 128, torch.bfloat16, "bhsd", rng)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = rotate(q, k, position_ids)
        torch.set_num_threads(max(2, before))
        many = rotate(q, k, position_ids)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


def test_the_operators_work_from_torchscript(rng):
    # torch.ops.circlerope.* have schemas, so scripted models (and C++ libtorch programs that
    # load libcirclerope_torch.so) can call them.
    @torch.jit.script
    def rotate(q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor):
        table = torch.ops.circlerope.rotary_table(position_ids, 128, [16, 24, 24], 1e6, "chunked")
        return torch.ops.circlerope.rotary_apply(q, k, table, "neox", "bhsd", False)

    position_ids = multimodal_positions(40)
    q, k = make_qk(1, 40, 4, 2, 128, torch.float32, "bhsd", rng)
    got = rotate(q, k, position_ids)
    want = rotate(q, k, position_ids)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_version_comes_from_the_build():
    assert circlerope.__version__.count(".") == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_sequences_rotate_and_differentiate(dtype):
    q = torch.zeros(1, 4, 0, 128, dtype=dtype, requires_grad=True)
    k = torch.zeros(1, 2, 0, 128, dtype=dtype, requires_grad=True)
    q_out, k_out = rotate(q, k, torch.zeros(3, 1, 0))
    (q_out.sum() + k_out.sum()).backward()
    assert q_out.shape == q.shape and q.grad.shape == q.shape
    position_ids, rope_deltas = circlerope.get_rope_index(torch.zeros(2, 0, dtype=torch.long))
    assert position_ids.shape == (3, 2, 0) and rope_deltas.tolist() == [[0.0], [0.0]]


def test_a_table_built_in_inference_mode_can_be_trained_through(rng):
    position_ids = multimodal_positions(40)
    with torch.inference_mode():
        table = circlerope.rotary_table(position_ids)
    q, k = make_qk(1, 40, 2, 1, 128, torch.float32, "bhsd", rng)
    q.requires_grad_(True)
    q_out, k_out = circlerope.apply_rotary(q, k, table)
    q_out.square().sum().backward()
    assert torch.allclose(q.grad, 2 * q, atol=1e-5)  # rotation is orthogonal: d|Rq|^2/dq = 2q
