"""The operators on CUDA tensors, against the same operators on the CPU.

Every test but the first needs a CUDA device and an operator library built with the CUDA
kernels; elsewhere they skip with the reason. scripts/gpu_check.sh runs this file on a GPU,
with pytest when it is installed and through the small runner at the bottom when not:

    PYTHONPATH=build/gpu/python python3 python/tests/test_cuda.py
"""
import sys

import torch

try:
    import pytest

    skip = pytest.skip
except ImportError:  # the GPU machine may have no pytest: the runner below takes over
    pytest = None

    class _Skipped(Exception):
        pass

    def skip(reason):
        raise _Skipped(reason)

import circlerope
from circlerope.hf import reference

SECTIONS, THETA = (16, 24, 24), 1e6


def test_the_build_says_whether_it_has_cuda_kernels():
    assert isinstance(circlerope.has_cuda_kernels(), bool)
    if not torch.backends.cuda.is_built():  # a CPU-only libtorch cannot have them
        assert not circlerope.has_cuda_kernels()


def need_gpu():
    if not torch.cuda.is_available():
        skip("no CUDA device")
    if not circlerope.has_cuda_kernels():
        skip("the operator library has no CUDA kernels (CIRCLEROPE_CUDA off or a CPU libtorch)")


def positions(seq, batch=1, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(3, batch, seq, generator=gen) * 5000 - 40).float()


def ulps(a, b):
    ia = a.float().contiguous().view(torch.int32).long()
    ib = b.float().contiguous().view(torch.int32).long()
    ka = torch.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    kb = torch.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return (ka - kb).abs()


def exact_table(pos, sections, frequency_layout, theta=THETA, dim=128):
    """The table's entries computed in float64 on the CPU (the angle's error |phi| 2^-52, well
    inside the bound), each frequency on its axis (transformers' angles and section selection,
    circlerope.hf.reference)."""
    freqs = reference.angles(pos.cpu(), dim, theta, torch.float64)
    phi = reference.select_sections(torch.cat([freqs, freqs], -1), sections, frequency_layout)  # [B, S, dim]
    half = phi[..., : dim // 2]
    return torch.cat([half.cos(), half.sin()], -1), phi


def bound(phi):
    """docs/guides/cuda.md's bound on every table entry: absolute, 2^-25 + 2^-47 |phi| + 2^-50."""
    return 2.0 ** -25 + 2.0 ** -47 * phi.abs() + 2.0 ** -50


def test_tables_are_within_the_absolute_bound_of_the_exact_value():
    need_gpu()
    for frequency_layout, sections in (("chunked", SECTIONS), ("interleaved", (24, 20, 20)), ("single", SECTIONS)):
        for scale in (5000, 3e7):
            pos = positions(777, batch=2) * (scale / 5000)
            cpu = circlerope.rotary_table(pos, sections=sections, theta=THETA, frequency_layout=frequency_layout)
            gpu = circlerope.rotary_table(pos.cuda(), sections=sections, theta=THETA, frequency_layout=frequency_layout)
            assert gpu.device.type == "cuda" and gpu.dtype == torch.float32 and gpu.shape == cpu.shape
            exact, phi = exact_table(pos, sections, frequency_layout)
            limit = bound(phi)
            for name, table in (("cuda", gpu.cpu()), ("cpu", cpu)):
                error = (table.double() - exact).abs()
                assert (error <= limit).all(), (name, frequency_layout, scale, (error / limit).max().item())


def test_a_non_finite_position_gives_nan_entries_and_is_reported_without_a_sync():
    need_gpu()
    pos = positions(9)
    pos[1, 0, 4] = float("nan")
    with pytest_raises(ValueError) as cpu_error:
        circlerope.rotary_table(pos, sections=SECTIONS, theta=THETA)
    circlerope.check_cuda_positions()  # nothing pending from another test
    table = circlerope.rotary_table(pos.cuda(), sections=SECTIONS, theta=THETA)  # no error, no wait
    nan = table.isnan().cpu()
    height = torch.zeros(128, dtype=torch.bool)
    height[16:40] = height[64 + 16:64 + 40] = True
    assert nan[0, 4].equal(height) and nan.sum().item() == 48, "that token's height frequencies only"
    with pytest_raises(ValueError) as gpu_error:
        circlerope.check_cuda_positions()
    assert str(gpu_error[0]) == str(cpu_error[0])
    circlerope.check_cuda_positions()  # reported once
    # the next table call after the kernel finished raises it, saying it is an earlier call's
    circlerope.rotary_table(pos.cuda(), sections=SECTIONS, theta=THETA)
    torch.cuda.synchronize()
    with pytest_raises(ValueError) as later:
        circlerope.rotary_table(positions(9).cuda(), sections=SECTIONS, theta=THETA)
    assert str(later[0]).startswith("an earlier rotary_table call on cuda:"), str(later[0])
    assert str(later[0]).endswith(str(cpu_error[0])), str(later[0])
    circlerope.rotary_table(positions(9).cuda(), sections=SECTIONS, theta=THETA)
    # an axis the layout does not read may hold anything, as on the CPU
    pos = positions(9)
    pos[2] = float("inf")
    assert not circlerope.rotary_table(pos.cuda(), sections=(64, 0, 0), theta=THETA).isnan().any()
    circlerope.check_cuda_positions()


def test_table_and_rotation_replay_from_a_cuda_graph_equal_to_eager():
    need_gpu()
    seq = 300
    pos, (q, k) = positions(seq).cuda(), (x.cuda() for x in qk(torch.bfloat16, seq))
    config = circlerope.RotaryConfig(sections=SECTIONS, theta=THETA)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as torch's guide asks
        for _ in range(2):
            circlerope.apply_rotary(q, k, circlerope.rotary_table(pos, config))
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        table = circlerope.rotary_table(pos, config)
        qo, ko = circlerope.apply_rotary(q, k, table)
    for seed in (5, 6):
        new_q, new_k = qk(torch.bfloat16, seq, seed=seed)
        q.copy_(new_q.cuda())
        k.copy_(new_k.cuda())
        pos.copy_(positions(seq, seed=seed).cuda())
        graph.replay()
        want = circlerope.apply_rotary(q, k, circlerope.rotary_table(pos, config))
        assert torch.equal(qo, want[0]) and torch.equal(ko, want[1]), seed
    # a non-finite position in a replay is recorded too (the record exists: eager calls made it)
    pos[0, 0, 7] = float("inf")
    graph.replay()
    with pytest_raises(ValueError) as info:
        circlerope.check_cuda_positions()
    assert "token 7 is inf" in str(info[0]), str(info[0])


def test_reduce_overhead_compile_of_table_and_rotation_equals_eager():
    need_gpu()
    seq = 256
    config = circlerope.RotaryConfig(sections=SECTIONS, theta=THETA)

    def f(pos, q, k):
        return circlerope.apply_rotary(q, k, circlerope.rotary_table(pos, config))

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for seed in range(4):  # the first calls record, the later ones replay the CUDA graph
        pos = positions(seq, seed=seed).cuda()
        q, k = (x.cuda() for x in qk(torch.bfloat16, seq, seed=seed))
        got, want = compiled(pos, q, k), f(pos, q, k)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), seed


class pytest_raises:
    """pytest.raises without pytest: `with pytest_raises(E) as info:` puts the exception in info[0]."""

    def __init__(self, kind):
        self.kind, self.caught = kind, []

    def __enter__(self):
        return self.caught

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError(f"{self.kind.__name__} not raised")
        if not issubclass(kind, self.kind):
            return False
        self.caught.append(value)
        return True


def qk(dtype, seq, heads=(16, 2), dim=128, layout="bhsd", seed=1):
    gen = torch.Generator().manual_seed(seed)

    def one(h):
        x = torch.randn(1, seq, h, dim, generator=gen).to(dtype)  # HF: projection output [B, S, H, D]
        return x.transpose(1, 2) if layout == "bhsd" else x       # seen as [B, H, S, D]: strided

    return one(heads[0]), one(heads[1])


TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2 ** -8 * 2, torch.float16: 2 ** -11 * 2}


def close(a, b, dtype):
    # both sides round the same fp32 math to the storage type once: equal, or one storage ulp
    scale = b.float().abs().clamp(min=1.0)
    return ((a.float() - b.float()).abs() / scale).max().item() <= TOLERANCE[dtype]


def test_rotation_equals_the_cpu_op_on_every_dtype_pairing_and_layout():
    need_gpu()
    pos = positions(333)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for pairing in ("neox", "gptj"):
            for layout in ("bhsd", "bshd"):
                for dim, rot_sections in ((128, SECTIONS), (136, SECTIONS), (64, (8, 12, 12))):
                    q, k = qk(dtype, 333, dim=dim, layout=layout)
                    cpu_table = circlerope.rotary_table(pos, sections=rot_sections, theta=THETA)
                    gpu_table = circlerope.rotary_table(pos.cuda(), sections=rot_sections, theta=THETA)
                    want = circlerope.apply_rotary(q, k, cpu_table, pairing=pairing, qk_layout=layout)
                    got = circlerope.apply_rotary(q.cuda(), k.cuda(), gpu_table, pairing=pairing, qk_layout=layout)
                    for w, g in zip(want, got):
                        assert g.device.type == "cuda" and g.dtype == dtype and g.shape == w.shape
                        assert g.stride() == w.stride(), "outputs keep the input's memory order"
                        assert close(g.cpu(), w, dtype), (dtype, pairing, layout, dim)


def test_autograd_on_cuda_equals_the_cpu_gradients():
    need_gpu()
    pos = positions(257)
    for dtype in (torch.float32, torch.bfloat16):
        q, k = qk(dtype, 257)
        gq, gk = qk(dtype, 257, seed=2)
        grads = []
        for device in ("cpu", "cuda"):
            qd = q.detach().to(device).requires_grad_()
            kd = k.detach().to(device).requires_grad_()
            qo, ko = circlerope.apply_rotary(qd, kd, circlerope.rotary_table(pos.to(device), sections=SECTIONS,
                                                                             theta=THETA))
            torch.autograd.backward([qo, ko], [gq.to(device), gk.to(device)])
            grads.append((qd.grad.cpu(), kd.grad.cpu()))
        for w, g in zip(*grads):
            assert close(g, w, dtype), dtype


def test_float64_hugging_face_formula_agrees_on_cuda():
    need_gpu()
    pos = positions(200)
    q, k = qk(torch.float32, 200)
    # Qwen2.5-VL's formula in float64 (circlerope.hf.reference): cos/sin of cat(freqs, freqs),
    # sections picked per axis
    cos, sin = (reference.select_sections(t, SECTIONS)
                for t in reference.rotary_embedding(pos, 128, THETA, torch.float64))
    want = reference.apply_rotary_pos_emb(q.double(), k.double(), cos, sin)
    got = circlerope.apply_rotary(q.cuda(), k.cuda(), circlerope.rotary_table(pos.cuda(), sections=SECTIONS,
                                                                              theta=THETA))
    for w, g in zip(want, got):
        assert (g.cpu().double() - w).abs().max().item() < 1e-4


def test_mixed_devices_and_float64_are_refused_clearly():
    need_gpu()
    pos = positions(16)
    q, k = qk(torch.float32, 16)
    table = circlerope.rotary_table(pos, sections=SECTIONS, theta=THETA)
    for args, message in (((q.cuda(), k.cuda(), table), "must be on one device"),
                          ((q.cuda(), k, table.cuda()), "must be on one device"),
                          ((q.double().cuda(), k.double().cuda(), table.cuda()), "float64 q and k are rotated on the CPU only")):
        with pytest_raises(ValueError) as info:
            circlerope.apply_rotary(*args)
        assert message in str(info[0]), str(info[0])
    # through torch.ops directly (no Python check on the way): the C++ op says the same
    with pytest_raises(ValueError) as info:
        torch.ops.circlerope.rotary_apply(q.cuda(), k.cuda(), table, "neox", "bhsd", False)
    assert "must be on one device" in str(info[0]), str(info[0])


def test_age_end_to_end_on_cuda_input_ids():
    need_gpu()
    ids = torch.tensor([[5, 6, 151652] + [151655] * 4 + [151653, 7, 8]])
    grid = torch.tensor([[1, 4, 4]])
    rope = circlerope.RotaryEmbedding(circlerope.AgePlan("alternate", 4))
    cpu_angles = rope(ids, grid)
    gpu_angles = rope(ids.cuda(), grid.cuda())
    q, k = qk(torch.bfloat16, ids.shape[1])
    for layer in range(4):
        assert gpu_angles.table(layer).device.type == "cuda"
        want = cpu_angles.apply(layer, q, k)
        got = gpu_angles.apply(layer, q.cuda(), k.cuda())
        for w, g in zip(want, got):
            assert close(g.cpu(), w, torch.bfloat16), layer


def test_empty_and_single_token_batches():
    need_gpu()
    for seq in (0, 1):
        pos = positions(seq)
        table = circlerope.rotary_table(pos.cuda(), sections=SECTIONS, theta=THETA)
        q, k = qk(torch.bfloat16, seq)
        qo, ko = circlerope.apply_rotary(q.cuda(), k.cuda(), table)
        assert qo.shape == q.shape and ko.shape == k.shape
        if seq:
            want = circlerope.apply_rotary(q, k, circlerope.rotary_table(pos, sections=SECTIONS, theta=THETA))[0]
            assert close(qo.cpu(), want, torch.bfloat16)


def _run_without_pytest():
    """Runs every test_* here; prints one line each; exit 1 on a failure, 77 if all skipped."""
    names = sorted(n for n in globals() if n.startswith("test_"))
    failed = skipped = 0
    for name in names:
        try:
            globals()[name]()
            print(f"PASSED  {name}")
        except Exception as e:  # noqa: BLE001 - a test runner reports everything
            if type(e).__name__ == "_Skipped":
                skipped += 1
                print(f"SKIPPED {name}: {e}")
            else:
                failed += 1
                print(f"FAILED  {name}: {type(e).__name__}: {e}")
    print(f"{len(names)} tests: {len(names) - failed - skipped} passed, {skipped} skipped, {failed} failed")
    return 1 if failed else (77 if skipped == len(names) else 0)


if __name__ == "__main__":
    if pytest is not None and "--no-pytest" not in sys.argv:
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", __file__]))
    sys.exit(_run_without_pytest())
