"""Every model family circlerope.hf switches (circlerope.hf.families), on tiny random models built
from that family's own config class (nothing downloaded), under the installed transformers:

- the M-RoPE positions of rope_index_fn and of a switched model's get_rope_index equal the
  family's own get_rope_index, values and dtypes, on random requests: text only, images, videos
  (each family's layout: one block, a block per timestamped frame, GLM's frames inside a video
  span), batches padded on the left and on the right;
- switched M-RoPE gives the unswitched model's logits bit for bit (the same operations on the
  same positions);
- Circle-RoPE and AGE run forward and backward, move the logits, and a cached generate() equals
  a full recompute at every step (test_hf_models' check);
- the families it refuses are refused by apply and rope_index_fn with the same one message,
  which names what is switched and why that family is not.

Families the installed release lacks are not collected; scripts/hf_matrix.sh runs this file
against each release. The three original families get the deeper checks of test_hf_models.py.
"""

import importlib.util
import inspect

import pytest
import torch

import circlerope
import circlerope.hf as hf
import tiny_qwen
from circlerope.hf import families

import test_hf_models as models  # skips this file where it skips (no transformers, sanitizers, < 4.49)

transformers = models.transformers
VERSION = models.VERSION

START, END, IMAGE, VIDEO = 290, 291, 292, 293  # test_hf_models' ids; GLM's image start / end
VIDEO_START, VIDEO_END = 294, 295              # GLM's video span
PAD = 0


def _has(model_type):
    try:
        return model_type in transformers.CONFIG_MAPPING
    except Exception:  # noqa: BLE001 (a release whose mapping cannot import the type has none)
        return False


# The covered families this release has, and those of them refused here (GLM before 5.3).
PRESENT = [t for t in families.FAMILIES if _has(t)]
COVERED = [t for t in PRESENT if t in families.supported()]
ORIGINAL = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
NEW = [t for t in COVERED if t not in ORIGINAL]


def config_of(model_type):
    if model_type in ORIGINAL:  # test_hf_models' builder knows every release's layout
        return tiny_qwen.config(model_type, tokens={"vision_start_token_id": START, "vision_end_token_id": END,
                                                    "image_token_id": IMAGE, "video_token_id": VIDEO},
                                vocab=tiny_qwen.FAMILY_VOCAB, layers=2, theta=1e4, patch=2, window=4,
                                special={"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": PAD}, attn="eager")
    return tiny_qwen.family_config(model_type, attn="eager")


_CLASSES = ("AutoModelForImageTextToText", "AutoModelForVision2Seq")


def make(model_type, seed=0):
    torch.manual_seed(seed)
    config = config_of(model_type)
    auto = next(getattr(transformers, n) for n in _CLASSES if hasattr(transformers, n))
    model = auto.from_config(config).eval()
    for obj in (model.config, getattr(model.config, "text_config", None), model.generation_config):
        if obj is not None:
            obj.pad_token_id = PAD
    return model


def holder(model):
    inner = getattr(model, "model", None)
    return inner if callable(getattr(inner, "get_rope_index", None)) else model


# ------------------------------------------------------------------ requests ---

def layout(model_type):
    """How the family writes a video: "block" (one block of t frames), "frames" (a timestamp
    token, then a block, per frame) or "glm" (frames as image blocks, each followed by its
    timestamp, inside a video span)."""
    found = families.FAMILIES[model_type]
    if found.video_span is not None:
        return "glm"
    return "frames" if found.frames_are_blocks else "block"


def vision_tokens(model_type, kind, t, h, w):
    per_frame = (h // 2) * (w // 2)
    if kind == "image":
        return [START] + [IMAGE] * per_frame + [END]
    style = layout(model_type)
    if style == "block":
        return [START] + [VIDEO] * (t * per_frame) + [END]
    if style == "frames":
        return sum(([100 + k, START] + [VIDEO] * per_frame + [END] for k in range(t)), [])
    return [VIDEO_START] + sum(([START] + [IMAGE] * per_frame + [END, 100 + k] for k in range(t)), []) + [VIDEO_END]


def sample(model_type, kinds, seed):
    """One row: random text, then for each kind a block of random size and random text."""
    g = torch.Generator().manual_seed(seed)
    config = config_of(model_type)

    def text(n):
        return [int(x) for x in torch.randint(3, 200, (n,), generator=g)]

    def side():
        return 2 * int(torch.randint(1, 4, (1,), generator=g))

    ids, images, videos = text(int(torch.randint(1, 5, (1,), generator=g))), [], []
    for kind in kinds:
        grid = [int(torch.randint(1, 4, (1,), generator=g)) if kind == "video" else 1, side(), side()]
        (videos if kind == "video" else images).append(grid)
        ids += vision_tokens(model_type, kind, *grid) + text(int(torch.randint(1, 4, (1,), generator=g)))
    out = {"input_ids": torch.tensor([ids])}
    if images:
        out["image_grid_thw"] = torch.tensor(images)
        out["pixel_values"] = tiny_qwen.pixel_rows(config, sum(t * h * w for t, h, w in images), g)
    if videos:
        out["video_grid_thw"] = torch.tensor(videos)
        out["pixel_values_videos"] = tiny_qwen.pixel_rows(config, sum(t * h * w for t, h, w in videos), g)
    return out


def batch(model_type, rows, side):
    """Samples as one batch padded on `side`, with its attention mask."""
    n = max(r["input_ids"].size(1) for r in rows)
    ids, mask = [], []
    for r in rows:
        k = r["input_ids"].size(1)
        fill = torch.full((1, n - k), PAD, dtype=torch.int64)
        ids.append(torch.cat([fill, r["input_ids"]] if side == "left" else [r["input_ids"], fill], 1))
        ones, zeros = torch.ones(1, k, dtype=torch.int64), torch.zeros(1, n - k, dtype=torch.int64)
        mask.append(torch.cat([zeros, ones] if side == "left" else [ones, zeros], 1))
    out = {"input_ids": torch.cat(ids), "attention_mask": torch.cat(mask)}
    for key in ("image_grid_thw", "video_grid_thw", "pixel_values", "pixel_values_videos"):
        parts = [r[key] for r in rows if key in r]
        if parts:
            out[key] = torch.cat(parts)
    return out


REQUESTS = {
    "text": lambda t, seed: sample(t, (), seed),
    "images": lambda t, seed: sample(t, ("image", "image"), seed),
    "video": lambda t, seed: sample(t, ("video",), seed),
    "images and video": lambda t, seed: sample(t, ("image", "video", "image"), seed),
    "left padded": lambda t, seed: batch(t, [sample(t, ("image",), seed), sample(t, ("image", "image"), seed + 1),
                                             sample(t, (), seed + 2)], "left"),
    "right padded": lambda t, seed: batch(t, [sample(t, ("image", "image"), seed), sample(t, ("image",), seed + 1)],
                                          "right"),
    "left padded with video": lambda t, seed: batch(t, [sample(t, ("image",), seed),
                                                        sample(t, ("video", "image"), seed + 1)], "left"),
    "right padded with video": lambda t, seed: batch(t, [sample(t, ("video",), seed), sample(t, (), seed + 1)],
                                                     "right"),
}


def token_types(model_type, inputs):
    return families.resolve(config_of(model_type)).token_types(inputs["input_ids"], inputs.get("attention_mask"))


def rope_index_arguments(function, model_type, inputs):
    """The arguments of a get_rope_index of the release's signature."""
    names = inspect.signature(function).parameters
    given = {"input_ids": inputs["input_ids"], "attention_mask": inputs.get("attention_mask"),
             "image_grid_thw": inputs.get("image_grid_thw"), "video_grid_thw": inputs.get("video_grid_thw"),
             "mm_token_type_ids": token_types(model_type, inputs)}
    return {k: v for k, v in given.items() if k in names}


def hf_kwargs(model, model_type, inputs):
    """What the unswitched model needs: mm_token_type_ids as the family's processor makes them."""
    out = dict(inputs)
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        out["mm_token_type_ids"] = token_types(model_type, inputs)
    return out


_REFUSED = {}


def skip_if_transformers_refuses(model, model_type, name, inputs):
    """Skip where the family's own unswitched model cannot run the request (a tower without
    video, a release's own bug)."""
    if "video_grid_thw" in inputs and "video_grid_thw" not in inspect.signature(model.forward).parameters:
        # PaddleOCR-VL: its forward drops the video grids (into **kwargs) and places the video
        # tokens as text; it reads images only
        pytest.skip(f"transformers {transformers.__version__}'s {model_type} takes no video")
    if (model_type, name) not in _REFUSED:
        try:
            with torch.no_grad():
                model(**hf_kwargs(model, model_type, inputs))
            _REFUSED[model_type, name] = None
        except (ValueError, RuntimeError, StopIteration, TypeError, IndexError) as e:
            _REFUSED[model_type, name] = f"{type(e).__name__}: {e}"
    if _REFUSED[model_type, name]:
        pytest.skip(f"transformers {transformers.__version__}'s own {model_type} refuses this request: "
                    f"{_REFUSED[model_type, name][:120]}")


# --------------------------------------------------------------- positions ---

@pytest.mark.parametrize("name", list(REQUESTS))
@pytest.mark.parametrize("model_type", COVERED)
def test_mrope_positions_equal_the_familys_own_get_rope_index(model_type, name):
    model = make(model_type)
    own = holder(model).get_rope_index
    fn = hf.rope_index_fn(model.config, scheme="mrope")
    for seed in range(3):
        inputs = REQUESTS[name](model_type, 10 * seed)
        want = own(**rope_index_arguments(own, model_type, inputs))
        got = fn(**rope_index_arguments(fn, model_type, inputs))
        hf.apply(model, "mrope")
        patched = holder(model).get_rope_index(**rope_index_arguments(own, model_type, inputs))
        hf.restore(model)
        for what, (positions, deltas) in (("rope_index_fn", got), ("the switched model", patched)):
            assert positions.dtype == want[0].dtype and deltas.dtype == want[1].dtype, (what, seed)
            assert torch.equal(positions, want[0]), (what, seed, positions, want[0])
            assert torch.equal(deltas.reshape(want[1].shape), want[1]), (what, seed, deltas, want[1])


# ------------------------------------------------------------------ logits ---

# GLM's own model cannot take images and a video together (it scatters both into its image
# tokens), and PaddleOCR-VL's has no video tower: each such request is skipped where the family's
# own unswitched model refuses it.
LOGIT_REQUESTS = ["images", "video", "images and video", "left padded", "right padded with video"]


@pytest.mark.parametrize("name", LOGIT_REQUESTS)
@pytest.mark.parametrize("model_type", COVERED)
def test_switched_mrope_gives_the_unswitched_logits_bit_for_bit(model_type, name):
    model = make(model_type)
    inputs = REQUESTS[name](model_type, 5)
    skip_if_transformers_refuses(model, model_type, name, inputs)
    with torch.no_grad():
        want = model(**hf_kwargs(model, model_type, inputs)).logits
        hf.apply(model, "mrope")
        got = model(**inputs).logits  # no mm_token_type_ids: apply derives them
    real = inputs.get("attention_mask", torch.ones_like(inputs["input_ids"])).bool()
    assert torch.equal(got[real], want[real])


GEOMETRIES = {"circle": {"scheme": "circle"}, "alternate": {"age": "alternate"}}


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("model_type", NEW)
def test_circle_and_age_run_forward_and_backward_and_move_the_logits(model_type, geometry):
    model = make(model_type)
    inputs = REQUESTS["left padded"](model_type, 7)
    skip_if_transformers_refuses(model, model_type, "left padded", inputs)
    with torch.no_grad():
        mrope = model(**hf_kwargs(model, model_type, inputs)).logits
    hf.apply(model, circle=circlerope.CircleConfig(radius="auto", alpha=0.7), **GEOMETRIES[geometry])
    model.train()
    logits = model(**inputs).logits
    real = inputs["attention_mask"].bool()
    assert torch.isfinite(logits[real]).all()
    assert (logits.detach()[real] - mrope[real]).abs().max() > 1e-4  # the geometry reached the layers
    models.lm_loss(logits, inputs["input_ids"]).backward()
    text = models.parts(model)
    grads = [p.grad for p in text.layers.parameters() if p.grad is not None]  # experts no token chose have none
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def generate_prompt(model_type, rows):
    if rows == 1:
        return sample(model_type, ("image",), 21)
    return batch(model_type, [sample(model_type, ("image",), 22), sample(model_type, ("image", "image"), 23)], "left")


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("model_type", NEW)
def test_cached_generate_equals_a_full_recompute(model_type, geometry):
    model = make(model_type)
    hf.apply(model, **GEOMETRIES[geometry])
    for rows in (1, 2):
        models.assert_cached_generate_equals_a_full_recompute(model, rows, generate_prompt(model_type, rows))


# --------------------------------------------------------------- refusals ---

def test_the_table_lists_each_model_type_once_and_every_family_follows_a_rule():
    assert not set(families.FAMILIES) & set(families.REFUSED)
    assert all(f.rule in families.RULES for f in families.FAMILIES.values())
    assert set(families.supported()) <= set(families.FAMILIES)


@pytest.mark.parametrize("model_type", sorted(families.REFUSED) + [t for t in PRESENT if t not in COVERED])
def test_a_family_not_switched_is_refused_by_apply_and_rope_index_fn_with_one_message(model_type):
    config = transformers.PretrainedConfig()
    config.model_type = model_type

    class Fake(torch.nn.Module):
        pass
    fake = Fake()
    fake.config = config
    messages = []
    for call in (lambda: hf.apply(fake, "circle"), lambda: hf.rope_index_fn(config), lambda: hf.apply(fake, "mrope")):
        with pytest.raises(ValueError) as e:
            call()
        messages.append(str(e.value))
    assert len(set(messages)) == 1, messages
    message = messages[0]
    assert repr(model_type) in message and ", ".join(families.supported()) in message, message
    if model_type in families.REFUSED:
        assert families.REFUSED[model_type] in message
    else:  # a family whose get_rope_index in this release is not yet the rule it later follows
        assert transformers.__version__ in message


def test_the_saved_model_type_of_a_switched_family_is_that_family():
    for model_type, found in families.FAMILIES.items():
        if VERSION >= found.since:
            assert families.family({"model_type": model_type + families.SAVED_SUFFIX}) is found


@pytest.mark.skipif("glm4v" not in COVERED, reason="GLM-4.1V follows Qwen3-VL's rule from transformers 5.3")
def test_glm_video_frames_are_read_as_video_and_the_vision_config_reads_its_image_start():
    config = config_of("glm4v")
    vision = circlerope.VisionConfig.from_hf_config(config)
    assert vision.vision_start_token_id == START
    resolved = families.resolve(config)
    ids = torch.tensor([[5, START, IMAGE, END, VIDEO_START, START, IMAGE, END, 9, START, IMAGE, END, 9, VIDEO_END,
                         START, IMAGE, END]])
    assert resolved.core_ids(ids)[0].tolist() == [5, START, IMAGE, END, VIDEO_START, START, VIDEO, END, 9, START,
                                                  VIDEO, END, 9, VIDEO_END, START, IMAGE, END]
    assert torch.equal(resolved.core_ids(resolved.core_ids(ids)), resolved.core_ids(ids))
    assert resolved.token_types(ids)[0].tolist() == [0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 1, 0]


@pytest.mark.parametrize("model_type", [t for t in NEW if families.FAMILIES[t].fused])
def test_the_fused_rotation_equals_the_releases_where_the_table_takes_it(model_type):
    """rotation="fused" against transformers' rotation on the same positions: within float32
    rounding (the table's angles rounded once from double, transformers' computed in float32)."""
    model = make(model_type)
    inputs = REQUESTS["left padded"](model_type, 3)
    real = inputs["attention_mask"].bool()
    logits = {}
    for rotation in ("transformers", "fused"):
        hf.apply(model, age="alternate", rotation=rotation)
        logits[rotation] = models.forward_logits(model, inputs)
        hf.restore(model)
    torch.testing.assert_close(logits["fused"][real], logits["transformers"][real], rtol=0, atol=1e-5)


@pytest.mark.parametrize("model_type", [t for t in NEW if not families.FAMILIES[t].fused])
def test_the_fused_rotation_is_refused_where_it_was_not_checked(model_type):
    model = make(model_type)
    with pytest.raises(ValueError, match="rotation='fused'.*use rotation='transformers'"):
        hf.apply(model, "circle", rotation="fused")
    assert hf.geometry(model) is None


# ------------------------------------------------------------ pack, restore ---

def takes_video(model):
    return "video_grid_thw" in inspect.signature(model.forward).parameters


@pytest.mark.parametrize("model_type", NEW)
def test_packed_samples_give_each_samples_own_logits(model_type):
    """pack() of a family: each sample's logits in the packed row equal its forward alone. Images
    and videos are packed apart: GLM's own model cannot take both in one forward."""
    model = make(model_type)
    hf.apply(model, age="alternate")
    varlen = bool(families.linear_attention_layers(model.config))
    if varlen:
        # Qwen3.5: transformers keeps packed samples apart in its linear attention only with the
        # varlen kwargs and flash-linear-attention; without them the state leaks, so pack refuses.
        with pytest.raises(ValueError, match="linear attention.*flash_attention_kwargs=True"):
            hf.pack(model, [sample(model_type, ("image",), 31)])
        if importlib.util.find_spec("fla") is None:
            # 5.24's fallback refuses packed rows; 5.2's and 5.17's run them, mixing the samples
            pytest.skip("a hybrid's packed samples stay apart only with flash-linear-attention, not installed")
    rows = [[("image",), ("image", "image"), ()]] + ([[("video",), (), ("video",)]] if takes_video(model) else [])
    packs = [[sample(model_type, kinds, 31 + 3 * p + k) for k, kinds in enumerate(pack)] for p, pack in enumerate(rows)]
    for samples in packs:
        packed = hf.pack(model, samples, flash_attention_kwargs=varlen)
        models.assert_each_sample_alone(model, samples, models.forward_logits(model, packed))


@pytest.mark.parametrize("model_type", NEW)
def test_restore_gives_the_unswitched_model_back(model_type):
    model = make(model_type)
    inputs = REQUESTS["left padded"](model_type, 41)
    with torch.no_grad():
        want = model(**hf_kwargs(model, model_type, inputs)).logits
        hf.apply(model, age="alternate")
        switched = model(**inputs).logits
        hf.restore(model)
        got = model(**hf_kwargs(model, model_type, inputs)).logits
    assert hf.geometry(model) is None and not torch.equal(switched, want)
    assert torch.equal(got, want)


@pytest.mark.skipif("qwen3_5" not in COVERED, reason="Qwen3.5 from transformers 5.2")
def test_a_plan_that_leaves_a_geometry_on_linear_attention_layers_only_is_refused():
    """Qwen3.5's attention layers are every 4th (odd indices): AGE's "alternate" would put
    Circle-RoPE on linear-attention layers only, which take no positions."""
    config = tiny_qwen.family_config("qwen3_5", layer_types=["linear_attention"] * 3 + ["full_attention"]
                                     + ["linear_attention"] * 3 + ["full_attention"])
    model = transformers.AutoModelForImageTextToText.from_config(config).eval()
    with pytest.raises(ValueError, match=r"puts circle on linear-attention layers only.*attention layers are \[3, 7\]"):
        hf.apply(model, age="alternate")
    assert hf.geometry(model) is None
    hf.apply(model, age="MMMCMMMM")  # the attention layers: Circle-RoPE, then M-RoPE
    assert [hf.geometry(model)["schemes"][g] for g in hf.geometry(model)["layer_geometry"]][3::4] == ["circle", "mrope"]
