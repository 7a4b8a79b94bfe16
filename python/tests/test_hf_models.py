"""circlerope.hf.apply / restore / pack on real transformers models (tiny, random, built from
config objects: nothing is downloaded).

Checked against transformers itself and against an independent layer-by-layer forward:
- M-RoPE through apply() gives the unswitched model's logits bit for bit (eager and sdpa);
- Circle-RoPE and AGE logits equal a forward written here from the model's parts, with each
  layer's (cos, sin) made from circlerope.get_rope_index's positions for its geometry;
- a spy on every attention module sees its geometry's (cos, sin), from float32 positions;
- greedy generate() with a cache equals a full recompute at every step (1 row, a left-padded
  batch of 2), each geometry and AGE; official_decode differs from it under AGE, as the
  reference does;
- pack(): per-sample logits equal separate forwards; its positions survive a bf16 cast;
- gradients with and without gradient checkpointing; save_pretrained / from_pretrained;
  restore(); errors;
- apply(rotation="fused"), the q/k rotation through circlerope's fused operator: equal to
  transformers' formula (logits, gradients), one table per forward and geometry and one fused
  call per layer (forward, decode, pack, checkpointed recompute), its table equal to the
  release's own angles, the release's rotation function back in its module after restore().

The same checks run on another device and dtype, chosen by the environment (default: cpu,
float32 and transformers' own rotation, what CI runs); scripts/gpu_check.py runs them on a GPU:
  CIRCLEROPE_HF_TEST_DEVICE    cpu | cuda: the models, their inputs and the rotation
  CIRCLEROPE_HF_TEST_DTYPE     float32 | bfloat16: the models' weights and activations, built as
                               from_pretrained(dtype=...) builds them (rotary inv_freq float32)
  CIRCLEROPE_HF_TEST_ROTATION  transformers | fused: the rotation every hf.apply (and
                               hf.from_pretrained) of this file switches with, unless a test
                               names one: transformers' formula, or circlerope's fused operator
                               (its CUDA kernel on cuda). Unswitched models keep the formula.
Each tolerance below says what it is in float32 and in bfloat16, and why.
"""

import copy
import dataclasses
import functools
import gc
import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest
import torch

import circlerope
import circlerope.hf as hf
import circlerope.rotary
import tiny_qwen
from circlerope._checks import shown
from circlerope._ops import fused_device
from circlerope.hf import reference

transformers = pytest.importorskip("transformers")

if os.environ.get("CIRCLEROPE_SANITIZED") == "1":
    # Model forwards in torch, which no sanitizer sees; the only circlerope code they reach
    # is get_rope_index, which test_hf_versions.py drives harder under the sanitizers. CI runs
    # this file against every release of its matrix, the venv's included.
    pytest.skip("the sanitizer tree leaves transformers models to scripts/hf_matrix.sh", allow_module_level=True)

VERSION = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", transformers.__version__).groups())
if VERSION < (4, 49):
    pytest.skip("transformers older than 4.49 has no Qwen2.5-VL", allow_module_level=True)


def _setting(name, default, allowed):
    value = os.environ.get(name, default)
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: expected one of {', '.join(allowed)}")
    return value


DEVICE = torch.device(_setting("CIRCLEROPE_HF_TEST_DEVICE", "cpu", ("cpu", "cuda")))
DTYPE = getattr(torch, _setting("CIRCLEROPE_HF_TEST_DTYPE", "float32", ("float32", "bfloat16")))
ROTATION = _setting("CIRCLEROPE_HF_TEST_ROTATION", "transformers", ("transformers", "fused"))
FUSED = ROTATION == "fused"
DEFAULT_SETTING = DEVICE.type == "cpu" and DTYPE == torch.float32 and not FUSED
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    pytest.skip(f"CIRCLEROPE_HF_TEST_DEVICE=cuda, but no CUDA device: torch {torch.__version__} (CUDA "
                f"{torch.version.cuda}) has torch.cuda.is_available() False", allow_module_level=True)
if FUSED and DEVICE.type == "cuda" and not circlerope.has_cuda_kernels():
    pytest.skip("CIRCLEROPE_HF_TEST_ROTATION=fused on cuda, but this circlerope was built without its CUDA kernels "
                "(circlerope.has_cuda_kernels() is False; configure with CIRCLEROPE_CUDA=ON)", allow_module_level=True)
VOCAB, START, END, IMAGE, VIDEO, PAD = 300, 290, 291, 292, 293, 0
# Kept out of generated text: a random model may pick a placeholder, which a full recompute
# then refuses outside a vision block.
SPECIAL = [START, END, IMAGE, VIDEO]
LAYERS = 4
ATOL = 2e-5  # cached decode against a full recompute: different matmul shapes, same positions

# bfloat16 tolerances, in units of its unit roundoff u = 2^-8 (8 significant bits) times the
# largest |value| compared (logits here: about 0.5). Where the compared sides run the same
# operations on the same shapes (M-RoPE through apply() against the unswitched model, the spy,
# restore, save and load) they stay bit for bit, as in float32. Where they differ in how the
# work is cut (a decode step's one row against a full recompute's S rows, a packed row against
# separate samples, the fused rotation against transformers' formula), each of about 8
# bfloat16 roundings per layer (q, k, v, scores, attention, MLP, residual; 4 layers, then norm
# and lm_head) can land on a different neighbour, a relative error of at most u each, which the
# residual stream carries to the logits. BF16_ULPS bounds that with room. Measured on the CPU
# (torch 2.15; transformers 5.24, 4.57.6, 4.52.4): the fused rotation 3 u, packing 2.7 u, the
# cached decode 1.1 u (mostly 0: the CPU's bfloat16 matmuls round 1 row as S rows), the
# layer-by-layer transcription 0; eager against sdpa attention, a stand-in for a GPU's other
# kernels, 2.4 u.
UNIT = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8}
BF16_ULPS = 16
# A tiny random model's attention is nearly uniform (scores of about 0.03): its logits move by
# 1.5 u when the layers' positions change (official_decode's second step, measured), no more
# than bfloat16's rounding, so no bound could tell a wrong position from rounding. In bfloat16
# the text layers' q_proj and k_proj (weights and biases) are scaled by SHARPEN, which makes the
# attention sharp, as a trained model's is: that step then moves the logits by 100 u (measured),
# 6 times BF16_ULPS, and a leak between packed samples by their whole scale.
SHARPEN = 8.0
BF16_GRAD_ULPS = 32  # gradients, against each parameter's largest entry (the fused rotation's test)


def assert_near(got, want, fp32_atol, msg=None, dtype=DTYPE, ulps=BF16_ULPS):
    """float32: |got - want| <= fp32_atol (the CPU suite's tolerances, for logits of magnitude
    about 1). bfloat16: <= ulps * u * max|want| (above)."""
    got, want = got.cpu(), want.cpu()
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=0, atol=fp32_atol, msg=msg)
        return
    bound = ulps * UNIT[dtype] * want.float().abs().max().item()
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=bound, msg=msg)


HAS_QWEN3 = hasattr(transformers, "Qwen3VLForConditionalGeneration")  # 4.57 on
MODEL_TYPES = ["qwen2_vl", "qwen2_5_vl"] + (["qwen3_vl"] if HAS_QWEN3 else [])


def _config(model_type, attn):
    """The tiny config of `model_type`: LAYERS layers of width 64, M-RoPE sections [2, 3, 3] and
    theta 1e4, 2-pixel patches, the token ids above, attention `attn`."""
    return tiny_qwen.config(model_type, tokens={"vision_start_token_id": START, "vision_end_token_id": END,
                                                "image_token_id": IMAGE, "video_token_id": VIDEO},
                            vocab=VOCAB, layers=LAYERS, theta=1e4, patch=2, window=4,
                            special={"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": PAD}, attn=attn)


def dtype_kwargs(dtype):
    """from_pretrained's / _from_config's dtype argument (torch_dtype before 5.0)."""
    return {"dtype" if VERSION >= (5, 0) else "torch_dtype": dtype}


def make_model(model_type="qwen2_5_vl", attn="eager", seed=0, dtype=DTYPE):
    torch.manual_seed(seed)
    Model = {"qwen2_vl": transformers.Qwen2VLForConditionalGeneration,
             "qwen2_5_vl": transformers.Qwen2_5_VLForConditionalGeneration,
             "qwen3_vl": getattr(transformers, "Qwen3VLForConditionalGeneration", None)}[model_type]
    config = _config(model_type, attn)
    if dtype == torch.float32 and attn != "flash_attention_2":
        model = Model(config)
    else:
        # As from_pretrained(dtype=...) builds a model: the weights in dtype, the rotary
        # embedding's inv_freq float32 (model.to(dtype) would round it too); the attention
        # implementation named, so that transformers loads flash-attention's functions.
        model = Model._from_config(config, attn_implementation=attn, **dtype_kwargs(dtype))
    if dtype != torch.float32:
        with torch.no_grad():
            for layer in parts(model).layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                    for tensor in (proj.weight, proj.bias):
                        if tensor is not None:
                            tensor.mul_(SHARPEN)
    model = model.to(DEVICE).eval()
    for obj in (model.config, getattr(model.config, "text_config", None)):
        if obj is not None:
            obj.pad_token_id = PAD
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = PAD
    return model


def block(kind, t, h, w):
    """Token ids of one vision block: start, t*(h/2)*(w/2) placeholders, end."""
    return [START] + [VIDEO if kind == "video" else IMAGE] * (t * (h // 2) * (w // 2)) + [END]


def request(kinds=("image",), seed=0, video_t=2):
    """One sample: text, then a block per kind, then text; the pixels its grids need."""
    g = torch.Generator().manual_seed(seed)
    ids, images, videos = [int(x) for x in torch.randint(3, 200, (3,), generator=g)], [], []
    for i, kind in enumerate(kinds):
        grid = [video_t, 4, 4] if kind == "video" else [1, 4, 6 if i % 2 else 4]
        (videos if kind == "video" else images).append(grid)
        ids += block(kind, *grid) + [int(x) for x in torch.randint(3, 200, (2,), generator=g)]
    sample = {"input_ids": torch.tensor([ids])}
    patch = 3 * 2 * 2 * 2  # in_channels * temporal_patch_size * patch_size^2
    if images:
        sample["image_grid_thw"] = torch.tensor(images)
        sample["pixel_values"] = torch.randn(sum(t * h * w for t, h, w in images), patch, generator=g)
    if videos:
        sample["video_grid_thw"] = torch.tensor(videos)
        sample["pixel_values_videos"] = torch.randn(sum(t * h * w for t, h, w in videos), patch, generator=g)
    return sample


def qwen3_video(seed=4, t=2):
    """A Qwen3-VL video: each frame its own block behind a timestamp token (a text token here)."""
    g = torch.Generator().manual_seed(seed)
    ids = [5, 6, 7]
    for frame in range(t):
        ids += [100 + frame] + block("video", 1, 4, 4)
    ids += [8, 9]
    return {"input_ids": torch.tensor([ids]), "video_grid_thw": torch.tensor([[t, 4, 4]]),
            "pixel_values_videos": torch.randn(t * 16, 3 * 2 * 2 * 2, generator=g)}


def inputs_for(model_type, name):
    if model_type == "qwen3_vl" and name == "video":
        return qwen3_video()
    return REQUESTS[name]()


_REFUSED = {}


def skip_if_transformers_refuses(model_type, name):
    """Skip where the release's own unswitched model cannot run the request (4.54.1's Qwen2-VL
    finds no video tokens: "Video features and video tokens do not match"; 5.3.0's Qwen3-VL
    raises StopIteration on a video)."""
    if (model_type, name) not in _REFUSED:
        model = make_model(model_type)
        try:
            forward_logits(model, hf_kwargs(model, inputs_for(model_type, name)))
            _REFUSED[model_type, name] = None
        except (ValueError, StopIteration) as e:  # 5.3.0's Qwen3-VL runs out of its split video grids
            _REFUSED[model_type, name] = f"{type(e).__name__}: {e}"
    if _REFUSED[model_type, name]:
        pytest.skip(f"transformers {transformers.__version__}'s own {model_type} refuses this request: "
                    f"{_REFUSED[model_type, name][:100]}")


def padded_batch(side="left"):
    """Two rows of different lengths, padded on `side`, with the attention mask."""
    a, b = request(("image",), seed=1), request(("image", "image"), seed=2)
    la, lb = a["input_ids"].size(1), b["input_ids"].size(1)
    n = max(la, lb)

    def pad(row, length):
        fill = torch.full((1, n - length), PAD, dtype=torch.int64)
        return torch.cat([fill, row] if side == "left" else [row, fill], 1)

    def mask(length):
        ones, zeros = torch.ones(1, length, dtype=torch.int64), torch.zeros(1, n - length, dtype=torch.int64)
        return torch.cat([zeros, ones] if side == "left" else [ones, zeros], 1)

    return {"input_ids": torch.cat([pad(a["input_ids"], la), pad(b["input_ids"], lb)]),
            "attention_mask": torch.cat([mask(la), mask(lb)]),
            "image_grid_thw": torch.cat([a["image_grid_thw"], b["image_grid_thw"]]),
            "pixel_values": torch.cat([a["pixel_values"], b["pixel_values"]])}


def token_types(ids):
    return (ids == IMAGE).long() + 2 * (ids == VIDEO).long()


def hf_kwargs(model, inputs):
    """What the unswitched model needs: mm_token_type_ids from 5.3 on."""
    out = dict(inputs)
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        out["mm_token_type_ids"] = token_types(inputs["input_ids"])
    return out


def lm_loss(logits, ids):
    """Next-token cross-entropy (computed here: 4.52's own loss reads a config.vocab_size that
    its nested configs lack)."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def parts(model):
    inner = model.model
    return getattr(inner, "language_model", inner)


def on_device(inputs):
    """inputs on the models' device (CIRCLEROPE_HF_TEST_DEVICE)."""
    return {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in inputs.items()}


def forward_logits(model, inputs):
    """The logits of inputs moved to the models' device, back on the CPU for comparison."""
    with torch.no_grad():
        return model(**on_device(inputs)).logits.cpu()


# ------------------------------------------------- the rotation inside the models ---

# The modules whose text attention rotates q and k, and the function it calls: transformers'
# apply_multimodal_rotary_pos_emb (cos/sin [3, B, S, D]: Qwen2-VL and Qwen2.5-VL in 4.x and
# early 5.x) or apply_rotary_pos_emb (cos/sin [B, S, D], each frequency already on its axis:
# Qwen3-VL, and Qwen2-VL / Qwen2.5-VL in later 5.x, 5.24 among them), as this release defines
# them (the originals that apply(rotation="fused") replaces and restore() must put back).
# Their vision towers call functions of other names.
MODULES = {"qwen2_vl": "qwen2_vl.modeling_qwen2_vl", "qwen2_5_vl": "qwen2_5_vl.modeling_qwen2_5_vl",
           "qwen3_vl": "qwen3_vl.modeling_qwen3_vl"}
RELEASE_ROTATIONS = {}
for _type, _name in MODULES.items():
    try:
        _module = importlib.import_module(f"transformers.models.{_name}")
    except ImportError:  # Qwen3-VL before 4.57
        continue
    for _fn in ("apply_multimodal_rotary_pos_emb", "apply_rotary_pos_emb"):
        if hasattr(_module, _fn):
            RELEASE_ROTATIONS[_type] = (_module, _fn, getattr(_module, _fn))
            break
_APPLY = hf.apply


@pytest.fixture(autouse=True)
def _device_and_rotation(monkeypatch):
    """CIRCLEROPE_HF_TEST_ROTATION=fused: hf.apply switches with rotation="fused" unless the test
    names a rotation. On CUDA, float32 means float32: cuDNN's TF32 convolutions (its default)
    would round the vision tower's patch embedding to 10-bit mantissas, by an algorithm cuDNN
    picks per batch size (a pack against its samples). Matmuls are float32 by default. After
    every test the releases' rotation functions are their own again (a switched model left
    behind gives its dispatcher back when it is freed)."""
    if FUSED:
        monkeypatch.setattr(hf, "apply", functools.partial(_APPLY, rotation="fused"))
    tf32 = torch.backends.cudnn.allow_tf32
    if DEVICE.type == "cuda":
        torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
        gc.collect()
        for module, fn, original in RELEASE_ROTATIONS.values():
            assert getattr(module, fn) is original, f"{module.__name__}.{fn} is still replaced after the test"


class FusedSpy:
    """Counts the calls a switched model makes of rotary_table (tables) and apply_rotary
    (rotations, with the device type of each q), which it looks up on circlerope.rotary."""

    def __init__(self, monkeypatch):
        self.tables, self.rotations = 0, []
        table, rotate = circlerope.rotary.rotary_table, circlerope.rotary.apply_rotary

        def rotary_table(*args, **kwargs):
            self.tables += 1
            return table(*args, **kwargs)

        def apply_rotary(q, *args, **kwargs):
            assert fused_device(q), f"circlerope has no fused kernel for {q.device}"
            self.rotations.append(q.device.type)
            return rotate(q, *args, **kwargs)

        monkeypatch.setattr(circlerope.rotary, "rotary_table", rotary_table)
        monkeypatch.setattr(circlerope.rotary, "apply_rotary", apply_rotary)

    def clear(self):
        self.tables, self.rotations = 0, []


@pytest.fixture
def fused_spy(monkeypatch):
    return FusedSpy(monkeypatch)


@pytest.fixture
def deterministic():
    """On CUDA, deterministic algorithms for a backward pass: cuDNN's (the vision tower's
    convolution gradient may otherwise take atomics) and torch's (index_put's accumulation in
    the vision tower's window reordering), so that run-to-run noise cannot pass for a
    difference. The CPU's are deterministic already."""
    if DEVICE.type != "cuda":
        yield
        return
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic = before[2]


REQUESTS = {"text": lambda: {"input_ids": torch.tensor([[5, 6, 7, 8, 9]])},
            "image": lambda: request(("image",)),
            "two images": lambda: request(("image", "image"), seed=3),
            "video": lambda: request(("video",), seed=4),
            "left padded": lambda: padded_batch("left"),
            "right padded": lambda: padded_batch("right")}


# ------------------------------------------------------------ M-RoPE exact ---

@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("name", list(REQUESTS))
def test_switched_mrope_is_the_unswitched_model_bit_for_bit(model_type, attn, name):
    """Bit for bit with transformers' rotation; with the fused one (CIRCLEROPE_HF_TEST_ROTATION)
    within the rounding of test_the_fused_rotation_inside_a_model_equals_transformers_formula,
    since the unswitched model rotates with the formula."""
    skip_if_transformers_refuses(model_type, name)
    model = make_model(model_type, attn)
    inputs = inputs_for(model_type, name)
    want = forward_logits(model, hf_kwargs(model, inputs))
    hf.apply(model, "mrope")
    got = forward_logits(model, inputs)  # no mm_token_type_ids: apply derives them
    real = inputs.get("attention_mask", torch.ones_like(inputs["input_ids"])).bool()
    if FUSED:
        assert_near(got[real], want[real], 1e-5)
    else:
        assert torch.equal(got[real], want[real])
    hf.restore(model)
    assert torch.equal(forward_logits(model, hf_kwargs(model, inputs))[real], want[real])


# ------------------------------------------------ an independent transcription ---

def reference_logits(model, inputs, per_layer_schemes, circle=None):
    """The model's forward written out: embeddings with the vision features scattered in, then
    every decoder layer with the (cos, sin) of ITS geometry's positions (circlerope.get_rope_index,
    float32), transformers' rotary formula, a causal + padding mask, the final norm and lm_head.
    Nothing here goes through apply()."""
    text = parts(model)
    inputs = on_device(inputs)
    ids = inputs["input_ids"]
    mask2d = inputs.get("attention_mask")
    vision = circlerope.VisionConfig.from_hf_config(model.config)
    compat = hf.installed_compat()
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        visual = getattr(model.model, "visual", None) or model.visual
        for pixels, grid, token in (("pixel_values", "image_grid_thw", IMAGE),
                                    ("pixel_values_videos", "video_grid_thw", VIDEO)):
            if pixels in inputs:
                feats = visual(inputs[pixels], grid_thw=inputs[grid])
                feats = getattr(feats, "pooler_output", feats)
                feats = torch.cat(list(feats)) if isinstance(feats, (list, tuple)) else feats
                embeds = embeds.masked_scatter((ids == token).unsqueeze(-1).expand_as(embeds), feats.to(embeds.dtype))
        b, s, _ = embeds.shape
        allowed = torch.ones(s, s, dtype=torch.bool, device=DEVICE).tril()[None, None].expand(b, 1, s, s).clone()
        if mask2d is not None:
            allowed &= mask2d.bool()[:, None, None, :]
        additive = torch.zeros(b, 1, s, s, dtype=embeds.dtype, device=DEVICE).masked_fill(
            ~allowed, torch.finfo(embeds.dtype).min)
        pos = {}
        for scheme in set(per_layer_schemes):
            p, _ = circlerope.get_rope_index(ids, inputs.get("image_grid_thw"), inputs.get("video_grid_thw"),
                                             inputs.get("second_per_grid_ts"), mask2d, scheme=scheme,
                                             circle=circle, vision=vision, compat=compat)
            pos[scheme] = type(text.rotary_emb).forward(text.rotary_emb, embeds, p.to(torch.float32))
        hidden = embeds
        for layer, scheme in zip(text.layers, per_layer_schemes):
            out = type(layer).forward(layer, hidden, attention_mask=additive, position_embeddings=pos[scheme])
            hidden = out[0] if isinstance(out, tuple) else out
        return model.lm_head(text.norm(hidden)).cpu()


def fused_rotary(model):
    """The RotaryConfig of a model's table under rotation="fused": the release's mrope_section,
    rope_theta and head dimension; Qwen3-VL's frequencies interleaved (its
    apply_interleaved_mrope), Qwen2-VL's and Qwen2.5-VL's chunked."""
    return dataclasses.replace(hf.rotary_config(model.config),
                               frequency_layout="interleaved" if model.config.model_type == "qwen3_vl" else "chunked")


def assert_layer_receives(pair, model, positions, msg=None):
    """The (cos, sin) a layer of a switched model received is its geometry's for float32
    positions [3, B, S], bit for bit: transformers' rotary embedding's, or under the fused
    rotation those tensors marked with circlerope.rotary_table(positions) of the model's
    frequencies, and holding that table's angles (halves repeated, in the model's dtype; the
    same on every axis where the release takes [3, B, S, D])."""
    assert type(pair) is tuple and len(pair) == 2, msg
    rotary = parts(model).rotary_emb
    mark = getattr(pair[0], "_circlerope_fused", None)
    if hf.geometry(model)["rotation"] == "transformers":
        assert mark is None, msg
        cos, sin = type(rotary).forward(rotary, torch.zeros(1, dtype=DTYPE, device=DEVICE), positions.to(DEVICE))
    else:
        assert mark is not None and getattr(pair[1], "_circlerope_fused", None) is mark, msg
        table = circlerope.rotary_table(positions.to(DEVICE), fused_rotary(model))
        assert torch.equal(mark.table, table), msg
        cos, sin = (torch.cat((h, h), -1).to(DTYPE) for h in table.chunk(2, -1))
        if pair[0].dim() == 4:
            cos, sin = cos.expand(3, *cos.shape), sin.expand(3, *sin.shape)
    assert torch.equal(pair[0], cos) and torch.equal(pair[1], sin), msg


GEOMETRIES = {"circle": dict(scheme="circle"), "vanilla": dict(scheme="vanilla"),
              "alternate": dict(age="alternate"), "lower": dict(age="lower"), "pattern CMMV": dict(age="CMMV")}


def layer_schemes(model):
    g = hf.geometry(model)
    return [g["schemes"][i] for i in g["layer_geometry"]]


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl"])
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("name", ["image", "two images", "video", "left padded", "right padded"])
def test_circle_and_age_equal_the_layer_by_layer_transcription(model_type, geometry, name):
    skip_if_transformers_refuses(model_type, name)
    model = make_model(model_type, "eager")
    inputs = REQUESTS[name]()
    circle = circlerope.CircleConfig(radius="auto", alpha=0.7)
    hf.apply(model, circle=circle, **GEOMETRIES[geometry])
    got = forward_logits(model, inputs)
    want = reference_logits(model, inputs, layer_schemes(model), circle)
    real = inputs.get("attention_mask", torch.ones_like(inputs["input_ids"])).bool()
    # float32: the reference runs the model's own layers, so only its mask differs; bfloat16: above
    assert_near(got[real], want[real], 1e-5)


def compat_of(model_type):
    """The mode circlerope.hf uses for a model: the installed release's."""
    return hf.installed_compat()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_each_layer_receives_its_geometrys_cos_sin_from_float32_positions(monkeypatch, model_type):
    model = make_model(model_type)
    text = parts(model)
    seen_positions = []
    original = type(text.rotary_emb).forward

    def spy_rotary(self, x, position_ids, *a, **k):
        seen_positions.append(position_ids)
        return original(self, x, position_ids, *a, **k)

    monkeypatch.setattr(type(text.rotary_emb), "forward", spy_rotary)
    hf.apply(model, age="alternate")
    got = {}
    hooks = [layer.self_attn.register_forward_pre_hook(
        lambda mod, args, kwargs, i=i: got.__setitem__(i, kwargs["position_embeddings"]), with_kwargs=True)
        for i, layer in enumerate(text.layers)]
    inputs = request(("image",))
    forward_logits(model, inputs)
    for h in hooks:
        h.remove()
    # Under the fused rotation the table is built from the positions instead.
    assert all(p.dtype == torch.float32 for p in seen_positions) and len(seen_positions) == (0 if FUSED else 2)
    vision = circlerope.VisionConfig.from_hf_config(model.config)
    for i, scheme in enumerate(["circle", "mrope", "circle", "mrope"]):
        p, _ = circlerope.get_rope_index(inputs["input_ids"], inputs["image_grid_thw"], scheme=scheme,
                                         vision=vision, compat=compat_of(model_type))
        assert_layer_receives(got[i], model, p.float(), msg=(i, scheme))


def test_circle_positions_are_fractional_and_reach_the_layers():
    model = make_model("qwen2_5_vl")
    hf.apply(model, "circle")
    seen = []
    parts(model).layers[0].self_attn.register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append(kwargs["position_embeddings"]), with_kwargs=True)
    inputs = request(("image",))
    forward_logits(model, inputs)
    p, _ = circlerope.get_rope_index(inputs["input_ids"], inputs["image_grid_thw"], scheme="circle",
                                     vision=circlerope.VisionConfig.from_hf_config(model.config),
                                     compat=hf.installed_compat())
    assert (p != p.round()).any()  # really fractional
    assert_layer_receives(seen[0], model, p)


# ------------------------------------------------------------------ generate ---

def _prompt(batch):
    if batch == 1:
        return request(("image",), seed=7)
    return padded_batch("left")


def greedy(model, inputs, steps):
    """Greedy generate() with a cache: (sequences, logits of each step), on the CPU."""
    with torch.no_grad():
        out = model.generate(**on_device(inputs), max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                             suppress_tokens=SPECIAL,
                             output_logits=True, return_dict_in_generate=True)
    return out.sequences.cpu(), [logits.cpu() for logits in out.logits]


def assert_decode_step(model, cached, full, token, step):
    """A cached generate() step against a full recompute of the same prefix (the generated one).
    float32: logits within ATOL, and the recompute picks the generated token. bfloat16: logits
    within the bfloat16 bound (assert_near), and a different pick by the recompute only at a
    near-tie: its logit of the generated token within twice that bound of its best (which the
    bound implies when generate() picked the best cached logit; the check says so directly).
    The recompute runs on the generated prefix, so every step is compared, after such a tie
    too."""
    assert_near(cached, full, ATOL, msg=f"step {step}")
    if DTYPE == torch.float32:
        assert torch.equal(full.index_fill(-1, torch.tensor(SPECIAL), float("-inf")).argmax(-1), token), step
        return
    eos = model.generation_config.eos_token_id  # kept out by min_new_tokens
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    allowed = full.float().index_fill(-1, torch.tensor(SPECIAL + eos), float("-inf"))
    gap = allowed.max(-1).values - allowed.gather(-1, token[:, None])[:, 0]
    bound = BF16_ULPS * UNIT[DTYPE] * full.float().abs().max().item()
    assert (gap <= 2 * bound).all(), f"step {step}: the recompute prefers another token by {gap.tolist()} > 2 * {bound}"


@pytest.mark.parametrize("model_type", ["qwen2_5_vl"] + (["qwen3_vl"] if HAS_QWEN3 else []))
@pytest.mark.parametrize("geometry", ["mrope", "circle", "vanilla", "alternate"])
@pytest.mark.parametrize("batch", [1, 2])
def test_cached_generate_equals_a_full_recompute_at_every_step(geometry, batch, model_type):
    model = make_model(model_type)
    hf.apply(model, **({"age": geometry} if geometry == "alternate" else {"scheme": geometry}))
    assert_cached_generate_equals_a_full_recompute(model, batch)


def assert_cached_generate_equals_a_full_recompute(model, batch, inputs=None):
    """Greedy generate() of 5 tokens with a cache from `inputs` (default _prompt(batch)), each step
    against a full recompute of its prefix (assert_decode_step)."""
    inputs = _prompt(batch) if inputs is None else inputs
    steps = 5
    sequences, logits = greedy(model, inputs, steps)
    prompt_len = inputs["input_ids"].size(1)
    assert sequences.size(1) == prompt_len + steps
    for step in range(steps):
        full = dict(inputs, input_ids=sequences[:, :prompt_len + step])
        if "attention_mask" in inputs:
            full["attention_mask"] = torch.cat([inputs["attention_mask"],
                                                torch.ones(batch, step, dtype=torch.int64)], 1)
        assert_decode_step(model, logits[step], forward_logits(model, full)[:, -1], sequences[:, prompt_len + step],
                           step)


@pytest.mark.parametrize("geometry", ["mrope", "circle", "alternate"])
@pytest.mark.parametrize("batch", [1, 2])
def test_static_cache_generate_equals_the_dynamic_cache(geometry, batch):
    """generate(cache_implementation="static") (transformers' compiled decoding uses it): the
    forward receives its masks built (a dict) and a cache of fixed size; the same tokens and
    logits as the dynamic cache's generate()."""
    model = make_model("qwen2_5_vl")
    inputs = _prompt(batch)
    try:
        with torch.no_grad():
            model.generate(**on_device(hf_kwargs(model, inputs)), max_new_tokens=1, do_sample=False,
                           cache_implementation="static")
    except ValueError as e:
        if "static" not in str(e):
            raise
        pytest.skip(f"transformers {transformers.__version__} refuses a static cache for the model itself: {e}")
    hf.apply(model, **({"age": geometry} if geometry == "alternate" else {"scheme": geometry}))
    dynamic = greedy(model, inputs, 4)
    with torch.no_grad():
        out = model.generate(**on_device(inputs), max_new_tokens=4, min_new_tokens=4, do_sample=False,
                             suppress_tokens=SPECIAL, output_logits=True, return_dict_in_generate=True,
                             cache_implementation="static")
    if DTYPE == torch.float32:
        assert torch.equal(out.sequences.cpu(), dynamic[0])
    for step, (got, want) in enumerate(zip(out.logits, dynamic[1])):
        assert_near(got.cpu(), want, ATOL, msg=f"step {step}")


def test_official_decode_gives_every_layer_circle_positions_after_the_prompt():
    model = make_model("qwen2_5_vl")
    inputs = request(("image",), seed=7)
    results = {}
    for official in (False, True):
        hf.apply(model, age="alternate", official_decode=official)
        results[official] = greedy(model, inputs, 3)[1]
        hf.restore(model)
    # The prompt's logits are the same; after it the reference puts the M-RoPE layers on
    # Circle-RoPE's positions, which a full recompute does not. In bfloat16 the difference
    # must also exceed the rounding bound of assert_near, which it measures against.
    torch.testing.assert_close(results[True][0], results[False][0], rtol=0, atol=0)
    moved = (results[True][1].float() - results[False][1].float()).abs().max().item()
    floor = 1e-4 if DTYPE == torch.float32 else BF16_ULPS * UNIT[DTYPE] * results[False][1].float().abs().max().item()
    assert moved > floor, (moved, floor)


# ------------------------------------------------------- the fused rotation ---

def switch_kwargs(geometry):
    return {"age": geometry} if geometry == "alternate" else {"scheme": geometry}


def train_step(model, inputs):
    """Logits (on the CPU) and every parameter's gradient of one forward and backward."""
    model.zero_grad(set_to_none=True)
    logits = model(**inputs).logits
    lm_loss(logits.float(), inputs["input_ids"]).backward()
    return logits.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("geometry", ["mrope", "circle", "alternate"])
def test_the_fused_rotation_inside_a_model_equals_transformers_formula(model_type, geometry, deterministic,
                                                                       fused_spy):
    """apply(rotation="fused") against apply(rotation="transformers") on the same model, forward
    and backward; with AGE ("alternate") two geometries, so two tables. The fused side builds
    one table per geometry and makes one fused call per layer; the other none.

    float32: the table's angles are rounded once from double, transformers' are float32 products
    (the positions here, below 60, put them within 60 * 2^-23 rad of each other), and the
    rotations are float32 math, so logits and gradients (of magnitude about 1) agree within
    float32 rounding: 1e-5 (measured: 2.1e-7 and 4.8e-7 at most over the three models, three
    geometries and the seven releases of CI's matrix). bfloat16: the operator rounds q and k
    once, the formula three times (two products and their sum), so q and k differ by about u,
    which the logits carry like the rounding differences of assert_near (measured on the CPU:
    3.2 u). A parameter's gradient has the backward's roundings too and sums its tokens'
    contributions of either sign, so its error is larger against its own largest entry:
    BF16_GRAD_ULPS (measured on the CPU: 17 u, Qwen2.5-VL under M-RoPE). A wrong rotation
    moves logits and q/k gradients by their whole scale, and a wrong frequency layout by 1e-3
    or more (test_the_fused_tolerance_sees_a_wrong_layout)."""
    model = make_model(model_type)
    inputs = on_device(request(("image",)))
    results = {}
    for rotation in ("transformers", "fused"):
        hf.apply(model, rotation=rotation, **switch_kwargs(geometry))
        fused_spy.clear()
        results[rotation] = train_step(model, inputs)
        calls = (fused_spy.tables, fused_spy.rotations)
        tables = len(hf.geometry(model)["schemes"])
        hf.restore(model)
        assert calls == ((0, []) if rotation == "transformers" else (tables, [DEVICE.type] * LAYERS)), calls
    assert_near(results["fused"][0], results["transformers"][0], 1e-5)
    assert results["fused"][1].keys() == results["transformers"][1].keys()
    for name, grad in results["transformers"][1].items():
        assert_near(results["fused"][1][name], grad, 1e-5, msg=name, ulps=BF16_GRAD_ULPS)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_the_fused_tolerance_sees_a_wrong_layout(model_type, monkeypatch):
    """The bound of the test above can see a table with the other frequency layout (chunked for
    Qwen3-VL's interleaved, and the reverse): it moves the logits of these tiny models by 1e-3
    or more (measured in float32: 3.1e-3 to 0.13), 100 times the float32 bound; the check asks
    for 1e-4 (bfloat16: more than its bound of the logits)."""
    model = make_model(model_type)
    inputs = request(("image",))
    hf.apply(model, "circle", rotation="transformers")
    want = forward_logits(model, inputs)
    hf.restore(model)
    table = circlerope.rotary.rotary_table

    def other_layout(positions, config):
        return table(positions, dataclasses.replace(
            config, frequency_layout="chunked" if config.frequency_layout == "interleaved" else "interleaved"))

    monkeypatch.setattr(circlerope.rotary, "rotary_table", other_layout)
    hf.apply(model, "circle", rotation="fused")
    moved = (forward_logits(model, inputs) - want).abs().max().item()
    floor = 1e-4 if DTYPE == torch.float32 else BF16_ULPS * UNIT[DTYPE] * want.abs().max().item()
    assert moved > floor, (moved, floor)


def sized_rotary(model, head_dim, sections, theta):
    """The release's own text rotary embedding of `model`'s type, built for another head
    dimension, mrope_section and rope_theta (a checkpoint's: Qwen2.5-VL 3B's 128, [16, 24, 24],
    1e6; Qwen3-VL's 128, [24, 20, 20], 5e6), and its config."""
    config = _config(model.config.model_type, "eager")
    text = getattr(config, "text_config", None) or config
    text.hidden_size, text.num_attention_heads = head_dim * 4, 4
    if getattr(text, "head_dim", None) is not None:
        text.head_dim = head_dim
    params = getattr(text, "rope_parameters", None) or text.rope_scaling
    params["mrope_section"] = list(sections)
    if VERSION >= (5, 0):
        params["rope_theta"] = theta
    else:
        text.rope_theta = theta
    return type(parts(model).rotary_emb)(config=text), text


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("size", ["tiny", "checkpoint"])
def test_the_fused_table_holds_the_releases_own_angles(model_type, size):
    """The table apply(rotation="fused") builds (the settings it reads from the model) against
    the release's rotary embedding: the same frequency on the same axis everywhere (Qwen3-VL:
    apply_interleaved_mrope's layout), so they differ only by the rounding of transformers'
    float32 angles (|angle| * 2^-22 bounds it: two float32 roundings, of inv_freq and of the
    product, and cos/sin's own), while the other layout differs by about 1."""
    from circlerope.hf.model import _fused_rotary

    model = make_model(model_type, dtype=torch.float32)
    qwen3 = model_type == "qwen3_vl"
    if size == "tiny":
        rotary, config = parts(model).rotary_emb, model.config
    else:
        rotary, config = sized_rotary(model, 128, [24, 20, 20] if qwen3 else [16, 24, 24], 5e6 if qwen3 else 1e6)
    cfg = _fused_rotary(config, rotary, qwen3)
    assert cfg.frequency_layout == ("interleaved" if qwen3 else "chunked") and cfg.dim == 2 * rotary.inv_freq.numel()
    g = torch.Generator().manual_seed(0)
    positions = torch.randint(0, 4000, (3, 2, 64), generator=g).float() + torch.rand(3, 2, 64, generator=g)
    positions = positions.to(rotary.inv_freq.device)  # the models' device: the table is built there
    cos, sin = (t.cpu() for t in rotary(torch.zeros(1, device=positions.device), positions))
    if cos.dim() == 4:  # 4.x and early 5.x: every axis holds every frequency, the attention picks
        cos, sin = reference.select_sections(cos, cfg.sections), reference.select_sections(sin, cfg.sections)
    table = circlerope.rotary_table(positions, cfg).cpu()
    positions = positions.cpu()
    bound = positions.max().item() * 2.0 ** -22 + 2.0 ** -23
    for got, want in zip(table.chunk(2, -1), (cos, sin)):
        torch.testing.assert_close(torch.cat((got, got), -1), want, rtol=0, atol=bound)
    other = circlerope.rotary_table(positions, dataclasses.replace(
        cfg, frequency_layout="chunked" if qwen3 else "interleaved"))
    assert (torch.cat([other.chunk(2, -1)[0]] * 2, -1) - cos).abs().max() > 0.5


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("geometry", ["circle", "alternate"])
def test_the_fused_rotation_builds_one_table_per_forward_and_geometry(model_type, geometry, fused_spy):
    """One rotary_table per geometry and forward, one fused rotation per layer and forward: a
    prompt, each step of a cached generate(), a packed row."""
    model = make_model(model_type)
    hf.apply(model, rotation="fused", **switch_kwargs(geometry))
    tables = len(hf.geometry(model)["schemes"])
    forwards = []
    parts(model).register_forward_hook(lambda *args: forwards.append(1))
    forward_logits(model, request(("image",)))
    assert (len(forwards), fused_spy.tables, fused_spy.rotations) == (1, tables, [DEVICE.type] * LAYERS)
    forwards.clear()
    fused_spy.clear()
    greedy(model, _prompt(2), 3)
    assert len(forwards) == 3 and fused_spy.tables == 3 * tables and len(fused_spy.rotations) == 3 * LAYERS
    if model_type == "qwen2_5_vl":
        forwards.clear()
        fused_spy.clear()
        forward_logits(model, hf.pack(model, pack_samples()))
        assert (len(forwards), fused_spy.tables, len(fused_spy.rotations)) == (1, tables, LAYERS)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("batch", [1, 2])
def test_cached_generate_under_age_with_fused_tables_equals_a_full_recompute(model_type, batch):
    """AGE ("alternate": two geometries, two tables a forward) with the fused rotation: each
    step of a cached generate() against a full recompute (the decode positions reach the
    tables), as test_cached_generate_equals_a_full_recompute_at_every_step checks the formula."""
    model = make_model(model_type)
    hf.apply(model, age="alternate", rotation="fused")
    assert_cached_generate_equals_a_full_recompute(model, batch)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("reentrant", [False, True])
def test_fused_tables_give_the_same_gradients_with_gradient_checkpointing(model_type, reentrant,
                                                                                  deterministic, fused_spy):
    """AGE with the fused rotation, with and without gradient checkpointing (as
    test_gradients_are_the_same_with_gradient_checkpointing: 1e-6). The recomputed layers find
    their tables again in their arguments: the fused call count doubles, one per layer in the
    forward and one in its recompute. On an image request; where the release's own unswitched
    model gives other gradients under checkpointing there (5.2.0's Qwen3-VL: its vision tower),
    on a text request instead, which runs no vision tower (both geometries then place its tokens
    alike, but the two tables and the recompute are checked the same way)."""
    for kinds in (("image",), ()):
        plain = [_gradients(False, c, model_type=model_type, kinds=kinds) for c in (False, True)]
        theirs = [n for n in plain[0] if not torch.allclose(plain[0][n], plain[1][n], rtol=0, atol=1e-6)]
        if not theirs:
            break
    else:
        pytest.skip(f"transformers {transformers.__version__}'s own (unswitched) {model_type} gives other gradients "
                    f"under checkpointing: {len(theirs)} parameters, {theirs[0]} first")
    grads = []
    for checkpointing in (False, True):
        fused_spy.clear()
        grads.append(_gradients(True, checkpointing, reentrant, model_type=model_type, kinds=kinds,
                                rotation="fused"))
        assert len(fused_spy.rotations) == LAYERS * (2 if checkpointing else 1), fused_spy.rotations
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=0, atol=1e-6, msg=name)


def test_a_bad_rotation_is_a_value_or_type_error_naming_it(tmp_path):
    model = make_model("qwen2_5_vl")
    for bad in ("Fused", "", "formula", None, 1, True, ["fused"]):
        error = ValueError if isinstance(bad, str) else TypeError  # no name at all
        with pytest.raises(error, match=re.escape(f"rotation {shown(bad)} (expected one of transformers, fused)")):
            hf.apply(model, "circle", rotation=bad)
        assert hf.geometry(model) is None
    with pytest.raises(ValueError, match="rotation 'x'"):
        hf.from_pretrained(transformers.Qwen2_5_VLForConditionalGeneration, tmp_path, rotation="x")
    model.save_pretrained(tmp_path)  # unswitched: no geometry to switch to
    with pytest.raises(ValueError, match="names no circlerope geometry"):
        hf.from_pretrained(transformers.Qwen2_5_VLForConditionalGeneration, tmp_path, rotation="fused")
    assert hf.geometry(hf.from_pretrained(transformers.Qwen2_5_VLForConditionalGeneration, tmp_path)) is None


@pytest.mark.parametrize("change", ["attention_scaling", "rope_type", "inv_freq"])
def test_fused_tables_refuse_a_rotary_they_cannot_reproduce(change):
    """A rope type other than the default scales cos and sin (attention_scaling) or changes the
    frequencies, which a table of theta^(-2i/D) does not hold: refused, the model untouched."""
    model = make_model("qwen2_5_vl")
    rotary = parts(model).rotary_emb
    if change == "attention_scaling":
        rotary.attention_scaling = 0.5
    elif change == "rope_type":
        rotary.rope_type = "dynamic"
    else:
        rotary.inv_freq = rotary.inv_freq / 4  # a linear scaling by 4
    module, fn, original = RELEASE_ROTATIONS["qwen2_5_vl"]
    with pytest.raises(ValueError, match=change):
        hf.apply(model, "circle", rotation="fused")
    assert hf.geometry(model) is None and getattr(module, fn) is original
    hf.apply(model, "circle", rotation="transformers")  # transformers' rotation takes them
    hf.restore(model)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_restore_after_fused_tables_puts_the_release_function_back(model_type, fused_spy):
    """The release's rotation function is replaced while a model switched with rotation="fused"
    exists, and is itself again (`is`) after the last such model is restored or freed; an
    unswitched model and one switched with transformers' rotation, side by side, run the formula
    (bit for bit as without the dispatcher, no fused call)."""
    module, fn, original = RELEASE_ROTATIONS[model_type]
    inputs = request(("image",))
    plain, formula, fused, other = (make_model(model_type) for _ in range(4))  # one seed: the same weights
    want_plain = forward_logits(plain, hf_kwargs(plain, inputs))
    hf.apply(formula, "circle", rotation="transformers")
    want_formula = forward_logits(formula, inputs)

    hf.apply(fused, "circle", rotation="fused")
    assert getattr(module, fn) is not original
    fused_spy.clear()
    assert torch.equal(forward_logits(plain, hf_kwargs(plain, inputs)), want_plain)
    assert torch.equal(forward_logits(formula, inputs), want_formula)
    assert (fused_spy.tables, fused_spy.rotations) == (0, [])
    assert_near(forward_logits(fused, inputs), want_formula, 1e-5)
    assert (fused_spy.tables, len(fused_spy.rotations)) == (1, LAYERS)

    hf.apply(other, age="alternate", rotation="fused")  # a second user of the same function
    hf.restore(fused)
    assert getattr(module, fn) is not original
    fused_spy.clear()
    forward_logits(other, inputs)
    assert (fused_spy.tables, len(fused_spy.rotations)) == (2, LAYERS)
    hf.restore(other)
    assert getattr(module, fn) is original
    fused_spy.clear()
    assert torch.equal(forward_logits(formula, inputs), want_formula)
    assert torch.equal(forward_logits(fused, hf_kwargs(fused, inputs)), want_plain)  # restored: unswitched again
    assert (fused_spy.tables, fused_spy.rotations) == (0, [])

    hf.apply(other, "circle", rotation="fused")  # freed without restore(): the function comes back too
    del other
    gc.collect()
    assert getattr(module, fn) is original

    # A function someone else put there first is wrapped, and is what restore() puts back.
    calls = []

    def theirs(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    setattr(module, fn, theirs)
    try:
        hf.apply(fused, "circle", rotation="fused")
        assert torch.equal(forward_logits(plain, hf_kwargs(plain, inputs)), want_plain) and len(calls) == LAYERS
        hf.restore(fused)
        assert getattr(module, fn) is theirs
    finally:
        setattr(module, fn, original)
    hf.restore(formula)


# ------------------------------------------------------------------- packing ---

@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("geometry", ["circle", "alternate"])
def test_packed_samples_give_each_samples_own_logits(attn, geometry):
    model = make_model("qwen2_5_vl", attn)
    hf.apply(model, **({"age": geometry} if geometry == "alternate" else {"scheme": geometry}))
    samples = pack_samples()
    assert_each_sample_alone(model, samples, forward_logits(model, hf.pack(model, samples)))


def pack_samples():
    return [request(("image",), seed=11), request(("image", "image"), seed=12), request((), seed=13)]


def assert_each_sample_alone(model, samples, got, dtype=DTYPE):
    """The logits of a packed row equal each sample's forward alone (different matmul shapes:
    float32 within 1e-5, bfloat16 as assert_near says)."""
    start = 0
    for sample in samples:
        n = sample["input_ids"].size(1)
        alone = forward_logits(model, sample)
        assert_near(got[:, start:start + n], alone, 1e-5, dtype=dtype)
        start += n


def test_flash_attention_2_keeps_packed_samples_apart_with_the_varlen_kwargs_of_pack():
    """pack(flash_attention_kwargs=True) through transformers' flash_attention_2 (the varlen
    kernels), in bfloat16 on CUDA: each sample's logits as its forward alone."""
    if DEVICE.type != "cuda":
        pytest.skip("flash_attention_2 runs on CUDA only (CIRCLEROPE_HF_TEST_DEVICE=cuda)")
    try:
        import flash_attn
    except ImportError as e:
        pytest.skip(f"flash_attn is not importable ({e}): transformers' flash_attention_2 needs it")
    from transformers.utils import is_flash_attn_2_available
    if not is_flash_attn_2_available():
        pytest.skip(f"transformers {transformers.__version__} cannot use flash_attn "
                    f"{getattr(flash_attn, '__version__', '?')} here (is_flash_attn_2_available() is False)")
    dtype = torch.bfloat16  # flash-attention takes 16-bit q, k, v only
    model = make_model("qwen2_5_vl", "flash_attention_2", dtype=dtype)
    hf.apply(model, age="alternate")
    samples = pack_samples()
    packed = hf.pack(model, samples, flash_attention_kwargs=True)
    if VERSION < (5, 0):
        # Before 5.0 pack also makes a 4-D block-diagonal mask for eager and sdpa, which
        # flash-attention does not take: the varlen kwargs say the same.
        packed.pop("attention_mask")
    assert_each_sample_alone(model, samples, forward_logits(model, packed), dtype=dtype)


def test_packed_positions_survive_a_floating_point_cast():
    """Trainer (under DeepSpeed) casts floating inputs to bf16; circlerope_positions is int64."""
    model = make_model("qwen2_5_vl")
    hf.apply(model, "circle")
    packed = hf.pack(model, [request(("image",), seed=11), request(("image",), seed=12)])
    cast = {k: v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point()
            and k not in ("pixel_values", "attention_mask") else v for k, v in packed.items()}
    assert cast["circlerope_positions"].dtype == torch.int64 and cast["position_ids"].dtype == torch.int64
    torch.testing.assert_close(forward_logits(model, cast), forward_logits(model, packed), rtol=0, atol=0)


def test_flash_attention_kwargs_of_a_pack():
    model = make_model("qwen2_5_vl")
    hf.apply(model, "circle")
    samples = [request((), seed=1), request(("image",), seed=2)]
    packed = hf.pack(model, samples, flash_attention_kwargs=True)
    lengths = [s["input_ids"].size(1) for s in samples]
    assert packed["cu_seq_lens_q"].tolist() == [0, lengths[0], sum(lengths)]
    assert packed["max_length_k"] == max(lengths)


# ------------------------------------------------------------------ training ---

def _gradients(switch, checkpointing, reentrant=False, model_type="qwen2_5_vl", kinds=("image",), **apply_kwargs):
    model = make_model(model_type)
    if switch:
        hf.apply(model, age="alternate", **apply_kwargs)
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    inputs = request(kinds, seed=5)
    inputs = on_device(inputs if switch else hf_kwargs(model, inputs))
    lm_loss(model(**inputs).logits, inputs["input_ids"]).backward()
    return {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("reentrant", [False, True])
def test_gradients_are_the_same_with_gradient_checkpointing(reentrant, deterministic):
    # Checkpointing recomputes the same operations on the same shapes: the gradients agree to
    # 1e-6 in float32, and bit for bit in bfloat16 (measured on the CPU); on CUDA with the
    # deterministic fixture's algorithms.
    plain = [_gradients(False, c) for c in (False, True)]
    theirs = [n for n in plain[0] if not torch.allclose(plain[0][n], plain[1][n], rtol=0, atol=1e-6)]
    if theirs:  # 4.56.2: its vision tower changes under checkpointing, and so does everything after it
        pytest.skip(f"transformers {transformers.__version__}'s own (unswitched) model gives other gradients "
                    f"under checkpointing: {len(theirs)} parameters, {theirs[0]} first")
    grads = [_gradients(True, c, reentrant) for c in (False, True)]
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=0, atol=1e-6, msg=name)


def test_a_forward_without_mm_token_type_ids_still_uses_the_geometry():
    model = make_model("qwen2_5_vl")
    inputs = request(("image",))
    hf.apply(model, "circle")
    without = forward_logits(model, inputs)
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:  # 5.3 on
        with_types = forward_logits(model, dict(inputs, mm_token_type_ids=token_types(inputs["input_ids"])))
        assert torch.equal(without, with_types)
    hf.restore(model)
    assert not torch.equal(forward_logits(model, hf_kwargs(model, inputs)), without)


# ----------------------------------------------------- config, restore, save ---

def test_restore_undoes_everything():
    model = make_model("qwen2_5_vl")
    inputs = request(("image",))
    want = forward_logits(model, hf_kwargs(model, inputs))
    hf.apply(model, age="alternate")
    assert model.config.circlerope["age"] == "CMCM"
    hf.restore(model)
    assert "forward" not in vars(model) and "generate" not in vars(model)
    assert all("forward" not in vars(layer) for layer in parts(model).layers)
    assert "forward" not in vars(parts(model).rotary_emb)
    assert getattr(model.config, "circlerope", None) is None
    assert torch.equal(forward_logits(model, hf_kwargs(model, inputs)), want)
    with pytest.raises(ValueError, match="not switched"):
        hf.restore(model)


def reopen(path):
    """hf.from_pretrained of a saved tiny Qwen2.5-VL, in the models' dtype and on their device,
    switched with the setting's rotation."""
    kwargs = {} if DTYPE == torch.float32 else dtype_kwargs(DTYPE)
    model = hf.from_pretrained(transformers.Qwen2_5_VLForConditionalGeneration, path, attn_implementation="eager",
                               rotation=ROTATION, **kwargs)
    return model.to(DEVICE).eval()


def test_save_pretrained_and_from_pretrained_keep_the_geometry(tmp_path):
    model = make_model("qwen2_5_vl")
    circle = circlerope.CircleConfig(radius="auto", alpha=0.25)
    hf.apply(model, age="lower", circle=circle)
    inputs = request(("image",))
    want = forward_logits(model, inputs)
    model.save_pretrained(tmp_path)
    again = reopen(tmp_path)
    assert hf.geometry(again)["age"] == "CCMM"
    assert hf.geometry(again)["circle"]["alpha"] == 0.25 and hf.geometry(again)["circle"]["radius"] == "auto"
    torch.testing.assert_close(forward_logits(again, inputs), want, rtol=0, atol=0)


def test_errors_name_the_problem():
    model = make_model("qwen2_5_vl")
    with pytest.raises(ValueError, match="scheme 'ring'"):
        hf.apply(model, "ring")
    with pytest.raises(ValueError, match="config.circlerope"):
        hf.apply(model)
    with pytest.raises(ValueError, match="layer count|layers"):
        hf.apply(model, age=circlerope.AgePlan("alternate", 6))
    with pytest.raises(ValueError, match="official_decode"):
        hf.apply(model, "mrope", official_decode=True)
    with pytest.raises(ValueError, match="AGE plan names"):
        hf.apply(model, "mrope", age="alternate")
    hf.apply(model, "circle")
    with pytest.raises(ValueError, match="already switched"):
        hf.apply(model, "circle")
    inputs = on_device(request(("image",)))
    embeds = torch.zeros(1, 4, 64, dtype=DTYPE, device=DEVICE)
    with pytest.raises(ValueError, match="2-D"):
        model(**dict(inputs, attention_mask=torch.ones(1, 1, 5, 5)))
    with pytest.raises(ValueError, match="input_ids"):
        model(inputs_embeds=embeds)
    with pytest.raises(ValueError, match="position_ids"):
        model(**dict(inputs, position_ids=torch.arange(inputs["input_ids"].size(1)).view(1, -1)))
    with pytest.raises(RuntimeError, match="outside the model"):
        parts(model)(inputs_embeds=embeds)
    with pytest.raises(ValueError, match="circlerope_positions"):
        model(**inputs, circlerope_positions=torch.zeros(3, 3, 1, 2, dtype=torch.int64))
    cfg = transformers.PretrainedConfig()
    cfg.model_type = "glm_image"

    class Fake(torch.nn.Module):
        config = cfg
    with pytest.raises(ValueError, match="'glm_image'.*generates.*it switches qwen2_vl, qwen2_5_vl"):
        hf.apply(Fake(), "circle")


def test_every_bad_argument_of_apply_restore_pack_and_from_pretrained_raises_a_clean_value_or_type_error():
    # A tensor as official_decode or flash_attention_kwargs raised RuntimeError ("Boolean value
    # of Tensor ... is ambiguous"), compat=[] TypeError ("unhashable type"), samples=3.5 TypeError
    # ("not iterable"), a class without from_pretrained AttributeError, a sample's labels or
    # pixel_values of a str TypeError, of a float RuntimeError ("zero-dimensional tensor").
    from conftest import attack
    from test_hf import HF_GARBAGE

    model = make_model("qwen2_5_vl")

    def restored(function):
        def call(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            finally:
                if hf.geometry(model) is not None:
                    hf.restore(model)
        return call

    def pack(m, samples, **kwargs):
        return hf.pack(hf.apply(m, "circle") if hf.geometry(m) is None else m, samples, **kwargs)

    sample = {"input_ids": torch.tensor(block("image", 1, 4, 4)), "image_grid_thw": torch.tensor([[1, 4, 4]])}
    calls = [
        ("apply", restored(hf.apply), [model, "circle"],
         {"circle": None, "age": None, "compat": None, "official_decode": False, "rotation": "transformers"}),
        ("apply fused", restored(hf.apply), [model, "circle"], {"rotation": "fused"}),
        ("apply age", restored(hf.apply), [model], {"age": "alternate", "compat": hf.installed_compat()}),
        ("pack", restored(pack), [model, [sample]], {"flash_attention_kwargs": False}),
        ("pack samples", restored(pack), [model, [sample, sample]], {}),
    ]
    wrong = attack(calls, HF_GARBAGE)
    for value in HF_GARBAGE:
        keys = ("input_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts", "labels", "pixel_values",
                "pixel_values_videos")
        for call in [lambda v: hf.restore(v), lambda v: hf.from_pretrained(v, "nowhere")] + [
                lambda v, key=key: pack(model, [dict(sample, **{key: v})]) for key in keys]:
            try:
                restored(call)(value)
            except (ValueError, TypeError) as e:
                if len(str(e)) > 500 or not all(32 <= ord(c) < 127 for c in str(e)):
                    wrong.append(f"{repr(value)[:30]}: an unclean message")
            except Exception as e:  # noqa: BLE001 - the point of the test
                wrong.append(f"{type(value).__name__}: {type(e).__name__}: {str(e)[:100]}")
    assert not wrong, "\n".join(wrong[:60]) + f"\n({len(wrong)} in all)"


def test_new_images_after_a_cached_prompt_are_refused():
    model = make_model("qwen2_5_vl")
    hf.apply(model, "circle")
    inputs = on_device(request(("image",)))
    with torch.no_grad():
        out = model(**inputs, use_cache=True)
        cache = out.past_key_values if hasattr(out, "past_key_values") else out.cache
        key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        with pytest.raises(NotImplementedError, match="after the prompt"):
            model(input_ids=torch.tensor([[START, IMAGE]], device=DEVICE), **{key: cache})
        if VERSION >= (5, 0):  # 4.54's own decode path without cache_position adds in place to an expanded view
            model(input_ids=torch.tensor([[IMAGE]], device=DEVICE), **{key: cache})  # a lone image token is text


def test_a_checkpoint_of_the_official_code_opens_on_its_geometry(tmp_path):
    """config.json of the authors' code carries a circle_rope dict (their shipped example's
    values, github.com/lose4578/CircleRoPE code/config.json; AGE_mode needs 36 layers there, so
    this 4-layer model takes no AGE_mode)."""
    model = make_model("qwen2_5_vl")
    model.config.circle_rope = {"alpha": 0.5, "radius": 10, "method": "circle", "move_to_origin": True}
    model.save_pretrained(tmp_path)
    again = reopen(tmp_path)
    assert hf.geometry(again)["schemes"] == ["circle"]
    assert hf.geometry(again)["circle"] == dict(radius=10.0, alpha=0.5, move_to_origin=True, dff_rate=0.0,
                                                move_to_positive=None)
    inputs = request(("image",))
    want = reference_logits(again, inputs, ["circle"] * LAYERS, circlerope.CircleConfig())
    assert_near(forward_logits(again, inputs), want, 1e-5)
    hf.restore(again)
    again.config.circle_rope = {"alpha": 0.5, "radius": 10, "AGE_mode": "strategy_4"}
    with pytest.raises(ValueError, match="36"):
        hf.apply(again)


@pytest.mark.skipif(os.environ.get("CIRCLEROPE_SANITIZED") == "1" or bool(os.environ.get("HF_MATRIX_EXPECT_VERSION")),
                    reason="two torchrun launches (about a minute): run by the Release tree's python_hf_ddp test")
@pytest.mark.skipif(not DEFAULT_SETTING, reason="hf_ddp_finetune.py trains on the CPU in float32 (gloo), whatever "
                    "CIRCLEROPE_HF_TEST_DEVICE / _DTYPE / _ROTATION say: run in the default setting")
def test_two_process_ddp_fine_tune_gives_the_weights_of_one_process(tmp_path):
    """torchrun (gloo) with 2 processes against 1, same global batch of 4 (hf_ddp_finetune.py)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_ddp_finetune.py")
    weights = {}
    for world in (1, 2):
        out = tmp_path / f"w{world}.pt"
        env = dict(os.environ, OMP_NUM_THREADS="1")
        run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc_per_node={world}", script, str(out)],
                             env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
        weights[world] = torch.load(out)
    moved = 0
    start = make_model("qwen2_5_vl").state_dict()
    for name, value in weights[1].items():
        torch.testing.assert_close(weights[2][name], value, rtol=0, atol=1e-6, msg=name)
        moved += int(not torch.equal(value, start[name]))
    assert moved > 10  # the steps changed the weights


@pytest.mark.skipif(not HAS_QWEN3, reason="Qwen3-VL from transformers 4.57 on")
@pytest.mark.parametrize("geometry", ["circle", "alternate"])
def test_qwen3_vl_video_frames_each_take_a_ring_and_generate_continues_them(geometry):
    model = make_model("qwen3_vl")
    hf.apply(model, **({"age": geometry} if geometry == "alternate" else {"scheme": geometry}))
    inputs = qwen3_video(t=3)
    seen = []
    parts(model).layers[0].self_attn.register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append(kwargs["position_embeddings"]), with_kwargs=True)
    sequences, logits = greedy(model, inputs, 3)
    # The prompt's layer-0 positions: three frames of [1, 4, 4], each a Circle-RoPE block.
    frames = torch.tensor([[1, 4, 4]] * 3)
    p, _ = circlerope.get_rope_index(inputs["input_ids"], None, frames, scheme="circle",
                                     vision=circlerope.VisionConfig.from_hf_config(model.config),
                                     compat=hf.installed_compat())
    assert_layer_receives(seen[0], model, p)
    n = inputs["input_ids"].size(1)
    for step in range(3):
        full = dict(inputs, input_ids=sequences[:, :n + step])
        assert_near(logits[step], forward_logits(model, full)[:, -1], ATOL, msg=f"step {step}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_cos_sin_equals_the_releases_rotary_embedding_bit_for_bit(dtype):
    model = make_model("qwen2_5_vl")
    rotary = parts(model).rotary_emb
    pos, _ = circlerope.get_rope_index(torch.tensor([[5, START] + [IMAGE] * 16 + [6] * 3], device=DEVICE), [[1, 8, 8]],
                                       scheme="circle", vision=circlerope.VisionConfig.from_hf_config(model.config))
    want_cos, want_sin = rotary(torch.zeros(1, dtype=dtype, device=DEVICE), pos)
    cos, sin = hf.rotary_cos_sin(pos, model.config, dtype=dtype)
    if want_cos.dim() == 3:  # later releases: the module picks each frequency's axis itself
        sections = hf.rotary_config(model.config).sections
        cos, sin = reference.select_sections(cos, sections), reference.select_sections(sin, sections)
    assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)


# -------------------------------------------- copies, nesting, beams, odd inputs ---

def _holder(model):
    """The module holding the release's get_rope_index (the outer model before 4.52)."""
    return model.model if callable(getattr(model.model, "get_rope_index", None)) else model


@pytest.mark.parametrize("rotation", ["transformers", "fused"])
@pytest.mark.parametrize("geometry", ["circle", "alternate"])
def test_a_deep_copy_of_a_switched_model_is_switched_on_its_own(geometry, rotation):
    # copy.deepcopy (TRL's reference model, EMA) kept closures over the original's methods: the
    # copy's lm_head zeroed, it still returned the original's logits.
    model = make_model("qwen2_5_vl")
    hf.apply(model, rotation=rotation, **switch_kwargs(geometry))
    inputs = request(("image",), seed=7)
    want, (want_sequences, _) = forward_logits(model, inputs), greedy(model, inputs, 3)
    twin = copy.deepcopy(model)
    assert hf.geometry(twin) == hf.geometry(model)
    assert torch.equal(forward_logits(twin, inputs), want)
    assert torch.equal(greedy(twin, inputs, 3)[0], want_sequences)
    with torch.no_grad():
        twin.lm_head.weight.zero_()
    assert not forward_logits(twin, inputs).any()  # the copy's own lm_head
    assert torch.equal(forward_logits(model, inputs), want)  # the original's untouched
    assert torch.equal(greedy(model, inputs, 3)[0], want_sequences)
    module, function, original = RELEASE_ROTATIONS["qwen2_5_vl"]
    hf.restore(model)  # the copy keeps its switch (and, fused, the dispatcher)
    assert hf.geometry(model) is None and hf.geometry(twin) is not None
    assert not forward_logits(twin, inputs).any()
    assert (getattr(module, function) is original) == (rotation == "transformers")
    hf.restore(twin)
    assert getattr(module, function) is original
    assert hf.geometry(twin) is None and "forward" not in vars(twin)


@pytest.mark.skipif(VERSION < (4, 52), reason="before 4.52 the outer model holds get_rope_index: model.model alone "
                    "cannot be switched")
@pytest.mark.parametrize("first", ["part", "whole"])
def test_a_switch_inside_a_switch_is_refused_naming_it_and_restore_leaves_the_model_usable(first):
    # apply(m.model) then apply(m), or the other way round, was accepted: the forward equalled
    # neither geometry, and after both restores every forward raised "ran outside the model's
    # own forward".
    model = make_model("qwen2_5_vl")
    inputs = request(("image",))
    want = forward_logits(model, hf_kwargs(model, inputs))
    if first == "part":
        hf.apply(model.model, "circle")
        switched = forward_logits(model, inputs)
        with pytest.raises(ValueError, match=r"its part model\.model \(\w+\) is already switched by "
                                             r"circlerope\.hf\.apply: call circlerope\.hf\.restore\(model\.model\)"):
            hf.apply(model, "mrope")
        assert hf.geometry(model) is None and "forward" not in vars(model)
        assert torch.equal(forward_logits(model, inputs), switched)
        hf.restore(model.model)
    else:
        hf.apply(model, "circle")
        switched = forward_logits(model, inputs)
        with pytest.raises(ValueError, match=r"its get_rope_index is already switched by circlerope\.hf\.apply, as "
                                             r"part of a Qwen2_5_VLForConditionalGeneration: restore that model first"):
            hf.apply(model.model, "mrope")
        assert hf.geometry(model.model) is None
        assert torch.equal(forward_logits(model, inputs), switched)
        hf.restore(model)
    assert torch.equal(forward_logits(model, hf_kwargs(model, inputs)), want)
    hf.apply(model, "mrope")  # switchable again, as a whole
    if not FUSED:
        assert torch.equal(forward_logits(model, inputs), want)
    hf.restore(model)


def _generate(model, inputs, seed=0, **kwargs):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(**on_device(inputs), max_new_tokens=4, min_new_tokens=4, suppress_tokens=SPECIAL,
                              **kwargs).cpu()


def _repeated(inputs, k):
    """inputs with every row repeated k times in place, its grids and pixels with it."""
    out = dict(inputs, input_ids=inputs["input_ids"].repeat_interleave(k, 0))
    if "attention_mask" in inputs:
        out["attention_mask"] = inputs["attention_mask"].repeat_interleave(k, 0)
    rows = inputs["input_ids"].size(0)
    grids = inputs["image_grid_thw"].view(rows, -1, 3) if rows > 1 else inputs["image_grid_thw"][None]
    out["image_grid_thw"] = grids.repeat_interleave(k, 0).reshape(-1, 3)
    pixels = inputs["pixel_values"].view(rows, -1, inputs["pixel_values"].size(-1))
    out["pixel_values"] = pixels.repeat_interleave(k, 0).reshape(-1, pixels.size(-1))
    return out


@pytest.mark.parametrize("batch", [1, 2])
def test_beams_and_return_sequences_expand_the_switchs_rows(batch):
    # generate() expands input_ids after get_rope_index for num_beams or num_return_sequences:
    # the switched model failed ("image_grid_thw has only 0 entries"), even on M-RoPE.
    inputs = request(("image",), seed=7) if batch == 1 else padded_batch("left")
    if batch == 2:  # one image per row: the rows' grids and pixels split evenly
        inputs = dict(inputs, image_grid_thw=inputs["image_grid_thw"][[0, 2]],
                      pixel_values=torch.cat([inputs["pixel_values"][:16], inputs["pixel_values"][16 + 16:16 + 32]]))
        b = request(("image",), seed=2)
        inputs["input_ids"][1] = torch.cat([torch.full((inputs["input_ids"].size(1) - b["input_ids"].size(1),), PAD),
                                            b["input_ids"][0]])
        inputs["attention_mask"][1] = inputs["input_ids"][1] != PAD
        inputs["image_grid_thw"][1], inputs["pixel_values"][16:] = b["image_grid_thw"][0], b["pixel_values"]
    model = make_model("qwen2_5_vl")
    try:
        want_beams = _generate(model, hf_kwargs(model, inputs), num_beams=2, num_return_sequences=2, do_sample=False)
        want_samples = _generate(model, hf_kwargs(model, inputs), num_return_sequences=2, do_sample=True)
    except (ValueError, RuntimeError, IndexError) as e:
        pytest.skip(f"transformers {transformers.__version__}'s own model does not generate beams here: {e}"[:200])
    hf.apply(model, "mrope")  # bit for bit the unswitched model, beams and samples too
    if not FUSED:
        assert torch.equal(_generate(model, inputs, num_beams=2, num_return_sequences=2, do_sample=False), want_beams)
        assert torch.equal(_generate(model, inputs, num_return_sequences=2, do_sample=True), want_samples)
    hf.restore(model)
    for geometry in ("circle", "alternate"):
        hf.apply(model, **switch_kwargs(geometry))
        beams = _generate(model, inputs, num_beams=2, num_return_sequences=2, do_sample=False)
        assert beams.shape == (2 * batch, inputs["input_ids"].size(1) + 4)
        # each beam's first step reads the prompt's logits at the prompt's own positions
        with torch.no_grad():
            out = model.generate(**on_device(inputs), max_new_tokens=1, num_beams=2, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True)
        last = forward_logits(model, inputs)[:, -1]
        assert_near(out.logits[0].cpu(), last.repeat_interleave(2, 0), ATOL)
        # num_return_sequences=2 samples as the prompt repeated twice does, row for row
        assert torch.equal(_generate(model, inputs, num_return_sequences=2, do_sample=True),
                           _generate(model, _repeated(inputs, 2), do_sample=True)), geometry
        hf.restore(model)


# The compat modes by the get_rope_index signature of their releases (docs/guides/compat.md).
SIGNATURE_FAMILIES = [("hf-4.49", "hf-4.52"), ("hf-5.2",), ("hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6", "hf-5.18")]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_compat_mode_whose_signature_the_release_does_not_call_is_refused(model_type):
    # apply(compat="hf-4.49") under transformers 5.24 was accepted, and every forward then
    # raised a TypeError about mm_token_type_ids.
    model = make_model(model_type)
    inputs = inputs_for(model_type, "image")
    want = forward_logits(model, hf_kwargs(model, inputs))
    family = next(f for f in SIGNATURE_FAMILIES if hf.installed_compat() in f)
    for mode in hf.COMPAT_MODES:
        if mode in family:
            hf.apply(model, "mrope", compat=mode)  # the release calls it: every forward runs
            logits = forward_logits(model, inputs)
            if mode == hf.installed_compat() and not FUSED:
                assert torch.equal(logits, want)
            hf.restore(model)
            continue
        with pytest.raises(ValueError, match=rf"^compat '{mode}': its get_rope_index takes \(input_ids, .*\), but "
                                             rf"transformers {re.escape(transformers.__version__)} calls "
                                             r"get_rope_index\(input_ids, .*\), so every forward would fail: use "
                                             rf"compat=None \(the installed release's mode\) or one of "
                                             rf"{re.escape(', '.join(family))}$"):
            hf.apply(model, "circle", compat=mode)
        assert hf.geometry(model) is None and "forward" not in vars(model)
    assert torch.equal(forward_logits(model, hf_kwargs(model, inputs)), want)


def test_pack_takes_one_row_per_sample():
    # input_ids [2, 3] packed its second row as a continuation of the first.
    model = make_model("qwen2_5_vl")
    hf.apply(model, "circle")
    with pytest.raises(ValueError, match=r"sample 0 input_ids has shape \[2, 3\]: a sample is one row, \[S\] or \[1, "
                                         r"S\]"):
        hf.pack(model, [{"input_ids": torch.tensor([[5, 6, 7], [8, 9, 10]])}])
    with pytest.raises(ValueError, match=r"sample 1 input_ids has shape \[1, 1, 3\]"):
        hf.pack(model, [{"input_ids": torch.tensor([5, 6])}, {"input_ids": torch.tensor([[[5, 6, 7]]])}])
    flat = hf.pack(model, [{"input_ids": torch.tensor([5, 6, 7, 8, 9, 10])}])
    row = hf.pack(model, [{"input_ids": torch.tensor([[5, 6, 7, 8, 9, 10]])}])
    assert torch.equal(flat["circlerope_positions"], row["circlerope_positions"])
    with pytest.raises(ValueError, match=r"sample 0 labels has shape \[2, 3\]: one label per token, \[6\] or \[1, 6\]"):
        hf.pack(model, [{"input_ids": torch.tensor([5, 6, 7, 8, 9, 10]), "labels": torch.zeros(2, 3, dtype=torch.int64)}])
    # the packed row is one call: its tokens in all are refused past the limit, before positions
    limit = circlerope._checks.MAX_TOKENS
    with pytest.raises(ValueError, match=rf"samples 0..1 hold {limit + 1} tokens, more than {limit} in one packed row"):
        hf.pack(model, [{"input_ids": torch.tensor([5, 6, 7])},
                        {"input_ids": torch.full((1,), 5, dtype=torch.int64).expand(limit - 2)}])
    for labels in (torch.zeros(6, dtype=torch.int64), torch.zeros(1, 6, dtype=torch.int64)):
        assert hf.pack(model, [{"input_ids": torch.tensor([5, 6, 7, 8, 9, 10]), "labels": labels}])["labels"].shape == (
            1, 6)


def test_meta_and_sparse_tensors_to_a_switched_forward_are_value_errors_naming_them():
    # A meta or sparse circlerope_positions gave torch's NotImplementedError ("Cannot copy out
    # of meta tensor", "Cannot access storage of SparseTensorImpl").
    model = make_model("qwen2_5_vl")
    hf.apply(model, "circle")
    packed = on_device(hf.pack(model, [{"input_ids": torch.tensor([5, 6, 7])}]))
    ids = packed["input_ids"]
    kwargs = {k: v for k, v in packed.items() if k not in ("circlerope_positions", "input_ids")}
    with torch.no_grad():
        for odd, kind in ((lambda t: t.to("meta"), "meta tensor"), (lambda t: t.cpu().to_sparse(), "sparse_coo")):
            for name, call in [
                    ("circlerope_positions", lambda: model(input_ids=ids, circlerope_positions=odd(
                        packed["circlerope_positions"]), **kwargs)),
                    ("input_ids", lambda: model(input_ids=odd(ids))),
                    ("attention_mask", lambda: model(input_ids=ids, attention_mask=odd(torch.ones_like(ids)))),
                    ("position_ids", lambda: model(input_ids=ids, position_ids=odd(torch.arange(3)[None])))]:
                with pytest.raises(ValueError, match=rf"^{name} is a .*{kind}"):
                    call()


def test_a_saved_geometry_is_read_strictly_and_a_plan_without_circle_reopens(tmp_path):
    # "official_decode": "false" turned official decoding on; an AGE plan without Circle-RoPE
    # (saved with scheme "mrope") could not be reopened: "scheme='mrope' with age=...".
    model = make_model("qwen2_5_vl")
    inputs = request(("image",))
    for saved, match in (({"scheme": "circle", "official_decode": "false"}, r"\['official_decode'\]"),
                         ({"scheme": "circle", "circle": []}, r"\['circle'\] = \[\]"),
                         ({"scheme": "circle", "circel": {"radius": 3}}, r"\['circel'\]: not a key")):
        model.config.circlerope = saved
        with pytest.raises(ValueError, match=r"config\.circlerope" + match):
            hf.apply(model)
        assert hf.geometry(model) is None and "forward" not in vars(model)
    model.config.circlerope = None
    hf.apply(model, age="MV")
    assert model.config.circlerope["scheme"] == "mrope" and model.config.circlerope["age"] == "MVMV"
    want = forward_logits(model, inputs)
    model.save_pretrained(tmp_path)
    again = reopen(tmp_path)
    assert hf.geometry(again)["age"] == "MVMV" and hf.geometry(again)["schemes"] == ["mrope", "vanilla"]
    assert_near(forward_logits(again, inputs), want, 0, ulps=0)
