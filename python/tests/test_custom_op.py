"""The operators as PyTorch 2.x custom operators: schemas, fake (meta) kernels and the autograd
registration checked by torch.library.opcheck on every operator; torch.compile(fullgraph=True)
of modules built on rotary_table, apply_rotary and RotaryEmbedding, with static and dynamic sequence
lengths, against eager; shapes through FakeTensorMode; the in-place rotation."""
import os

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import circlerope
from circlerope.hf import reference
from conftest import hf_cos_sin

START, IMAGE, END = 151652, 151655, 151653
OPS = torch.ops.circlerope


def request(seq_text=(3, 4), grid=(1, 4, 6), batch=2, pad_left=0):
    """input_ids with one image between two text runs, grids, and a mask (left padding)."""
    t, h, w = grid
    tokens = (h // 2) * (w // 2)
    row = [11] * seq_text[0] + [START] + [IMAGE] * tokens + [END] + [12] * seq_text[1]
    rows = [[0] * pad_left + row] + [row + [0] * pad_left] * (batch - 1)
    mask = [[0] * pad_left + [1] * len(row)] + [[1] * len(row) + [0] * pad_left] * (batch - 1)
    return torch.tensor(rows), torch.tensor([list(grid)] * batch), torch.tensor(mask)


def rope_index_args(input_ids, grids, mask, scheme="circle", compat="none"):
    c, v = circlerope.CircleConfig(), circlerope.VisionConfig()
    return (input_ids, grids, None, None, mask, scheme, *c._args(), *v._args(), compat)


def positions(seq_text=(3, 4), batch=2, scheme="circle"):
    ids, grids, mask = request(seq_text, batch=batch)
    return circlerope.get_rope_index(ids, grids, attention_mask=mask, scheme=scheme)[0]


def qk(seq, dtype, layout="bhsd", batch=2, hq=4, hk=2, head_dim=64, generator=None):
    def one(h):
        shape = (batch, h, seq, head_dim) if layout == "bhsd" else (batch, seq, h, head_dim)
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
    return one(hq), one(hk)


# ----------------------------------------------------------------- opcheck ---

def test_opcheck_rope_index():
    for scheme, compat in (("circle", "none"), ("mrope", "hf-5.3")):
        ids, grids, mask = request(pad_left=2)
        torch.library.opcheck(OPS.rope_index.default, rope_index_args(ids, grids, mask, scheme, compat))
    ids = torch.tensor([[5, 6, 7]])  # text only, no mask
    torch.library.opcheck(OPS.rope_index.default, rope_index_args(ids, None, None))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float64])
def test_opcheck_rotary_table(dtype):
    pos = positions(scheme="mrope").to(dtype)
    torch.library.opcheck(OPS.rotary_table.default, (pos, 64, [8, 12, 12], 1e6, "chunked"))
    torch.library.opcheck(OPS.rotary_table.default, (pos, 48, [8, 8, 8], 1e4, "interleaved"))


def _tables(seq):
    pos = positions(seq_text=(3, seq - 3 - 8), batch=2)
    return circlerope.rotary_table(pos, sections=(8, 12, 12), theta=1e6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", ["bhsd", "bshd", "strided"])
@pytest.mark.parametrize("backward", [False, True])
def test_opcheck_rotary_apply(dtype, layout, backward):
    g = torch.Generator().manual_seed(7)
    table = _tables(19)
    if layout == "strided":  # HF's q: [b, s, h, d] storage seen as [b, h, s, d]
        q, k = qk(19, dtype, "bshd", generator=g)
        q, k, qk_layout = q.transpose(1, 2), k.transpose(1, 2), "bhsd"
    else:
        q, k = qk(19, dtype, layout, generator=g)
        qk_layout = layout
    for requires_grad in (False, True):
        args = (q.clone().requires_grad_(requires_grad), k.clone().requires_grad_(requires_grad), table,
                "neox", qk_layout, backward)
        torch.library.opcheck(OPS.rotary_apply.default, args)
    torch.library.opcheck(OPS.rotary_apply.default, (q, k, table, "gptj", qk_layout, backward))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", ["bhsd", "bshd", "strided"])
def test_opcheck_rotary_apply_inplace(dtype, layout):
    g = torch.Generator().manual_seed(8)
    table = _tables(19)
    if layout == "strided":
        q, k = qk(19, dtype, "bshd", generator=g)
        q, k, qk_layout = q.transpose(1, 2), k.transpose(1, 2), "bhsd"
    else:
        q, k = qk(19, dtype, layout, generator=g)
        qk_layout = layout
    torch.library.opcheck(OPS.rotary_apply_.default, (q, k, table, "neox", qk_layout, False))


# -------------------------------------------------------------- fake tensors ---

def test_fake_tensors_propagate_shapes_and_dtypes_without_running():
    with FakeTensorMode():
        ids = torch.empty(3, 41, dtype=torch.int64)
        pos, deltas = circlerope.get_rope_index(ids, scheme="mrope")
        assert pos.shape == (3, 3, 41) and pos.dtype == torch.float32 and deltas.shape == (3, 1)
        table = circlerope.rotary_table(pos, sections=(8, 12, 12))
        assert table.shape == (3, 41, 64) and table.dtype == torch.float32
        q = torch.empty(3, 41, 4, 128, dtype=torch.bfloat16).transpose(1, 2)  # strided bhsd
        k = torch.empty(3, 2, 41, 128, dtype=torch.bfloat16)
        q2, k2 = circlerope.apply_rotary(q, k, table)
        assert q2.shape == q.shape and q2.stride() == q.stride() and q2.dtype == torch.bfloat16
        assert k2.shape == k.shape and k2.stride() == k.stride()


# ------------------------------------------------------------- torch.compile ---

class Attention(torch.nn.Module):
    """A minimal GQA attention block rotating q and k with the fused operator."""

    def __init__(self, width=64, heads=4, kv_heads=2, head_dim=32, sections=(4, 6, 6)):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.heads, self.kv_heads, self.head_dim, self.sections = heads, kv_heads, head_dim, sections
        self.q = torch.nn.Linear(width, heads * head_dim)
        self.k = torch.nn.Linear(width, kv_heads * head_dim)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)

    def forward(self, x, position_ids):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = circlerope.apply_rotary(q, k, circlerope.rotary_table(position_ids, sections=self.sections, theta=1e4))
        return (q.unsqueeze(2) * k.unsqueeze(1)).sum()


class AgeModel(torch.nn.Module):
    """Positions computed inside forward by RotaryEmbedding (one table per geometry), each layer
    rotating with its own geometry's table."""

    def __init__(self, layers=4):
        super().__init__()
        self.rope = circlerope.RotaryEmbedding(circlerope.AgePlan("alternate", layers),
                                               rotary=circlerope.RotaryConfig(sections=(4, 6, 6)))
        self.proj = torch.nn.Linear(32, 32)
        self.layers = layers

    def forward(self, input_ids, grids, mask, q, k):
        angles = self.rope(input_ids, grids, attention_mask=mask)
        out = 0
        for layer in range(self.layers):
            ql, kl = angles.apply(layer, self.proj(q), k)
            out = out + ql.sum() * kl.mean()
        return out


def _run(module, args, backward=True):
    for a in args:
        if isinstance(a, torch.Tensor) and a.grad is not None:
            a.grad = None
    module.zero_grad()
    out = module(*args)
    if backward:
        out.backward()
    return out.detach(), [p.grad.clone() for p in module.parameters() if p.grad is not None]


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_attention_equals_eager_bit_for_bit(dynamic):
    torch._dynamo.reset()
    model = Attention()
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    for seq in (13, 21, 34):  # dynamic sequence lengths: one graph when dynamic
        g = torch.Generator().manual_seed(seq)
        x = torch.randn(2, seq, 64, generator=g)
        pos = positions(seq_text=(3, seq - 3 - 8))
        eager = _run(model, (x, pos))
        got = _run(compiled, (x, pos))
        assert torch.equal(eager[0], got[0])
        for a, b in zip(eager[1], got[1]):
            assert torch.equal(a, b)


@pytest.mark.skipif(os.environ.get("CIRCLEROPE_SANITIZED") == "1",
                    reason="sanitizer tree: Inductor's compiler subprocesses would inherit the ASan preload "
                           "(scripts/package_test.sh runs this test)")
def test_compiled_inductor_matches_eager_within_float32_rounding():
    # Inductor may fuse the projections' surrounding arithmetic differently; the operator
    # itself runs the same kernel, so the results agree to float32 rounding.
    torch._dynamo.reset()
    model = Attention()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for seq in (13, 29):
        g = torch.Generator().manual_seed(seq)
        x = torch.randn(2, seq, 64, generator=g)
        pos = positions(seq_text=(3, seq - 3 - 8))
        eager, got = _run(model, (x, pos)), _run(compiled, (x, pos))
        torch.testing.assert_close(got[0], eager[0], rtol=1e-5, atol=1e-5)
        for a, b in zip(eager[1], got[1]):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_rotary_embedding_with_positions_inside_equals_eager(dynamic):
    torch._dynamo.reset()
    model = AgeModel()
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    for tail in (4, 9):
        ids, grids, mask = request(seq_text=(3, tail), pad_left=1)
        seq = ids.shape[1]
        g = torch.Generator().manual_seed(tail)
        q = torch.randn(2, 4, seq, 32, generator=g, requires_grad=True)
        k = torch.randn(2, 2, seq, 32, generator=g)
        eager = _run(model, (ids, grids, mask, q, k))
        eager_q = q.grad.clone()
        got = _run(compiled, (ids, grids, mask, q, k))
        assert torch.equal(eager[0], got[0]) and torch.equal(eager_q, q.grad)
        for a, b in zip(eager[1], got[1]):
            assert torch.equal(a, b)


def test_compile_specialises_on_the_rotary_settings():
    # The settings' check is taken as a constant while tracing; a different theta must give
    # a different (recompiled) result, not the first trace's.
    torch._dynamo.reset()

    def f(q, k, pos, theta):
        return circlerope.apply_rotary(q, k, circlerope.rotary_table(pos, sections=(4, 6, 6), theta=theta))[0]

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    pos = positions()
    q, k = qk(pos.shape[2], torch.float32, head_dim=32, generator=torch.Generator().manual_seed(1))
    for theta in (1e4, 1e6):
        assert torch.equal(compiled(q, k, pos, theta), f(q, k, pos, theta))
    assert not torch.equal(compiled(q, k, pos, 1e4), compiled(q, k, pos, 1e6))


# ------------------------------------------------------------------ in place ---

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_inplace_equals_out_of_place(dtype):
    g = torch.Generator().manual_seed(4)
    table = _tables(19)
    q, k = qk(19, dtype, "bshd", generator=g)
    q, k = q.transpose(1, 2), k.transpose(1, 2)  # HF's strided q
    want_q, want_k = circlerope.apply_rotary(q, k, table)
    q_ptr = q.data_ptr()
    got_q, got_k = circlerope.apply_rotary(q, k, table, inplace=True)
    assert got_q is q and got_k is k and q.data_ptr() == q_ptr
    assert torch.equal(q, want_q) and torch.equal(k, want_k)


def test_inplace_fused_qkv_views_of_one_buffer():
    # q and k as disjoint slices of one projection output, rotated where they lie
    g = torch.Generator().manual_seed(5)
    table = _tables(19)
    qkv = torch.randn(2, 19, 4 + 2 + 2, 64, generator=g)
    q, k = qkv[:, :, :4].transpose(1, 2), qkv[:, :, 4:6].transpose(1, 2)
    want_q, want_k = circlerope.apply_rotary(q, k, table)
    v_before = qkv[:, :, 6:].clone()
    circlerope.apply_rotary(q, k, table, inplace=True)
    assert torch.equal(q, want_q) and torch.equal(k, want_k) and torch.equal(qkv[:, :, 6:], v_before)


def test_inplace_refuses_what_it_cannot_do():
    table = _tables(19)
    q, k = qk(19, torch.float32)
    with pytest.raises(ValueError, match="no gradient"):
        circlerope.apply_rotary(q.requires_grad_(True), k, table, inplace=True)
    with torch.no_grad():
        circlerope.apply_rotary(q, k, table, inplace=True)  # allowed without grad mode
    q, k = qk(19, torch.float32)
    with pytest.raises(ValueError, match="same data|overlap|share"):
        circlerope.apply_rotary(q, q, table, inplace=True)
    q, k = qk(19, torch.float64)
    with pytest.raises(ValueError, match="share"):
        circlerope.apply_rotary(q, q, table, inplace=True)
    with pytest.raises(ValueError, match="share memory"):
        circlerope.apply_rotary(q[:, :1].expand(2, 4, 19, 64), k, table, inplace=True)
    with pytest.raises(TypeError, match="inplace must be"):
        circlerope.apply_rotary(q, k, table, inplace="yes")


def test_inplace_equals_the_hugging_face_formula():
    g = torch.Generator().manual_seed(6)
    pos = positions(seq_text=(3, 8))
    table = circlerope.rotary_table(pos, sections=(8, 12, 12), theta=1e6)
    q, k = qk(pos.shape[2], torch.float64, generator=g)
    cos, sin = hf_cos_sin(pos, 64, (8, 12, 12), 1e6)
    want_q, want_k = reference.apply_rotary_pos_emb(q, k, cos, sin)
    circlerope.apply_rotary(q, k, table, inplace=True)
    torch.testing.assert_close(q, want_q, rtol=0, atol=1e-6)
    torch.testing.assert_close(k, want_k, rtol=0, atol=1e-6)


# ------------------------------------------------------------------ gradients ---

def test_gradcheck_float64_through_the_registered_autograd():
    pos = positions(seq_text=(2, 1), batch=1)  # 11 tokens; rotary dim 8, head dim 10 (2 pass through)
    table = circlerope.rotary_table(pos, sections=(1, 1, 2), theta=1e4)
    g = torch.Generator().manual_seed(9)
    q, k = qk(pos.shape[2], torch.float64, "bshd", batch=1, hq=2, hk=1, head_dim=10, generator=g)
    q, k = q.transpose(1, 2).requires_grad_(True), k.transpose(1, 2).requires_grad_(True)

    def fn(q, k):
        return circlerope.apply_rotary(q, k, table)

    assert torch.autograd.gradcheck(fn, (q, k))
    assert torch.autograd.gradgradcheck(fn, (q, k))
