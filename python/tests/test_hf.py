"""transformers' get_rope_index reproduced in each version's behaviour, the model-side
adapter circlerope.hf, and rotation in Hugging Face's terms.

The golden values in tests/data/hf_mrope_positions.json are what transformers itself returned,
in three behaviours. The adapter is exercised here with configs shaped like transformers' own
(objects and dicts); test_hf_versions.py and test_hf_models.py run it on real models of each
release.
"""

import inspect
import json
import os
import types

import pytest
import torch

import circlerope
import circlerope.hf as hf
from circlerope.hf import reference
import tiny_qwen
from conftest import BadRepr, attack

SOURCE = os.environ.get("CIRCLEROPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = json.load(open(os.path.join(SOURCE, "tests", "data", "hf_mrope_positions.json")))["cases"]
# The three behaviours tests/data/hf_mrope_positions.json holds; every mode is checked against the
# real releases by test_hf_versions.py.
GOLDEN_MODES = ("hf-4.49", "hf-4.52", "hf-5.3")
MODES = hf.COMPAT_MODES


def vision_of(request):
    return circlerope.VisionConfig(**request["vision"])


def hf_config(request=None, model_type="qwen2_5_vl", as_dict=False, v5=False):
    """A config with transformers' attribute names (Qwen2.5-VL 4.x layout, or 5.x rope_parameters)."""
    v = (request or {"vision": {}})["vision"]
    vision = {"spatial_merge_size": v.get("spatial_merge_size", 2)}
    if model_type == "qwen2_5_vl":
        vision["tokens_per_second"] = v.get("tokens_per_second", 2)
    rope = {"type": "mrope", "mrope_section": [16, 24, 24]}
    fields = {"model_type": model_type, "vision_start_token_id": v.get("vision_start_token_id", 151652),
              "image_token_id": v.get("image_token_id", 151655), "video_token_id": v.get("video_token_id", 151656),
              "hidden_size": 2048, "num_attention_heads": 16, "vision_config": vision}
    if v5:
        fields["rope_parameters"] = dict(rope, rope_theta=1e6)
    else:
        fields["rope_scaling"] = rope
        fields["rope_theta"] = 1e6
    if as_dict:
        return fields
    ns = types.SimpleNamespace(**fields)
    ns.vision_config = types.SimpleNamespace(**vision)
    return ns


def args_of(request):
    mask = request.get("attention_mask")
    return (torch.tensor(request["input_ids"]), request.get("image_grid_thw") or None,
            request.get("video_grid_thw") or None, request.get("second_per_grid_ts"),
            None if mask is None else torch.tensor(mask))


def expected_of(case, mode):
    e = case["expected"][mode]
    return torch.tensor(e["position_ids"], dtype=torch.int64), torch.tensor(e["rope_deltas"], dtype=torch.int64).view(-1, 1)


# --------------------------------------------------------------------- golden ---

@pytest.mark.parametrize("mode", GOLDEN_MODES)
def test_every_golden_case_equals_transformers_exactly_in_float32(mode):
    # circlerope.get_rope_index gives float32 under every mode, holding transformers' integers
    # exactly; the adapter below gives them in transformers' int64.
    for case in GOLDEN:
        r = case["request"]
        pos, deltas = circlerope.get_rope_index(*args_of(r), scheme="mrope", vision=vision_of(r), compat=mode)
        want_pos, want_deltas = expected_of(case, mode)
        assert pos.dtype == torch.float32 and deltas.dtype == torch.float32, case["name"]
        assert torch.equal(pos, want_pos.float()) and torch.equal(pos.to(torch.int64), want_pos), (case["name"], mode)
        assert torch.equal(deltas.to(torch.int64), want_deltas), (case["name"], mode, deltas.view(-1).tolist())


@pytest.mark.parametrize("mode", GOLDEN_MODES)
def test_adapter_reproduces_every_golden_case_in_its_versions_argument_order(mode):
    for case in GOLDEN:
        r = case["request"]
        model_type = "qwen2_vl" if r["vision"].get("time") == "index" else "qwen2_5_vl"
        if model_type == "qwen2_vl" and r.get("second_per_grid_ts") is not None:
            # Qwen2-VL's method takes no second_per_grid_ts; its time is the frame index anyway.
            r = dict(r, second_per_grid_ts=None)
        fn = hf.rope_index_fn(hf_config(r, model_type), scheme="mrope", compat=mode)
        ids, images, videos, seconds, mask = args_of(r)
        if mode == "hf-5.3":
            types_ = (ids == r["vision"]["image_token_id"]).long() + 2 * (ids == r["vision"]["video_token_id"]).long()
            if model_type == "qwen2_vl":
                pos, deltas = fn(ids, types_, images, videos, mask)
            else:
                pos, deltas = fn(ids, types_, images, videos, seconds, mask)
        elif model_type == "qwen2_vl":
            pos, deltas = fn(ids, images, videos, mask)
        else:
            pos, deltas = fn(ids, images, videos, seconds, mask)
        want_pos, want_deltas = expected_of(case, mode)
        assert pos.dtype == torch.int64 and deltas.dtype == torch.int64, case["name"]  # transformers' dtype
        assert torch.equal(pos, want_pos), (case["name"], mode)
        assert torch.equal(deltas, want_deltas), (case["name"], mode)


def test_without_compat_positions_stay_float32_and_equal_hf_449_on_the_golden_cases():
    for case in GOLDEN:
        r = case["request"]
        pos, deltas = circlerope.get_rope_index(*args_of(r), scheme="mrope", vision=vision_of(r))
        assert pos.dtype == torch.float32
        want_pos, want_deltas = expected_of(case, "hf-4.49")
        assert torch.equal(pos, want_pos.float()) and torch.equal(deltas, want_deltas.float())


# -------------------------------------------------------------------- quirks ---

START, IMAGE, VIDEO, TEXT = 151652, 151655, 151656, 7


def test_hf_452_truncates_second_per_grid_t_before_the_product():
    ids = torch.tensor([[TEXT, START, VIDEO, VIDEO, VIDEO, TEXT]])
    args = dict(video_grid_thw=[[3, 2, 2]], second_per_grid_ts=[0.5], scheme="mrope")
    old, _ = circlerope.get_rope_index(ids, compat="hf-4.49", **args)
    new, _ = circlerope.get_rope_index(ids, compat="hf-4.52", **args)
    assert old[0, 0].tolist() == [0, 1, 2, 3, 4, 5]  # tau = trunc(f * 0.5 * 2) = f
    assert new[0, 0].tolist() == [0, 1, 2, 2, 2, 3]  # tau = f * trunc(0.5) * 2 = 0


def test_hf_53_pads_with_zero_counts_real_tokens_and_continues_after_the_first_frame():
    ids = torch.tensor([[0, TEXT, START, VIDEO, VIDEO, VIDEO, TEXT]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1]])
    args = dict(video_grid_thw=[[3, 2, 2]], second_per_grid_ts=[2.0], attention_mask=mask, scheme="mrope")
    pos, deltas = circlerope.get_rope_index(ids, compat="hf-5.3", **args)
    # pad 0; text 0, start 1; video at 2 with tau 0, 4, 8; text after it at 2 + max(h, w)/2 = 3
    assert pos[0, 0].tolist() == [0, 0, 1, 2, 6, 10, 3]
    assert pos[1, 0].tolist() == [0, 0, 1, 2, 2, 2, 3]
    assert deltas.tolist() == [[10 + 1 - 6]]  # the row maximum against the 6 real tokens
    old, old_deltas = circlerope.get_rope_index(ids, compat="hf-4.52", **args)
    assert old[0, 0].tolist() == [1, 0, 1, 2, 6, 10, 11] and old_deltas.tolist() == [[11 + 1 - 7]]


def test_hf_449_text_only_branch_counts_padded_ones():
    ids = torch.tensor([[0, 0, TEXT, 0], [TEXT, TEXT, TEXT, TEXT]])
    mask = torch.tensor([[0, 0, 1, 0], [1, 1, 1, 1]])
    _, ours = circlerope.get_rope_index(ids, attention_mask=mask, scheme="mrope")
    _, hf449 = circlerope.get_rope_index(ids, attention_mask=mask, scheme="mrope", compat="hf-4.49")
    assert ours.view(-1).tolist() == [0 + 1 - 4, 0]
    assert hf449.view(-1).tolist() == [1 + 1 - 4, 0]


def test_circle_under_a_compat_mode_stays_fractional():
    ids = torch.tensor([[0, TEXT, START] + [IMAGE] * 4 + [TEXT]])
    mask = torch.tensor([[0] + [1] * 7])
    pos, deltas = circlerope.get_rope_index(ids, [[1, 4, 4]], attention_mask=mask, compat="hf-5.3")
    assert pos.dtype == torch.float32 and deltas.dtype == torch.float32
    assert pos[0, 0, 0] == 0.0  # hf-5.3 pads with 0 under every scheme
    assert pos[:, 0, 3:7].frac().abs().sum() > 0


@pytest.mark.parametrize("bad", ["hf-4.50", "HF-5.3", ""])
def test_unknown_compat_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match="compat"):
        circlerope.get_rope_index(torch.tensor([[TEXT]]), scheme="mrope", compat=bad)
    with pytest.raises(ValueError, match="compat"):
        circlerope.decode_position_ids(torch.zeros(1, 1), 3, compat=bad)


@pytest.mark.parametrize("bad", [5.3, ["hf-5.3"]])
def test_a_compat_that_is_no_string_is_a_type_error_naming_it(bad):
    with pytest.raises(TypeError, match="compat"):
        circlerope.get_rope_index(torch.tensor([[TEXT]]), scheme="mrope", compat=bad)
    with pytest.raises(TypeError, match="compat"):
        circlerope.decode_position_ids(torch.zeros(1, 1), 3, compat=bad)


# ------------------------------------------------------------------- adapter ---

def test_adapter_signatures_are_each_versions():
    def params(fn):
        return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]
    pk, var = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_KEYWORD
    for model_type, seconds in (("qwen2_5_vl", ["second_per_grid_ts"]), ("qwen2_vl", [])):
        cfg = hf_config(model_type=model_type)
        old = ["input_ids", "image_grid_thw", "video_grid_thw"] + seconds + ["attention_mask"]
        for mode in ("hf-4.49", "hf-4.52"):
            assert params(hf.rope_index_fn(cfg, compat=mode)) == [(n, pk) for n in old]
        new = ["input_ids", "mm_token_type_ids", "image_grid_thw", "video_grid_thw"] + seconds + ["attention_mask"]
        assert params(hf.rope_index_fn(cfg, compat="hf-5.3")) == [(n, pk) for n in new] + [("kwargs", var)]


def test_adapter_takes_keywords_and_extra_keywords_where_transformers_does():
    ids = torch.tensor([[TEXT, START, IMAGE, IMAGE, IMAGE, IMAGE, TEXT]])
    cfg = hf_config()
    new = hf.rope_index_fn(cfg, scheme="mrope", compat="hf-5.3")
    pos, deltas = new(input_ids=ids, image_grid_thw=torch.tensor([[1, 4, 4]]), attention_mask=None,
                      mm_token_type_ids=None, use_cache=True, cache_position=torch.arange(7))
    assert pos.dtype == torch.int64 and pos[1, 0].tolist() == [0, 1, 2, 2, 3, 3, 4]
    old = hf.rope_index_fn(cfg, scheme="mrope", compat="hf-4.49")
    assert torch.equal(old(ids, torch.tensor([[1, 4, 4]]))[0], pos)
    with pytest.raises(TypeError):  # 4.49's method has no **kwargs: neither has its stand-in
        old(ids, torch.tensor([[1, 4, 4]]), use_cache=True)


def test_adapter_circle_returns_float_positions_and_validates_at_creation():
    ids = torch.tensor([[TEXT, START, IMAGE, IMAGE, IMAGE, IMAGE, TEXT]])
    fn = hf.rope_index_fn(hf_config(), scheme="circle", circle=circlerope.CircleConfig(radius=5), compat="hf-5.3")
    pos, deltas = fn(ids, None, torch.tensor([[1, 4, 4]]))
    assert pos.dtype == torch.float32 and pos[:, 0, 2:6].frac().abs().sum() > 0
    assert fn.scheme == "circle" and fn.compat == "hf-5.3"
    with pytest.raises(ValueError, match="scheme"):
        hf.rope_index_fn(hf_config(), scheme="ring", compat="hf-5.3")
    with pytest.raises(ValueError, match="compat"):
        hf.rope_index_fn(hf_config(), compat="hf-6")
    with pytest.raises(ValueError, match="model_type"):
        hf.rope_index_fn(hf_config(model_type="llava"), compat="hf-5.3")


def test_adapter_refuses_token_types_that_disagree_with_the_ids():
    ids = torch.tensor([[TEXT, START, IMAGE, IMAGE, IMAGE, IMAGE, TEXT]])
    fn = hf.rope_index_fn(hf_config(), scheme="mrope", compat="hf-5.3")
    types_ = torch.tensor([[0, 0, 1, 1, 1, 1, 0]])
    fn(ids, types_, torch.tensor([[1, 4, 4]]))
    types_[0, 6] = 1
    with pytest.raises(ValueError, match=r"mm_token_type_ids\[0\]\[6\] = 1"):
        fn(ids, types_, torch.tensor([[1, 4, 4]]))


@pytest.mark.parametrize("as_dict,v5", [(False, False), (True, False), (False, True), (True, True)])
def test_configs_with_transformers_names(as_dict, v5):
    cfg = hf_config(as_dict=as_dict, v5=v5)
    rc = hf.rotary_config(cfg)
    assert (tuple(rc.sections), rc.theta, rc.dim) == ((16, 24, 24), 1e6, 128)
    v = circlerope.VisionConfig.from_hf_config(cfg)
    assert (v.time, v.tokens_per_second, v.spatial_merge_size) == ("seconds", 2, 2)
    assert circlerope.VisionConfig.from_hf_config(hf_config(model_type="qwen2_vl", as_dict=as_dict)).time == "index"


@pytest.mark.parametrize("version,mode", [("4.45.0", "hf-4.49"), ("4.49.0", "hf-4.49"), ("4.51.3", "hf-4.49"),
                                          ("4.52.0", "hf-4.52"), ("4.57.0.dev0", "hf-4.52"), ("5.1.9", "hf-4.52"),
                                          ("5.2.1", "hf-5.2"), ("5.3.0", "hf-5.3-5.5.3"),
                                          ("5.5.3", "hf-5.3-5.5.3"), ("5.5.4", "hf-5.5.4"),
                                          ("5.6.0.dev0", "hf-5.6"), ("5.17.2", "hf-5.6"), ("5.18.0", "hf-5.18"),
                                          ("5.24.0", "hf-5.18"), ("6.0", "hf-5.18")])
def test_versions_map_to_modes(version, mode):
    assert hf.compat_for_version(version) == mode


@pytest.mark.parametrize("bad", ["4.44.2", "latest", ""])
def test_unusable_versions_are_value_errors(bad):
    with pytest.raises(ValueError):
        hf.compat_for_version(bad)


@pytest.mark.parametrize("bad", [None, 4.52])
def test_versions_that_are_no_strings_are_type_errors(bad):
    with pytest.raises(TypeError, match="transformers version must be a string"):
        hf.compat_for_version(bad)


# -------------------------------------------------------------------- decode ---

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("side", ["left", "right"])
def test_decode_continues_after_the_last_prompt_position(mode, side):
    body = [TEXT, START, IMAGE, IMAGE, IMAGE, IMAGE, TEXT]
    pad = [0, 0]
    ids = torch.tensor([pad + body if side == "left" else body + pad])
    mask = torch.tensor([[0, 0] + [1] * 7 if side == "left" else [1] * 7 + [0, 0]])
    pos, deltas = circlerope.get_rope_index(ids, [[1, 4, 4]], attention_mask=mask, scheme="mrope", compat=mode)
    last = int(pos[:, 0][:, mask[0] == 1].max())  # 4: the text after the 2x2 image
    assert last == 4
    # the generated tokens sit at cache positions 9, 10, 11 (after the padded prompt)
    nxt = circlerope.decode_position_ids(deltas, 9, 3, compat=mode, attention_mask=mask)
    assert nxt.dtype == torch.float32
    assert nxt[0, 0].tolist() == [last + 1, last + 2, last + 3], (mode, side, deltas.tolist())
    # a running mask that already covers the new tokens gives the same positions
    running = torch.cat([mask, torch.ones(1, 3, dtype=mask.dtype)], 1)
    assert torch.equal(circlerope.decode_position_ids(deltas, 9, 3, compat=mode, attention_mask=running), nxt)


def test_hf_53_decode_needs_the_real_token_count_and_449_rule_does_not():
    ids = torch.tensor([[0, 0, TEXT, TEXT]])
    mask = torch.tensor([[0, 0, 1, 1]])
    _, d53 = circlerope.get_rope_index(ids, attention_mask=mask, scheme="mrope", compat="hf-5.3")
    assert d53.tolist() == [[0]]
    # the rule with the mask: 2 real tokens before cache position 4 -> position 2
    assert circlerope.decode_position_ids(d53, 4, compat="hf-5.3", attention_mask=mask)[0, 0].tolist() == [2]
    # without a mask every cached token counts as real: the caller's cache holds only real tokens
    assert circlerope.decode_position_ids(d53, 2, compat="hf-5.3")[0, 0].tolist() == [2]
    _, d449 = circlerope.get_rope_index(ids, attention_mask=mask, scheme="mrope", compat="hf-4.49")
    assert circlerope.decode_position_ids(d449, 4, compat="hf-4.49")[0, 0].tolist() == [2]
    with pytest.raises(ValueError, match="attention_mask"):
        circlerope.decode_position_ids(d53, 4, compat="hf-5.3", attention_mask=torch.ones(2, 4))


def test_circle_deltas_decode_as_float():
    ids = torch.tensor([[TEXT, START, IMAGE, IMAGE, IMAGE, IMAGE, TEXT]])
    pos, deltas = circlerope.get_rope_index(ids, [[1, 4, 4]], compat="hf-4.52")
    nxt = circlerope.decode_position_ids(deltas, 7, 2, compat="hf-4.52")
    assert nxt.dtype == torch.float32
    assert torch.allclose(nxt[0, 0], pos[:, 0].max() + torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("mode", [None, *MODES])
def test_without_a_mask_every_mode_decodes_by_the_cache_position(mode):
    # one rule when every cached token is real: cache position + delta, as decode_position_ids
    # without compat, float32 for every scheme
    deltas = torch.tensor([[-2.0], [0.5]])
    got = circlerope.decode_position_ids(deltas, 7, 3, compat=mode)
    assert got.dtype == torch.float32 and got.shape == (3, 2, 3)
    assert torch.equal(got, circlerope.decode_position_ids(deltas, 7, 3))
    assert got[0].tolist() == [[5.0, 6.0, 7.0], [7.5, 8.5, 9.5]]


# ------------------------------------------------------------------ rotation ---

def hf_multimodal(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """transformers' apply_multimodal_rotary_pos_emb (circlerope.hf.reference): sections picked
    from cos/sin [3, B, S, D], then q * cos + rotate_half(q) * sin."""
    cos, sin = reference.select_sections(cos, mrope_section), reference.select_sections(sin, mrope_section)
    return reference.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)


def test_rotary_cos_sin_is_what_the_hf_rotary_embedding_returns():
    pos, _ = circlerope.get_rope_index(torch.tensor([[TEXT, START] + [IMAGE] * 4 + [TEXT] * 3]), [[1, 4, 4]])
    cos, sin = hf.rotary_cos_sin(pos, hf_config())
    want_cos, want_sin = reference.rotary_embedding(pos, 128, 1e6, torch.float64)  # transformers' in float64
    assert cos.shape == (3, 1, 9, 128) and cos.dtype == torch.float32
    assert torch.allclose(cos.double(), want_cos, atol=1e-6) and torch.allclose(sin.double(), want_sin, atol=1e-6)
    with pytest.raises(TypeError, match="needs a config, or head_dim and rope_theta"):
        hf.rotary_cos_sin(pos)  # no config, no head_dim
    with pytest.raises(ValueError, match=r"rope_theta must be in \[1, 2\^126"):
        hf.rotary_cos_sin(pos, head_dim=128, rope_theta=0.5)  # the core's range of theta, as RotaryConfig's
    half = hf.rotary_cos_sin(pos, head_dim=128, rope_theta=1e6, attention_scaling=0.5)
    assert torch.equal(half[0], cos * 0.5)
    with pytest.raises(ValueError, match="attention_scaling"):
        hf.rotary_cos_sin(pos, dict(hf_config(as_dict=True), rope_scaling={"type": "yarn", "mrope_section": [16, 24, 24]}))


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_apply_multimodal_rotary_pos_emb_equals_transformers_formula(unsqueeze_dim, dtype):
    torch.manual_seed(0)
    pos, _ = circlerope.get_rope_index(torch.tensor([[TEXT, START] + [IMAGE] * 16 + [TEXT] * 5]), [[1, 8, 8]])
    cos, sin = hf.rotary_cos_sin(pos, head_dim=128, rope_theta=1e6)
    shape_q = (1, 16, 23, 128) if unsqueeze_dim == 1 else (1, 23, 16, 128)
    shape_k = (1, 2, 23, 128) if unsqueeze_dim == 1 else (1, 23, 2, 128)
    q, k = torch.randn(shape_q).to(dtype), torch.randn(shape_k).to(dtype)
    got_q, got_k = hf.apply_multimodal_rotary_pos_emb(q, k, cos, sin, [16, 24, 24], unsqueeze_dim)
    want_q, want_k = hf_multimodal(q.double(), k.double(), cos.double(), sin.double(), [16, 24, 24], unsqueeze_dim)
    assert got_q.dtype == dtype and got_q.shape == q.shape
    tol = 1e-5 if dtype == torch.float32 else 2 ** -8 * 4
    assert torch.allclose(got_q.double(), want_q, atol=tol, rtol=tol)
    assert torch.allclose(got_k.double(), want_k, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_apply_multimodal_rotary_pos_emb_does_transformers_math_in_qs_dtype(dtype):
    torch.manual_seed(1)
    pos, _ = circlerope.get_rope_index(torch.tensor([[TEXT, START] + [IMAGE] * 16 + [TEXT] * 5]), [[1, 8, 8]])
    cos, sin = hf.rotary_cos_sin(pos, head_dim=128, rope_theta=1e6, dtype=dtype)  # the model's rotary gives q's dtype
    q, k = torch.randn(1, 16, 23, 128).to(dtype), torch.randn(1, 2, 23, 128).to(dtype)
    got = hf.apply_multimodal_rotary_pos_emb(q, k, cos, sin, [16, 24, 24])
    want = hf_multimodal(q, k, cos, sin, [16, 24, 24])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    fused = hf.apply_multimodal_rotary_pos_emb(q, k, cos, sin, [16, 24, 24], fused=True)
    exact = hf_multimodal(q.double(), k.double(), cos.double(), sin.double(), [16, 24, 24])
    assert fused[0].dtype == dtype and (fused[0].double() - exact[0]).abs().max() <= (got[0].double() - exact[0]).abs().max()
    with pytest.raises(TypeError, match="fused"):
        hf.apply_multimodal_rotary_pos_emb(q, k, cos, sin, [16, 24, 24], fused="yes")


def test_apply_multimodal_rotary_pos_emb_is_differentiable_and_checks_sections():
    pos, _ = circlerope.get_rope_index(torch.tensor([[TEXT] * 6]))
    cos, sin = hf.rotary_cos_sin(pos, head_dim=8, rope_theta=1e4)
    q = torch.randn(1, 2, 6, 8, requires_grad=True)
    k = torch.randn(1, 1, 6, 8, requires_grad=True)
    out_q, out_k = hf.apply_multimodal_rotary_pos_emb(q, k, cos, sin, [2, 1, 1])
    (out_q.square().sum() + out_k.square().sum()).backward()  # a rotation keeps norms: grad = 2x
    assert torch.allclose(q.grad, 2 * q.detach(), atol=1e-5) and torch.allclose(k.grad, 2 * k.detach(), atol=1e-5)
    with pytest.raises(ValueError, match="mrope_section"):
        hf.apply_multimodal_rotary_pos_emb(q, k, cos, sin, [2, 2, 2])


# ------------------------------------------------- circlerope.hf refuses garbage ---

HF_GARBAGE = [None, "x", "", 3.5, -1, 16.9, 2 ** 70, True, [], [[]], [["a"]], {}, {"a": 1}, object(), float("nan"),
              torch.tensor([]), torch.zeros(2, 2, 2, 2, 2), torch.zeros(3, dtype=torch.complex64),
              torch.zeros(1, 3).to("meta"), torch.zeros(1, 3, dtype=torch.bool), [1.5, 2.5], ("a", "b", "c"),
              "x" * 100000, "a\nb\x1b[31m", "\ud800", torch.zeros(2, 2).to_sparse(), BadRepr(), [16, -8, 40],
              [16.9, 24, 24], torch.zeros(1, 1, dtype=torch.long).expand(1 << 20, 1 << 20)]


def _hf_calls():
    """(name, function, args, kwargs) of every public function of circlerope.hf that needs no
    model (test_hf_models.py attacks apply, restore, pack and from_pretrained), valid as given."""
    from circlerope.hf import compat, official
    ids = torch.tensor([[TEXT, START] + [IMAGE] * 4 + [TEXT]])
    grid = torch.tensor([[1, 4, 4]])
    pos, deltas = circlerope.get_rope_index(ids, grid, scheme="mrope", compat="hf-4.52")
    cos, sin = hf.rotary_cos_sin(pos, head_dim=128, rope_theta=1e6)
    q, k = torch.randn(1, 2, ids.shape[1], 128), torch.randn(1, 1, ids.shape[1], 128)
    types_ = compat.expected_token_types(ids, None, circlerope.VisionConfig())
    return [
        ("compat_for_version", hf.compat_for_version, ["4.52.0"], {}),
        ("rope_index_fn", hf.rope_index_fn, [hf_config()], {"scheme": "circle", "circle": None, "compat": "hf-4.52"}),
        ("rope_index_fn dict", hf.rope_index_fn, [hf_config(as_dict=True)], {"scheme": "mrope", "compat": "hf-5.18"}),
        ("get_rope_index hf-4.52", hf.rope_index_fn(hf_config(), compat="hf-4.52"), [ids, grid, None, None, None], {}),
        ("get_rope_index hf-5.18", hf.rope_index_fn(hf_config(), compat="hf-5.18"),
         [ids, types_, grid, None, None, torch.ones_like(ids)], {}),
        ("decode_position_ids hf-4.52", circlerope.decode_position_ids, [deltas, 9, 2],
         {"compat": "hf-4.52", "attention_mask": None}),
        ("decode_position_ids hf-5.18", circlerope.decode_position_ids, [deltas, 9, 2],
         {"compat": "hf-5.18", "attention_mask": torch.ones_like(ids)}),
        ("rotary_config", hf.rotary_config, [hf_config()], {}),
        ("rotary_cos_sin", hf.rotary_cos_sin, [pos],
         {"config": None, "mrope_section": [16, 24, 24], "rope_theta": 1e6, "head_dim": 128,
          "attention_scaling": None, "dtype": torch.float32}),
        ("rotary_cos_sin config", hf.rotary_cos_sin, [pos, hf_config()], {}),
        ("apply_multimodal_rotary_pos_emb", hf.apply_multimodal_rotary_pos_emb, [q, k, cos, sin, [16, 24, 24]],
         {"unsqueeze_dim": 1, "fused": None}),
        ("from_official_config", official.from_official_config, [{"radius": 10, "alpha": 0.5}, 36], {}),
        ("to_official_config", official.to_official_config, [circlerope.CircleConfig(), None], {}),
    ]


def test_every_bad_argument_of_circlerope_hf_raises_a_clean_value_or_type_error():
    # On a4fab96's successor this listed 330 cases: TypeError (compat=[] "unhashable type",
    # rope_theta=[] from float(), mrope_section=None "not iterable"), AttributeError (a list as
    # input_ids of the hf-5.3-on adapter, q or cos not a tensor), RuntimeError (a tensor as
    # unsqueeze_dim or fused, "Could not infer dtype", a repr that fails), IndexError (a mask of
    # another shape), NotImplementedError (sparse), an allocation of 2^40 tokens, and ValueErrors
    # of 100,133 characters or several lines.
    wrong = attack(_hf_calls(), HF_GARBAGE)
    assert not wrong, "\n".join(wrong[:60]) + f"\n({len(wrong)} in all)"


def test_the_token_type_adapter_takes_lists_like_get_rope_index():
    # A list as input_ids of the hf-5.3-on adapter raised AttributeError ('list' has no 'device').
    fn = hf.rope_index_fn(hf_config(), scheme="mrope", compat="hf-5.3")
    ids = [[TEXT, START] + [IMAGE] * 4 + [TEXT]]
    types_ = [[0, 0, 1, 1, 1, 1, 0]]
    got = fn(ids, types_, [[1, 4, 4]])
    want = fn(torch.tensor(ids), torch.tensor(types_), torch.tensor([[1, 4, 4]]))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("sections, error", [
    ([16, -8, 40], ValueError), ([16, 24], ValueError), ([16, 24, 24, 0], ValueError),  # integers, not three >= 0
    ([16.9, 24, 24], TypeError), ([True, 31, 32], TypeError), (torch.tensor([16.0, 24.0, 24.0]), TypeError),
    ("16,24,24", TypeError)])  # no integers
def test_mrope_section_is_three_integers_at_least_zero(sections, error):
    # 16.9 was read as 16 and negative entries were accepted (the split then went wrong silently).
    # The core reads it, as RotaryConfig.sections, in the same words.
    pos, _ = circlerope.get_rope_index(torch.tensor([[TEXT] * 6]))
    cos, sin = hf.rotary_cos_sin(pos, head_dim=128, rope_theta=1e6)
    q = torch.randn(1, 2, 6, 128)
    with pytest.raises(error, match=r"^mrope_section must be three integers t,h,w"):
        hf.apply_multimodal_rotary_pos_emb(q, q, cos, sin, sections)
    config = dict(hf_config(as_dict=True), rope_scaling={"type": "mrope", "mrope_section": sections})
    with pytest.raises(error, match=r"^config mrope_section must be three integers t,h,w"):
        hf.rotary_config(config)
    assert torch.equal(hf.apply_multimodal_rotary_pos_emb(q, q, cos, sin, torch.tensor([16, 24, 24]))[0],
                       hf.apply_multimodal_rotary_pos_emb(q, q, cos, sin, (16, 24, 24))[0])


@pytest.mark.parametrize("head_dim", [127, 9, 3])
def test_an_odd_head_dim_is_refused_as_transformers_refuses_it(head_dim):
    # head_dim=127 gave 126 columns, frequencies over 126: neither what transformers 4.x computed
    # (64 frequencies over 127, 128 columns that then do not fit the head) nor what 5.x does
    # (refuse the config: "RoPE requires an even rotary dimension", for odd head_dim above 4).
    pytest.importorskip("transformers")
    if head_dim > 4 and tiny_qwen.version() >= (5, 0):
        with pytest.raises(Exception, match="RoPE requires an even rotary dimension"):
            tiny_qwen.config(head_dim=head_dim)
    pos, _ = circlerope.get_rope_index(torch.tensor([[TEXT] * 5]))
    # the core's reading of a rotary dim, as RotaryConfig.rotary_dim's
    with pytest.raises(ValueError, match=rf"^head_dim must be an even integer in \[2, 1024\] \(got {head_dim}\)"):
        hf.rotary_cos_sin(pos, head_dim=head_dim, rope_theta=1e4)
    odd = dict(hf_config(as_dict=True), head_dim=head_dim)
    for call in (lambda: hf.rotary_config(odd), lambda: hf.rotary_cos_sin(pos, odd)):
        with pytest.raises(ValueError, match=rf"^config head dimension must be an even integer in \[2, 1024\] "
                                             rf"\(got {head_dim}\)"):
            call()


def test_rotary_cos_sin_equals_the_installed_transformers_rotary_embedding():
    transformers = pytest.importorskip("transformers")
    module_file = transformers.models.qwen2_5_vl.modeling_qwen2_5_vl
    sections = [20, 22, 22]
    config = tiny_qwen.config(hidden=512, heads=4, max_positions=512, sections=sections, theta=1e4)
    module = module_file.Qwen2_5_VLRotaryEmbedding(getattr(config, "text_config", config))
    pos, _ = circlerope.get_rope_index(torch.tensor([[TEXT, START] + [IMAGE] * 4 + [TEXT] * 3]), [[1, 4, 4]])
    pos = pos.to(torch.int64)
    want_cos, want_sin = module(torch.zeros(1, dtype=torch.float32), pos)
    cos, sin = hf.rotary_cos_sin(pos, head_dim=128, rope_theta=1e4)
    if want_cos.dim() == 4 and want_cos.size(0) == 3:  # 4.x: every axis holds every frequency
        assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)
    else:  # 5.x: the module picks each frequency's axis itself
        assert torch.equal(reference.select_sections(cos, sections), want_cos)
        assert torch.equal(reference.select_sections(sin, sections), want_sin)


def test_long_and_multi_line_values_give_one_short_line_in_circlerope_hf():
    # An unknown compat name of 100,000 characters gave a 100,133-character message.
    for value in ("x" * 100000, "hf-4.49\nhf-4.52", "\x1b[31m\x07"):
        for call in (lambda v: hf.rope_index_fn(hf_config(), compat=v), lambda v: hf.compat_for_version(v),
                     lambda v: circlerope.decode_position_ids(torch.zeros(1, 1), 3, compat=v),
                     lambda v: hf.rope_index_fn(dict(hf_config(as_dict=True), model_type=v))):
            with pytest.raises(ValueError) as e:
                call(value)
            message = str(e.value)
            assert len(message) < 300 and all(32 <= ord(c) < 127 for c in message), message[:300]
