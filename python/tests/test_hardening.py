"""Regression tests of the hardening rounds (docs/development/hardening.md), one per finding that reaches Python.
Each failed before its fix; the ones that crashed the interpreter run in a child process, so that a
crash fails the test instead of the whole suite."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import circlerope
import circlerope.hf
from conftest import BadRepr, attack

START, IMAGE, VIDEO, END = 151652, 151655, 151656, 151653
IDS = torch.tensor([[5, START] + [IMAGE] * 4 + [END, 6]])
GRID = torch.tensor([[1, 4, 4]])


def run_child(code: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with this one's import path (and sanitizer preload)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)


# ---------------------------------------------------------------- item 1 ---

def test_ptd_reads_its_vision_config_before_releasing_the_gil():
    # The bindings released the GIL and then read the VisionConfig tuple: SIGSEGV.
    child = run_child("""
        import torch, circlerope
        ids = torch.tensor([[5, 6, 7]])
        try:
            circlerope.ptd(ids, [[1, 4, 4]], vision=circlerope.VisionConfig(vision_start_token_id=-1), scheme="mrope")
        except ValueError as e:
            print("ValueError:", e)
        m = circlerope.ptd(torch.tensor([[5, 151652] + [151655] * 4 + [6]]), [[1, 4, 4]],
                           vision=circlerope.VisionConfig(), scheme="mrope")
        print("ptd", m.ptd)
    """)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "image_grid_thw has 1 entry but input_ids hold 0 image blocks" in child.stdout
    assert "ptd " in child.stdout


# ---------------------------------------------------------------- item 5 ---

def test_sections_whose_sum_wraps_in_int_are_refused():
    # 2147483647 + 2147483647 + 66 wrapped to 64 in int: accepted for rotary dim 128.
    with pytest.raises(ValueError, match=r"sections \[2147483647, 2147483647, 66\] must be >= 0 and sum"):
        circlerope.RotaryConfig(sections=(2 ** 31 - 1, 2 ** 31 - 1, 66), rotary_dim=128)
    positions = circlerope.get_rope_index(IDS, GRID)[0]
    with pytest.raises(ValueError, match=r"\[2147483647, 2147483647, 66\]"):
        torch.ops.circlerope.rotary_table(positions, 128, [2 ** 31 - 1, 2 ** 31 - 1, 66], 1e6, "chunked")
    with pytest.raises(ValueError, match="each in"):
        circlerope.RotaryConfig(sections=(2 ** 31, 0, 64), rotary_dim=128)


# ---------------------------------------------------------------- item 7 ---

@pytest.mark.parametrize("radius", ["auto-2_0", "auto- 2", "auto-0x1p1", "auto-inf", "auto-", "10", "0x10"])
def test_radius_text_follows_the_one_grammar_of_every_front_end(radius):
    # float() read "auto-2_0" as scale 20 and "auto- 2" as 2; the core's grammar refuses both.
    with pytest.raises(ValueError, match="CircleConfig.radius must be a finite number > 0"):
        circlerope.CircleConfig(radius=radius)


def test_numbers_of_every_python_kind_are_read_as_numbers():
    import numpy as np
    a = circlerope.CircleConfig(radius=5, alpha=0.25, dff_rate=True, move_to_positive=0)
    b = circlerope.CircleConfig(radius=np.float32(5), alpha=torch.tensor(0.25, dtype=torch.float64),
                                dff_rate=1.0, move_to_positive=False)
    assert a._args() == b._args() == ("5", 0.25, True, 1.0, "false")
    assert circlerope.CircleConfig(radius="auto-2.5", move_to_positive="auto")._args()[::4] == ("auto-2.5", "auto")


@pytest.mark.skipif(not os.environ.get("CIRCLEROPE_CLI"), reason="needs the circlerope command (ctest sets it)")
@pytest.mark.parametrize("options", [
    {"radius": "auto-2.5"}, {"radius": 3}, {"radius": "auto"}, {"radius": "auto-2_0"}, {"radius": "auto- 2"},
    {"radius": 10, "alpha": 1}, {"radius": 10, "alpha": 1.5}, {"radius": 10, "move_to_positive": "auto"},
    {"radius": 10, "move_to_positive": 0}, {"radius": 10, "move_to_positive": -2.5},
    {"radius": 10, "move_to_positive": "yes"}, {"radius": 10, "dff_rate": True}, {"radius": 10, "dff_rate": 0.3},
    {"radius": 10, "move_to_origin": 1}, {"radius": 10, "move_to_origin": "yes"}, {"radius": -1},
], ids=lambda o: json.dumps(o))
def test_python_and_the_json_request_accept_and_refuse_the_same_circle_values(options, tmp_path):
    request = {"scheme": "circle", "circle": options, "input_ids": IDS.tolist(), "image_grid_thw": GRID.tolist()}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    cli = subprocess.run([os.environ["CIRCLEROPE_CLI"], "positions", "--request", str(path)],
                         capture_output=True, text=True)
    # A request's absent keys mean the reference's defaults (no move_to_origin).
    kwargs = {"move_to_origin": False, **options}
    try:
        pos, _ = circlerope.get_rope_index(IDS, GRID, circle=circlerope.CircleConfig(**kwargs))
    except (ValueError, TypeError) as e:  # a value the core refuses; of a type no field takes
        assert cli.returncode == 2, f"Python refused ({e}) but the CLI accepted"
        key = cli.stderr.split("request.circle.")[1].split(" ")[0]
        assert f"CircleConfig.{key}" in str(e), (cli.stderr, str(e))
        return
    assert cli.returncode == 0, f"the CLI refused ({cli.stderr.strip()}) but Python accepted"
    assert torch.equal(pos, torch.tensor(json.loads(cli.stdout)["position_ids"], dtype=torch.float32))


# ---------------------------------------------------------------- item 8 ---

@pytest.mark.parametrize("delta", [float("nan"), float("inf"), -float("inf")])
def test_decode_positions_refuse_non_finite_deltas(delta):
    # NaN / inf deltas came back as NaN / inf positions.
    with pytest.raises(ValueError, match=r"rope_deltas\[1\] = (nan|inf|-inf) is not finite"):
        circlerope.decode_position_ids(torch.tensor([[0.5], [delta]]), 10, 2)


# ---------------------------------------------------------------- item 10 ---

def test_age_plans_need_their_layer_count():
    # AgePlan(spec) and RotaryEmbedding("all") built a one-layer plan silently; then they raised
    # for an argument their signatures called optional. The layer count and the plan are required.
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'layers'"):
        circlerope.AgePlan("alternate")
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'plan'"):
        circlerope.RotaryEmbedding()
    for spec in ("all", "alternate"):  # a plan is an AgePlan, built for its layer count
        with pytest.raises(TypeError, match=rf"plan must be a circlerope.AgePlan.*\(got '{spec}'\)"):
            circlerope.RotaryEmbedding(spec)
    with pytest.raises(TypeError, match="positional argument"):
        circlerope.RotaryEmbedding(circlerope.AgePlan("all", 3), 4)  # the plan holds the count
    assert len(circlerope.RotaryEmbedding(circlerope.AgePlan("alternate", 6)).plan) == 6
    assert circlerope.RotaryEmbedding(plan=circlerope.AgePlan("CM", 4)).plan.pattern == "CMCM"


# ---------------------------------------------------------------- item 11 ---

def test_decode_counts_beyond_the_token_limit_are_refused_by_size():
    # decode_position_ids(torch.zeros(1), 0, 2**31 - 1) passed (first + count <= 2^31) and asked
    # for 24 GiB; angles.decode(10, 10**9) likewise.
    with pytest.raises(ValueError, match="decode positions: count 2147483647 is more than 16777216 tokens"):
        circlerope.decode_position_ids(torch.zeros(1), 0, 2 ** 31 - 1)
    angles = circlerope.RotaryEmbedding(circlerope.AgePlan("CM", 2), rotary=circlerope.RotaryConfig(sections=(2, 3, 3)))(
        IDS, GRID)
    with pytest.raises(ValueError, match="count 1000000000 is more than 16777216 tokens"):
        angles.decode(10, 10 ** 9)
    assert angles.decode(10, 2).table(1).shape == (1, 2, 16)


# ---------------------------------------------------------------- item 13 ---

def _meta(t):
    return t.to("meta")


def test_meta_tensors_raise_value_error():
    # .cpu() of a meta tensor raised NotImplementedError.
    positions = circlerope.get_rope_index(IDS, GRID)[0]
    for call in (lambda: circlerope.get_rope_index(_meta(IDS), GRID),
                 lambda: circlerope.get_rope_index(IDS, _meta(GRID)),
                 lambda: circlerope.get_rope_index(IDS, GRID, attention_mask=_meta(torch.ones_like(IDS))),
                 lambda: circlerope.rotary_table(_meta(positions)),
                 lambda: circlerope.decode_position_ids(_meta(torch.zeros(1, 1)), 3),
                 lambda: circlerope.ptd(_meta(IDS), GRID),
                 lambda: circlerope.rotary_table(_meta(positions), sections=(16, 24, 24))):
        with pytest.raises(ValueError, match="meta"):
            call()


def test_missing_inputs_raise_type_error_naming_them():
    # get_rope_index(None) raised AttributeError; a None for a required tensor is a TypeError
    # naming the argument, as a missing one is.
    with pytest.raises(TypeError, match="input_ids is required"):
        circlerope.get_rope_index(None)
    with pytest.raises(TypeError, match="RotaryConfig.sections must be three integers"):
        circlerope.RotaryConfig(sections=None)
    with pytest.raises(TypeError, match="position_ids is required"):
        circlerope.rotary_table(None)


GARBAGE = [None, "x", "", 3.5, -1, 2 ** 70, True, [], [[]], [["a"]], {}, {"a": 1}, object(), float("nan"),
           torch.tensor([]), torch.zeros(2, 2, 2, 2, 2), torch.zeros(3, dtype=torch.complex64),
           torch.zeros(1, 3).to("meta"), torch.zeros(1, 3, dtype=torch.bool), [1.5, 2.5], ("a", "b", "c"),
           "x" * 100000, "a\nb\x1b[31m", "\ud800", torch.zeros(2, 2).to_sparse(), BadRepr(), 16.9,
           torch.zeros(1, 1, dtype=torch.long).expand(1 << 20, 1 << 20), torch.zeros(1 << 40, 0)]


def _calls():
    """(name, function, positional args, keyword args) of every public entry point, valid as given."""
    positions, deltas = circlerope.get_rope_index(IDS, GRID)
    table = circlerope.rotary_table(positions)
    q, k = torch.randn(1, 2, IDS.shape[1], 128), torch.randn(1, 1, IDS.shape[1], 128)
    rope = circlerope.RotaryEmbedding(circlerope.AgePlan("CM", 2))
    angles = rope(IDS, GRID)
    return [
        ("get_rope_index", circlerope.get_rope_index, [IDS, GRID, None, None, None],
         {"scheme": "circle", "circle": None, "vision": None}),
        ("decode_position_ids", circlerope.decode_position_ids, [deltas, 9, 2], {}),
        ("layout_positions", circlerope.layout_positions, ["text:2,image:2x2"], {"scheme": "mrope"}),
        ("rotary_table", circlerope.rotary_table, [positions],
         {"sections": (16, 24, 24), "theta": 1e6, "frequency_layout": "chunked", "rotary_dim": 128}),
        ("rotary_table config", circlerope.rotary_table, [positions, circlerope.RotaryConfig()], {}),
        ("apply_rotary", circlerope.apply_rotary, [q, k, table], {"pairing": "neox", "qk_layout": "bhsd"}),
        ("CircleConfig", circlerope.CircleConfig, [],
         {"radius": 10, "alpha": 0.5, "move_to_origin": True, "dff_rate": 0.0, "move_to_positive": None}),
        ("VisionConfig", circlerope.VisionConfig, [],
         {"spatial_merge_size": 2, "tokens_per_second": 2.0, "vision_start_token_id": START,
          "image_token_id": IMAGE, "video_token_id": VIDEO, "time": "seconds"}),
        ("RotaryConfig", circlerope.RotaryConfig, [],
         {"sections": (16, 24, 24), "theta": 1e6, "frequency_layout": "chunked", "rotary_dim": 128, "pairing": "neox"}),
        ("AgePlan", circlerope.AgePlan, ["alternate", 4], {}),
        ("RotaryEmbedding", circlerope.RotaryEmbedding, [circlerope.AgePlan("alternate", 4)],
         {"rotary": None, "circle": None, "vision": None}),
        ("RotaryEmbedding.forward", rope, [IDS, GRID, None, None, None], {}),
        ("RotaryAngles.apply", angles.apply, [1, q, k], {"qk_layout": "bhsd"}),
        ("RotaryAngles.decode", angles.decode, [9, 2], {}),
        ("RotaryAngles.table", angles.table, [0], {}),
        ("ptd", circlerope.ptd, [IDS, GRID, None, None, None],
         {"layout": None, "scheme": "circle", "circle": None, "vision": None, "rotary": None}),
        ("ptd layout", circlerope.ptd, [], {"layout": "text:3,image:2x2", "scheme": "vanilla"}),
    ]


def test_every_invalid_argument_raises_value_or_type_error():
    """Each argument of each entry point replaced by each garbage value: the call succeeds or
    raises ValueError, or TypeError for garbage of another type than the argument's (never
    AttributeError, RuntimeError, NotImplementedError...), of one short clean line (the garbage
    includes sparse tensors, control bytes, surrogates, a failing __repr__ and 2^40-token
    views)."""
    wrong = attack(_calls(), GARBAGE)
    assert not wrong, "\n".join(wrong[:60]) + f"\n({len(wrong)} in all)"


# ============================================== sizes, sparse and mkldnn tensors, names ===

MAX_TOKENS = 1 << 24
HUGE = 1 << 40


def _clean(message: str, value: str = "") -> bool:
    """The quoting rule's promise: one line of printable ASCII, at most 40 characters of the value
    (here: the bytes of its UTF-8 encoding) in a row."""
    if not all(32 <= ord(c) < 127 for c in message):
        return False
    raw = value.encode("utf-8", "surrogatepass").decode("latin-1")
    return all(raw[i:i + 41] not in message for i in range(max(0, len(raw) - 40)))


def _rule(text: str) -> str:
    """detail/quote.h's quoted(), written again from its comment: the first 40 bytes of the
    UTF-8 text in single quotes, bytes outside printable ASCII and ' \\ as \\xNN, then '...'."""
    raw = text.encode("utf-8", "surrogatepass")
    body = "".join(chr(b) if 32 <= b < 127 and b not in b"'\\" else f"\\x{b:02x}" for b in raw[:40])
    return "'" + body + ("..." if len(raw) > 40 else "") + "'"


# ---------------------------------------------------------------- item 8 ---

def _past_the_limit():
    """(name, call) pairs whose tensor is a view costing nothing, with more tokens than one call
    may hold: just past the limit, and far past it."""
    ids = torch.zeros(1, 1, dtype=torch.int64)
    positions = torch.zeros(3, 1, 1)
    q = torch.zeros(1, 1, 1, 8)
    calls = []
    for batch, seq in ((1, MAX_TOKENS + 1), (MAX_TOKENS + 1, 1), (4097, 4097), (HUGE, 0), (1 << 20, 1 << 20)):
        big_ids = ids.expand(batch, seq)
        big_pos = positions.expand(3, batch, seq)
        big_table = torch.zeros(1, 1, 8).expand(batch, seq, 8)
        big_q = q.expand(batch, 1, seq, 8)
        tag = f"{batch}x{seq}"
        calls += [
            (f"get_rope_index input_ids {tag}", lambda i=big_ids: circlerope.get_rope_index(i)),
            (f"get_rope_index attention_mask {tag}",
             lambda i=big_ids: circlerope.get_rope_index(IDS, GRID, attention_mask=i)),
            (f"ptd input_ids {tag}", lambda i=big_ids: circlerope.ptd(i)),
            (f"rotary_table {tag}", lambda p=big_pos: circlerope.rotary_table(p, sections=(2, 1, 1))),
            (f"rotary_table 2-D {tag}", lambda p=big_pos[0]: circlerope.rotary_table(p, sections=(2, 1, 1))),
            (f"apply_rotary table {tag}", lambda t=big_table, x=big_q: circlerope.apply_rotary(x, x, t)),
            (f"RotaryEmbedding {tag}", lambda i=big_ids: circlerope.RotaryEmbedding(circlerope.AgePlan("CM", 2))(i)),
            (f"hf.rotary_cos_sin {tag}",
             lambda p=big_pos: circlerope.hf.rotary_cos_sin(p, head_dim=8, rope_theta=1e4)),
        ]
    grids = torch.zeros(1, 3, dtype=torch.int64)
    for rows in (MAX_TOKENS + 1, HUGE):
        calls += [
            (f"image_grid_thw {rows}", lambda g=grids.expand(rows, 3): circlerope.get_rope_index(IDS, g)),
            (f"video_grid_thw {rows}", lambda g=grids.expand(rows, 3): circlerope.get_rope_index(IDS, None, g)),
            (f"ptd image_grid_thw {rows}", lambda g=grids.expand(rows, 3): circlerope.ptd(IDS, g)),
            (f"second_per_grid_ts {rows}",
             lambda s=torch.zeros(1).expand(rows): circlerope.get_rope_index(IDS, GRID, None, s)),
            (f"decode rope_deltas {rows}", lambda d=torch.zeros(1).expand(rows): circlerope.decode_position_ids(d, 0)),
        ]
    return calls


@pytest.mark.parametrize("name, call", _past_the_limit(), ids=[n for n, _ in _past_the_limit()])
def test_sizes_past_the_token_limit_are_refused_by_shape(name, call):
    # Views of 2^40 tokens reached the allocator (RuntimeError: "can't allocate memory") before
    # any limit was looked at; the limit is now checked on the shape, naming it.
    with pytest.raises(ValueError, match=r"more than \d+ (tokens|values|rows).*, the limit of one call$"):
        call()


def test_the_limit_is_checked_before_a_copy_is_made():
    # int32 input_ids of 2^27 tokens (a view of 4 bytes): the operator converted them to 1 GiB of
    # int64 and only then refused them. Peak memory of a child process says whether it did.
    child = run_child("""
        import resource, torch, circlerope
        calls = [
            lambda: circlerope.get_rope_index(torch.zeros(1, 1, dtype=torch.int32).expand(1 << 15, 1 << 12)),
            lambda: circlerope.rotary_table(torch.zeros(3, 1, 1, dtype=torch.float64).expand(3, 1 << 15, 1 << 12)),
            lambda: circlerope.ptd(torch.zeros(1, 1, dtype=torch.int32).expand(1 << 15, 1 << 12)),
        ]
        for call in calls:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            try:
                call()
            except ValueError as e:
                print("ValueError:", e)
            grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
            print("grew MiB", grew // 1024)
    """)
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert [line.startswith("ValueError: ") for line in lines] == [True, False] * 3, child.stdout
    for line in lines[1::2]:
        assert int(line.split()[-1]) < 256, child.stdout  # the copy would be 1 GiB (1.5 GiB for positions)


def test_sizes_at_the_limit_pass_the_shape_check():
    # 2^24 tokens is the limit itself, not past it: the shape check lets it through.
    with pytest.raises(ValueError, match="must have 2 dimension"):
        circlerope.get_rope_index(torch.zeros(1, dtype=torch.int64).expand(MAX_TOKENS))
    ids = torch.zeros(1, 1, dtype=torch.int64).expand(1, MAX_TOKENS)
    circlerope._checks.check_tokens("input_ids", *ids.shape)
    assert circlerope.decode_position_ids(torch.zeros(1).expand(MAX_TOKENS), 0).shape == (3, MAX_TOKENS, 1)


# ---------------------------------------------------------------- item 9 ---

def _layouts(t: torch.Tensor):
    out = [("torch.sparse_coo", t.to_sparse())]
    if t.dim() == 2:
        out.append(("torch.sparse_csr", t.to_sparse_csr()))
    if t.is_floating_point() and torch.backends.mkldnn.is_available():
        out.append(("torch._mkldnn", t.float().to_mkldnn()))
    return out


VIDEO_IDS = torch.tensor([[5, START] + [VIDEO] * 4 + [END, 6]])


def _tensor_slots():
    """(function, args, kwargs, index or name of a tensor argument, its name in messages)."""
    positions = circlerope.get_rope_index(IDS, GRID)[0]
    table = circlerope.rotary_table(positions, sections=(2, 1, 1))
    q = torch.randn(1, 2, IDS.shape[1], 8)
    mask = torch.ones_like(IDS)
    return [
        (circlerope.get_rope_index, [IDS, GRID, None, None, mask], {}, 0, "input_ids"),
        (circlerope.get_rope_index, [IDS, GRID, None, None, mask], {}, 1, "image_grid_thw"),
        (circlerope.get_rope_index, [IDS, GRID, None, None, mask], {}, 4, "attention_mask"),
        (circlerope.get_rope_index, [VIDEO_IDS, None, GRID, torch.ones(1)], {}, 3, "second_per_grid_ts"),
        (circlerope.rotary_table, [positions], {"sections": (2, 1, 1)}, 0, "position_ids"),
        (circlerope.apply_rotary, [q, q, table], {}, 0, "q"),
        (circlerope.apply_rotary, [q, q, table], {}, 1, "k"),
        (circlerope.apply_rotary, [q, q, table], {}, 2, "table"),
        (circlerope.decode_position_ids, [torch.zeros(1, 1), 3], {}, 0, "rope_deltas"),
        (circlerope.hf.rotary_cos_sin, [positions], {"head_dim": 8, "rope_theta": 1e4}, 0, "position_ids"),
        (circlerope.ptd, [IDS, GRID, None, None, mask], {}, 0, "input_ids"),
        (circlerope.ptd, [IDS, GRID, None, None, mask], {}, 4, "attention_mask"),
    ]


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_and_mkldnn_tensors_are_refused_naming_the_argument_and_its_layout():
    # They raised NotImplementedError (the dispatcher's page about backends) or RuntimeError.
    checked = 0
    for function, args, kwargs, slot, name in _tensor_slots():
        function(*args, **kwargs)  # the base call is valid
        for layout, value in _layouts(args[slot].float() if name == "q" else args[slot]):
            a = list(args)
            a[slot] = value
            with pytest.raises(ValueError, match=rf"^{name} is a {re.escape(layout)} tensor; circlerope takes dense"):
                function(*a, **kwargs)
            checked += 1
    assert checked >= 25


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_the_operators_refuse_sparse_and_mkldnn_tensors_themselves():
    # C++ callers of torch.ops.circlerope reach the operators without the Python checks.
    ops = torch.ops.circlerope
    positions = circlerope.get_rope_index(IDS, GRID)[0]
    q, table = torch.randn(1, 2, IDS.shape[1], 8), circlerope.rotary_table(positions, sections=(2, 1, 1))
    args = ("circle", "10", 0.5, True, 0.0, "false", 2, 2.0, START, IMAGE, VIDEO, "seconds")
    calls = [
        ("input_ids", "Sparse", lambda: ops.rope_index(IDS.to_sparse(), GRID, None, None, None, *args)),
        ("input_ids", "SparseCsr", lambda: ops.rope_index(IDS.to_sparse_csr(), GRID, None, None, None, *args)),
        ("attention_mask", "Sparse",
         lambda: ops.rope_index(IDS, GRID, None, None, torch.ones_like(IDS).to_sparse(), *args)),
        ("position_ids", "Sparse", lambda: ops.rotary_table(positions.to_sparse(), 8, [2, 1, 1], 1e6, "chunked")),
        ("q", "Sparse", lambda: ops.rotary_apply(q.to_sparse(), q, table, "neox", "bhsd", False)),
        ("table", "Sparse", lambda: ops.rotary_apply(q, q, table.to_sparse(), "neox", "bhsd", False)),
        ("k", "Sparse", lambda: ops.rotary_apply_(q.clone(), q.clone().to_sparse(), table, "neox", "bhsd", False)),
    ]
    if torch.backends.mkldnn.is_available():
        calls.append(("q", "Mkldnn", lambda: ops.rotary_apply(q.to_mkldnn(), q, table, "neox", "bhsd", False)))
    for name, layout, call in calls:
        with pytest.raises(ValueError, match=rf"^{name} is a {layout} tensor; circlerope's operators take dense"):
            call()


# --------------------------------------------------------------- item 11 ---

def test_long_and_multi_line_names_give_one_short_line():
    # An unknown compat name of 100,000 characters gave a 100,132-character ValueError; a newline
    # in a name or layout gave two lines.
    long = "x" * 100000
    calls = [
        lambda v: circlerope.get_rope_index(IDS, GRID, compat=v),
        lambda v: circlerope.get_rope_index(IDS, GRID, scheme=v),
        lambda v: circlerope.layout_positions(v),
        lambda v: circlerope.layout_positions("text:2," + v),
        lambda v: circlerope.ptd(layout=v),
        lambda v: circlerope.RotaryConfig(frequency_layout=v),
        lambda v: circlerope.RotaryConfig(pairing=v),
        lambda v: circlerope.CircleConfig(radius=v),
        lambda v: circlerope.VisionConfig(time=v),
        lambda v: circlerope.AgePlan(v, 4),
        lambda v: circlerope.apply_rotary(torch.zeros(1, 1, 8, 8), torch.zeros(1, 1, 8, 8), torch.zeros(1, 8, 8),
                                          qk_layout=v),
        lambda v: circlerope.apply_rotary(torch.zeros(1, 1, 8, 8), torch.zeros(1, 1, 8, 8), torch.zeros(1, 8, 8),
                                          pairing=v),
    ]
    for i, call in enumerate(calls):
        for value in (long, "a\nb", "a\x1b[31m\x07b\r", "\ud800"):
            with pytest.raises(ValueError) as e:
                call(value)
            assert _clean(str(e.value), value), (i, repr(value[:10]), str(e.value)[:300])
            assert len(str(e.value)) < 400, (i, len(str(e.value)))


def test_core_quoting_rule_reaches_python_unchanged():
    import random
    rng = random.Random(19)
    for _ in range(3000):
        text = "".join(chr(rng.choice([rng.randrange(0, 128), rng.randrange(128, 0x3000), 0xD800, 0x1F600]))
                       for _ in range(rng.randrange(0, 80)))
        quoted = circlerope._core.quoted(text)
        assert quoted == _rule(text)
        assert _clean(quoted, text)
        assert _clean(circlerope._core.escaped(text), text)
        assert _clean(circlerope._core.one_line(text), "")
        assert len(circlerope._core.one_line(text * 30)) <= 1000
        assert circlerope._core.quoted(text.encode("utf-8", "surrogatepass")) == quoted
    assert circlerope._checks.shown("a'b") == "'a\\x27b'"
    assert circlerope._checks.shown(torch.zeros(3, 3)).startswith("tensor([[0., 0., 0.],\\x0a")
    assert circlerope._checks.shown(BadRepr()) == "<BadRepr>"
    with pytest.raises(ValueError, match="quoted: expected str or bytes"):
        circlerope._core.quoted(3)


def test_random_text_through_every_text_argument_gives_one_clean_line():
    import random
    rng = random.Random(1919)
    q, table = torch.zeros(1, 1, 8, 8), torch.zeros(1, 8, 8)
    calls = {
        "scheme": lambda v: circlerope.get_rope_index(IDS, GRID, scheme=v),
        "compat": lambda v: circlerope.get_rope_index(IDS, GRID, compat=v),
        "layout": lambda v: circlerope.layout_positions(v),
        "ptd layout": lambda v: circlerope.ptd(layout=v),
        "ptd scheme": lambda v: circlerope.ptd(layout="text:2", scheme=v),
        "RotaryConfig.frequency_layout": lambda v: circlerope.RotaryConfig(frequency_layout=v),
        "RotaryConfig.pairing": lambda v: circlerope.RotaryConfig(pairing=v),
        "rotary_table frequency_layout": lambda v: circlerope.rotary_table(torch.zeros(3, 1, 2), frequency_layout=v),
        "CircleConfig.radius": lambda v: circlerope.CircleConfig(radius=v),
        "CircleConfig.move_to_positive": lambda v: circlerope.CircleConfig(move_to_positive=v),
        "VisionConfig.time": lambda v: circlerope.VisionConfig(time=v),
        "AgePlan": lambda v: circlerope.AgePlan(v, 4),

        "qk_layout": lambda v: circlerope.apply_rotary(q, q, table, qk_layout=v),
        "pairing": lambda v: circlerope.apply_rotary(q, q, table, pairing=v),
    }
    for name, call in calls.items():
        for i in range(60):
            length = rng.randrange(1, 12 if i % 2 else 300)
            value = "".join(chr(rng.choice([rng.randrange(1, 128), rng.randrange(128, 0x800), 0xDC80]))
                            for _ in range(length))
            try:
                call(value)
            except ValueError as e:
                assert _clean(str(e), value), (name, repr(value[:20]), str(e)[:300])


# ================================================== round 3: the Python package ---
# (docs/development/hardening.md, "Round 3"; the model-level findings are in test_hf_models.py)

# ------------------------------------------------------ the saved-config reader ---

def _saved_geometry(saved, layers):
    """The reader apply(model) uses for config.circlerope."""
    from circlerope.hf.model import _saved_geometry as read  # noqa: PLC0415
    return read(saved, layers)


SAVED = {"scheme": "circle", "age": None, "official_decode": False,
         "circle": {"radius": "auto", "alpha": 0.25, "move_to_origin": True, "dff_rate": 0.0, "move_to_positive": None}}


@pytest.mark.parametrize("saved, key", [
    (dict(SAVED, official_decode="false"), r"\['official_decode'\] must be true or false \(got 'false'\)"),
    (dict(SAVED, official_decode=[0]), r"\['official_decode'\] must be true or false \(got \[0\]\)"),
    (dict(SAVED, official_decode="true"), r"\['official_decode'\]"),
    (dict(SAVED, official_decode=2), r"\['official_decode'\]"),
    (dict(SAVED, official_decode=1.0), r"\['official_decode'\]"),
    (dict(SAVED, official_decode=None), r"\['official_decode'\]"),
    (dict(SAVED, circle=[]), r"\['circle'\] = \[\]: expected a dict"),
    (dict(SAVED, circle="auto"), r"\['circle'\] = 'auto': expected a dict"),
    (dict(SAVED, circle=None), r"\['circle'\] = None: expected a dict"),
    (dict(SAVED, circle={"radious": 10}), r"\['circle'\]\['radious'\]: not a field of CircleConfig"),
    (dict(SAVED, circle={"alpha": "0.5"}), r"\['circle'\]: CircleConfig.alpha"),
    (dict(SAVED, circle={"radius": -1}), r"\['circle'\]: CircleConfig.radius"),
    (dict(SAVED, circle={"radius": int("9" * 401)}), r"\['circle'\]: CircleConfig.radius"),
    ({k: v for k, v in SAVED.items() if k != "circle"} | {"circel": {"radius": 3}}, r"\['circel'\]: not a key"),
    (dict(SAVED, AGE_mode="strategy_4"), r"\['AGE_mode'\]: not a key"),
    ([], r" = \[\] is not a geometry"),
    ("circle", r" = 'circle' is not a geometry"),
    ({}, r" has no 'scheme'"),
    (dict(SAVED, scheme="ring"), r"\['scheme'\] = 'ring'"),
    (dict(SAVED, scheme=5), r"\['scheme'\] = 5"),
    (dict(SAVED, age=5), r"\['age'\] = 5"),
    (dict(SAVED, age="CXCX"), r"\['age'\] = 'CXCX'"),
    (dict(SAVED, scheme="vanilla", age="CMCM"), r"\['scheme'\] = 'vanilla', but its AGE plan CMCM makes 'circle'"),
], ids=lambda v: repr(v)[:40])
def test_the_saved_config_reader_refuses_what_it_cannot_read_naming_the_key(saved, key):
    # "false" and [0] turned official decoding on; a circle that is no dict, or has unknown
    # keys, gave the dataclass's TypeError; [] or a misspelt key gave the default circle.
    with pytest.raises(ValueError, match=r"config\.circlerope" + key):
        _saved_geometry(saved, 4)


def test_the_saved_config_reader_reads_what_apply_writes():
    scheme, circle, age, official = _saved_geometry(SAVED, 4)
    assert (scheme, age, official) == ("circle", None, False)
    assert circle == circlerope.CircleConfig(radius="auto", alpha=0.25)
    for value, want in ((True, True), (False, False), (1, True), (0, False)):  # the core's booleans
        assert _saved_geometry(dict(SAVED, official_decode=value), 4)[3] is want
    # absent keys mean no plan, the default circle and no official decoding
    assert _saved_geometry({"scheme": "mrope"}, 4) == ("mrope", circlerope.CircleConfig(), None, False)
    # a plan without Circle-RoPE: apply() writes its first geometry as the scheme
    scheme, _, plan, _ = _saved_geometry(dict(SAVED, scheme="mrope", age="MVMV"), 4)
    assert scheme is None and plan.pattern == "MVMV"


@pytest.mark.parametrize("value", [True, False, 0, 1, 2, -1, "false", "true", "0", 1.0, 0.0, None, [0], (1,), {}])
def test_the_saved_boolean_is_read_as_the_core_reads_one(value):
    # The core's boolean grammar (options.h), as CircleConfig.move_to_origin reads it.
    try:
        want = circlerope.CircleConfig(move_to_origin=value).move_to_origin
        want = bool(want)
    except (TypeError, ValueError):
        want = None
    try:
        got = circlerope._checks.boolean(value, "x")
    except ValueError as e:
        assert str(e) == f"x must be true or false (got {circlerope._checks.shown(value)})"
        got = None
    assert got == want, value


# ------------------------------------------------ the official config's numbers ---

@pytest.mark.parametrize("key, value", [
    ("radius", int("9" * 401)), ("radius", -int("9" * 401)), ("move_to_positive", int("9" * 401)),
    ("move_to_positive", -int("9" * 401)), ("alpha", int("9" * 401)), ("dff_rate", int("9" * 401)),
    ("radius", __import__("fractions").Fraction(int("9" * 401), 1)),
    ("move_to_positive", __import__("fractions").Fraction(int("9" * 401), 1)),
])
def test_an_official_number_beyond_a_double_is_a_value_error_naming_the_key(key, value):
    # float() of a 401-digit radius or move_to_positive raised OverflowError.
    circle_rope = dict({"radius": 10, "alpha": 0.5}, **{key: value})
    with pytest.raises(ValueError, match=rf"^circle_rope\['{key}'\] = .{{1,60}}: "):
        circlerope.hf.from_official_config(circle_rope, 4)


def test_a_range_message_shows_a_huge_integer_bounded():
    # config hidden_size = a 401-digit integer: the message held all 401 digits.
    import tiny_qwen
    pytest.importorskip("transformers")
    config = tiny_qwen.config("qwen2_5_vl")
    text_config = getattr(config, "text_config", config)
    text_config.hidden_size = int("9" * 401)
    with pytest.raises(ValueError, match=r"hidden_size must be an integer in \[1, 1073741824\] \(got 9{30}") as e:
        circlerope.hf.rotary_config(config)
    assert len(str(e.value)) < 200


# ---------------------------------------------- rotary_table under torch.compile ---

@pytest.mark.parametrize("settings", [{"sections": (1.9, 1, 2)}, {"sections": (True, 1, 2)},
                                      {"sections": (2.0, 1, 1)}, {"theta": True},
                                      {"theta": "1e4"}, {"rotary_dim": 8.0}, {"frequency_layout": 1}],
                         ids=lambda s: repr(s))
def test_compiled_rotary_table_refuses_the_settings_eager_refuses(settings):
    # Under torch.compile(fullgraph=True), sections (1.9, 1, 2) and (True, 1, 2) ran as (1, 1, 2),
    # where eager refuses them: the traced path converted them with int().
    positions = torch.zeros(3, 1, 4)
    with pytest.raises(TypeError) as eager:
        circlerope.rotary_table(positions, **settings)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="rotary_table under torch.compile"):  # torch's Unsupported, holding ours
        torch.compile(lambda p: circlerope.rotary_table(p, **settings), fullgraph=True, backend="aot_eager")(positions)
    torch._dynamo.reset()
    with pytest.raises(TypeError) as compiled:  # without fullgraph the call runs eagerly: eager's own error
        torch.compile(lambda p: circlerope.rotary_table(p, **settings), backend="aot_eager")(positions)
    assert str(compiled.value) == str(eager.value)


def test_compiled_rotary_table_takes_exact_settings_as_eager_does():
    positions = circlerope.get_rope_index(IDS, GRID)[0]
    for settings in ({"sections": (1, 1, 2)}, {"sections": [2, 1, 1], "theta": 10000}, {"theta": 1e4, "rotary_dim": 8,
                     "sections": (1, 1, 2)}, {"frequency_layout": "interleaved", "sections": (2, 1, 1)}):
        torch._dynamo.reset()
        compiled = torch.compile(lambda p: circlerope.rotary_table(p, **settings), fullgraph=True, backend="aot_eager")
        assert torch.equal(compiled(positions), circlerope.rotary_table(positions, **settings)), settings


# ------------------------------------------------------------ decode positions ---

@pytest.mark.parametrize("compat", [None, "hf-4.52", "hf-5.18"])
def test_whole_valued_circle_deltas_decode_as_float32(compat):
    # Whole-valued float32 deltas (radius 1e20) were cast to int64: -9223372036854775808.
    ids = torch.tensor([[5, START] + [IMAGE] * 4 + [END, 6]])
    _, deltas = circlerope.get_rope_index(ids, GRID, circle=circlerope.CircleConfig(radius=1e20), compat=compat)
    assert deltas.dtype == torch.float32 and deltas.abs().item() > 1e19 and deltas.item() == deltas.round().item()
    got = circlerope.decode_position_ids(deltas, 8, 3, compat=compat)
    assert got.dtype == torch.float32
    want = torch.tensor([8.0, 9.0, 10.0]) + deltas[0]  # the reference's float32 cache position + delta
    assert torch.equal(got[:, 0], want.expand(3, -1)), (got, want)


@pytest.mark.parametrize("compat", [None, "hf-4.52", "hf-5.18"])
def test_integer_deltas_decode_exactly_then_round_once(compat):
    # int64 deltas past 2^24 were rounded to float32 before the cache position was added:
    # 2^24 + 1 at cache position 1 gave 2^24, where transformers' int64 gives 2^24 + 2 (whose
    # float32, what its rotary embedding computes with, is 2^24 + 2).
    g = torch.Generator().manual_seed(32)
    deltas = torch.cat([torch.tensor([[2 ** 24 + 1], [-(2 ** 40) - 3], [0], [2 ** 62]]),
                        torch.randint(-(2 ** 50), 2 ** 50, (12, 1), generator=g)])
    mask = torch.ones(deltas.size(0), 9, dtype=torch.int64)
    mask[1, :4] = 0
    got = circlerope.decode_position_ids(deltas, 1, 5, compat=compat)
    assert got.dtype == torch.float32 and got.shape == (3, deltas.size(0), 5)
    want = (deltas + 1 + torch.arange(5)).to(torch.float32)  # transformers' cache_position + rope_deltas, .float()
    assert torch.equal(got, want.expand(3, -1, -1))
    assert got[0, 0, 0].item() == 2 ** 24 + 2
    if compat == "hf-5.18":  # the real tokens before each new one, plus the delta
        got = circlerope.decode_position_ids(deltas, 9, 2, compat=compat, attention_mask=mask)
        real = mask.sum(-1, keepdim=True)
        assert torch.equal(got, (deltas + real + torch.arange(2)).to(torch.float32).expand(3, -1, -1))
    for dtype in (torch.int32, torch.int16, torch.uint8):
        small = torch.tensor([[3], [100]], dtype=dtype)
        assert torch.equal(circlerope.decode_position_ids(small, 4, 2, compat=compat),
                           circlerope.decode_position_ids(small.float(), 4, 2, compat=compat))
    with pytest.raises(ValueError, match=r"rope_deltas\[1\] = 9223372036854775807: its decoded positions are beyond "
                                         "int64"):
        circlerope.decode_position_ids(torch.tensor([0, 2 ** 63 - 1]), 1, compat=compat)
    with pytest.raises(ValueError, match="first_cache_position"):  # the core's checks come first
        circlerope.decode_position_ids(torch.tensor([0]), -1, compat=compat)


# --------------------------------------- the HF-shaped rotation checks, then builds ---

def test_the_hf_shaped_rotation_checks_every_size_before_building_its_table():
    # A q narrower than cos/sin (head_dim 64, rotary dim 128) over 2^22 tokens: 10 GiB of
    # section selections and table were built, then the operator refused the head_dim.
    child = run_child("""
        import resource, torch, circlerope.hf as hf
        S = 1 << 22
        cos = torch.zeros(1).expand(3, 1, S, 128)
        calls = [
            lambda: hf.apply_multimodal_rotary_pos_emb(torch.zeros(1).expand(1, 1, S, 64),
                                                       torch.zeros(1).expand(1, 1, S, 64), cos, cos, [16, 24, 24]),
            lambda: hf.apply_multimodal_rotary_pos_emb(torch.zeros(1, dtype=torch.float8_e4m3fn).expand(1, 1, S, 128),
                                                       torch.zeros(1, dtype=torch.float8_e4m3fn).expand(1, 1, S, 128),
                                                       cos, cos, [16, 24, 24], fused=True),
            lambda: hf.apply_multimodal_rotary_pos_emb(torch.zeros(1).expand(1, 1, S, 4096),
                                                       torch.zeros(1).expand(1, 1, S, 4096),
                                                       torch.zeros(1).expand(3, 1, S, 2048),
                                                       torch.zeros(1).expand(3, 1, S, 2048), [340, 342, 342]),
            lambda: hf.apply_multimodal_rotary_pos_emb(torch.zeros(1).expand(1, 1, S, 128),
                                                       torch.zeros(1).expand(1, 1, S, 128), cos, cos, [16, 24, 23]),
        ]
        for call in calls:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            try:
                call()
                print("accepted")
            except ValueError as e:
                print("ValueError:", e)
            print("grew MiB", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
    """)
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert [line.startswith("ValueError: ") for line in lines] == [True, False] * 4, child.stdout
    assert "q has head_dim 64, smaller than the rotary dim 128" in lines[0]
    assert "float8_e4m3fn" in lines[2]
    assert "mrope_section [340, 342, 342]" in lines[4] or "2048" in lines[4]
    assert "mrope_section [16, 24, 23]" in lines[6]
    for line in lines[1::2]:
        assert int(line.split()[-1]) < 256, child.stdout  # a selection alone would be 2 GiB
