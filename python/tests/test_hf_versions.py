"""circlerope's transformers compat modes against the transformers this process imports.

For the installed transformers (one release per run: scripts/hf_matrix.sh runs this file once
per release with PYTHONPATH=build/hf/VERSION), tiny Qwen2-VL and Qwen2.5-VL models are built
from config objects (text hidden 64, 2 layers, vision depth 1: nothing is downloaded) and
their own get_rope_index is compared with

    circlerope.get_rope_index(..., scheme="mrope", compat=circlerope.hf.compat_for_version(v))

on seeded random requests (text only, images, videos with second_per_grid_ts including
fractional values, mixed, left and right padding with attention masks, batch 1..3,
tokens_per_second 1, 2, 4 and 25): position_ids and rope_deltas must be equal (circlerope's
float32 holding transformers' integers exactly; the adapter's in transformers' dtype too).
Where transformers raises (5.3-5.5.3 runs out of second_per_grid_ts when images
take entries of it), circlerope must refuse the request too. The adapter
circlerope.hf.rope_index_fn(config, scheme="mrope") must have the real method's signature and
give the same result when called the way that release's model calls it (positionally up to
4.51, with keywords from 4.54, with generate's **model_kwargs from 5.2).

Without transformers (or with one older than Qwen2.5-VL, 4.49) every test is skipped.

    python python/tests/test_hf_versions.py --merge DIR OUT   # records of several runs -> OUT

merges the records that runs with HF_MATRIX_RECORD_DIR=DIR wrote (the outputs of the real
release on a fixed set of requests) into tests/data/hf_mrope_releases.json.
"""

import inspect
import json
import os
import random
import re
import sys

import pytest
import torch

try:
    import transformers
except ImportError:  # the whole module is skipped below
    transformers = None

SKIP_REASON = None
if transformers is None:
    SKIP_REASON = "transformers is not importable here (scripts/hf_matrix.sh installs the releases)"
elif not hasattr(transformers, "Qwen2_5_VLForConditionalGeneration"):
    SKIP_REASON = f"transformers {transformers.__version__} has no Qwen2.5-VL (it came in 4.49)"
if SKIP_REASON and __name__ != "__main__":
    pytest.skip(SKIP_REASON, allow_module_level=True)

import circlerope  # noqa: E402
import circlerope.hf as hf  # noqa: E402
import tiny_qwen  # noqa: E402

VERSION = transformers.__version__ if transformers is not None else None
MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
PAD, START, END, IMAGE, VIDEO = 151643, 151652, 151653, 151655, 151656
SECONDS = [0.5, 1.0, 2.0, 1.3333333730697632, 0.25, 0.75, 1.5, 2.5, 3.0, 0.1, 0.6666666865348816, 1.1]
FRACTIONAL = [s for s in SECONDS if s != int(s)]
CATEGORIES = ("text", "images", "videos", "fractional_seconds", "mixed", "left_padding", "right_padding",
              "edges")
CASES_PER_CATEGORY = int(os.environ.get("HF_MATRIX_CASES", "12"))


def _version_tuple(v):
    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", v).groups(default="0"))


V = _version_tuple(VERSION) if VERSION else (0, 0, 0)


def test_the_expected_release_is_imported():
    expected = os.environ.get("HF_MATRIX_EXPECT_VERSION")
    if expected:
        assert VERSION == expected, f"PYTHONPATH gave transformers {VERSION} ({transformers.__file__}), not {expected}"


# --------------------------------------------------------------- tiny models ---

def _config(model_type):
    """A tiny config of this release's classes, token ids as Qwen's checkpoints have them."""
    return tiny_qwen.config(model_type, tokens={"vision_start_token_id": START, "vision_end_token_id": END,
                                                "image_token_id": IMAGE, "video_token_id": VIDEO})


_MODELS = {}


def model_of(model_type):
    """(the object whose get_rope_index the model calls, its config)."""
    if model_type not in _MODELS:
        Model = (transformers.Qwen2VLForConditionalGeneration if model_type == "qwen2_vl"
                 else transformers.Qwen2_5_VLForConditionalGeneration)
        torch.manual_seed(0)
        model = Model(_config(model_type)).eval()
        inner = getattr(model, "model", None)
        holder = inner if inner is not None and hasattr(inner, "get_rope_index") else model
        _MODELS[model_type] = holder
    holder = _MODELS[model_type]
    return holder, holder.config


# ------------------------------------------------------------------ requests ---

def _grid(rng, video):
    t = rng.randint(1, 4) if video else 1
    side = (1, 3) if video else (1, 4)
    return [t, 2 * rng.randint(*side), 2 * rng.randint(*side)]


def _row(rng, kinds, edges=False):
    """Token ids of one row holding blocks of `kinds` ("image"/"video"), its grids in order."""
    tokens, images, videos = [], [], []

    def text(n):
        tokens.extend(rng.randrange(0, PAD) for _ in range(n))

    for kind in kinds:
        text(rng.randint(0, 1) if edges else rng.randint(0, 4))
        if edges and rng.random() < 0.3:
            tokens.append(START)  # a vision start that opens no block is text
            text(1)
        g = _grid(rng, kind == "video")
        (videos if kind == "video" else images).append(g)
        tokens.append(START)
        tokens.extend([VIDEO if kind == "video" else IMAGE] * (g[0] * (g[1] // 2) * (g[2] // 2)))
        if not (edges and rng.random() < 0.4):
            tokens.append(END)
    text(rng.randint(0, 1) if edges else rng.randint(1 if not kinds else 0, 4))
    if not tokens:
        text(1)
    return tokens, images, videos


def make_case(rng, category, model_type):
    """A request as a dict: input_ids, attention_mask, grids, second_per_grid_ts, tps."""
    batch = rng.randint(1, 3)
    rows = []
    for _ in range(batch):
        if category == "text":
            kinds = []
        elif category == "images":
            kinds = ["image"] * rng.randint(0 if batch > 1 else 1, 2)
        elif category in ("videos", "fractional_seconds"):
            kinds = ["video"] * rng.randint(0 if batch > 1 else 1, 2)
        else:
            kinds = [rng.choice(["image", "video"]) for _ in range(rng.randint(0, 3))]
        rows.append(_row(rng, kinds, edges=category == "edges"))
    padding = {"left_padding": "left", "right_padding": "right"}.get(category)
    if padding is None:
        padding = rng.choice(["none", "none", "left", "right"]) if category in ("text", "edges", "mixed") else "none"
    if padding == "none":  # equal lengths: the shorter rows get more text at the end
        longest = max(len(r[0]) for r in rows)
        for r in rows:
            r[0].extend(rng.randrange(0, PAD) for _ in range(longest - len(r[0])))
    longest = max(len(r[0]) for r in rows)
    ids, mask = [], []
    for tokens, _, _ in rows:
        pad = longest - len(tokens)
        if padding == "left":
            ids.append([PAD] * pad + tokens)
            mask.append([0] * pad + [1] * len(tokens))
        else:
            ids.append(tokens + [PAD] * pad)
            mask.append([1] * len(tokens) + [0] * pad)
    with_mask = padding != "none" or rng.random() < 0.5
    images = [g for r in rows for g in r[1]]
    videos = [g for r in rows for g in r[2]]
    seconds = None
    if model_type == "qwen2_5_vl" and videos:
        if category == "fractional_seconds":
            seconds = [rng.choice(FRACTIONAL) for _ in videos]
        elif rng.random() < 0.75:
            seconds = [rng.choice(SECONDS) for _ in videos]
    return {"input_ids": ids, "attention_mask": mask if with_mask else None, "image_grid_thw": images or None,
            "video_grid_thw": videos or None, "second_per_grid_ts": seconds,
            "tokens_per_second": rng.choice([2, 2, 1, 4, 25]) if model_type == "qwen2_5_vl" else None}


def cases(category, model_type, count=CASES_PER_CATEGORY):
    rng = random.Random(f"{category}/{model_type}")
    return [make_case(rng, category, model_type) for _ in range(count)]


def tensors(case):
    """The request as the processor's tensors: int64 ids, mask and grids, float32 seconds."""
    def t(x, dtype=torch.int64):
        return None if x is None else torch.tensor(x, dtype=dtype)
    ids = t(case["input_ids"])
    types = torch.zeros_like(ids)
    types[ids == IMAGE] = 1
    types[ids == VIDEO] = 2
    return {"input_ids": ids, "attention_mask": t(case["attention_mask"]),
            "image_grid_thw": t(case["image_grid_thw"]), "video_grid_thw": t(case["video_grid_thw"]),
            "second_per_grid_ts": t(case["second_per_grid_ts"], torch.float32), "mm_token_type_ids": types}


# ------------------------------------------------------------------- calling ---

def _parameters(fn):
    return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def call_as_the_model_does(fn, args, style, model_type):
    """Calls a get_rope_index (the real one or circlerope's stand-in) in one of the ways this
    release's model does: "positional" (4.49-4.51 forward), "keywords" (ids first, the rest by
    name: 4.54+ forward and prepare_inputs_for_generation, 5.2+ forward), "generate" (5.2+
    generate: get_rope_index(input_ids, **model_kwargs), model_kwargs holding more keys)."""
    names = ["image_grid_thw", "video_grid_thw", "attention_mask"]
    if model_type == "qwen2_5_vl":
        names.insert(2, "second_per_grid_ts")
    if V >= (5, 3, 0):
        names.insert(0, "mm_token_type_ids")
    if style == "positional":
        order = [p.name for p in _parameters(fn) if p.kind == p.POSITIONAL_OR_KEYWORD]
        return fn(*[args[n] for n in order])
    kwargs = {n: args[n] for n in names}
    if style == "generate":
        kwargs.update(pixel_values=None, pixel_values_videos=None, use_cache=True, output_attentions=False,
                      output_hidden_states=False, return_dict_in_generate=False)
    return fn(args["input_ids"], **kwargs)


def outcome(thunk):
    try:
        return "ok", thunk()
    except Exception as e:  # noqa: BLE001 (any refusal counts; the type is reported)
        return "error", f"{type(e).__name__}: {e}"


def real_rope_index(model_type, case, args):
    holder, config = model_of(model_type)
    if case["tokens_per_second"] is not None:
        config.vision_config.tokens_per_second = case["tokens_per_second"]
    return outcome(lambda: call_as_the_model_does(holder.get_rope_index, args, "keywords", model_type))


def ours(model_type, case, args):
    _, config = model_of(model_type)
    if case["tokens_per_second"] is not None:
        config.vision_config.tokens_per_second = case["tokens_per_second"]
    vision = circlerope.VisionConfig.from_hf_config(config)
    compat = hf.compat_for_version(VERSION)

    def positions():
        pos, deltas = circlerope.get_rope_index(
            args["input_ids"], args["image_grid_thw"], args["video_grid_thw"],
            args["second_per_grid_ts"] if model_type == "qwen2_5_vl" else None, args["attention_mask"],
            scheme="mrope", vision=vision, compat=compat)
        assert pos.dtype == deltas.dtype == torch.float32, "get_rope_index gives float32 in every mode"
        # as int64 where they hold integers (exactly: they are below 2^24), to compare with transformers'
        return tuple(t.to(torch.int64) if bool((t == t.round()).all()) else t for t in (pos, deltas))

    return outcome(positions)


def describe(case):
    return json.dumps({k: v for k, v in case.items() if k != "input_ids"}) + " ids " + json.dumps(
        [[{PAD: "P", START: "S", END: "E", IMAGE: "I", VIDEO: "V"}.get(x, "t") for x in row]
         for row in case["input_ids"]])


def check_equal(got, want, case, what):
    status_g, value_g = got
    status_w, value_w = want
    if status_w == "error":
        assert status_g == "error", f"{what}: transformers {VERSION} raised {value_w}, circlerope did not: {describe(case)}"
        return
    assert status_g == "ok", f"{what}: circlerope raised {value_g}: {describe(case)}"
    (pos, deltas), (want_pos, want_deltas) = value_g, value_w
    assert pos.dtype == want_pos.dtype and deltas.dtype == want_deltas.dtype, (
        f"{what}: dtypes {pos.dtype}/{deltas.dtype}, transformers {want_pos.dtype}/{want_deltas.dtype}")
    assert tuple(pos.shape) == tuple(want_pos.shape) and tuple(deltas.shape) == tuple(want_deltas.shape), (
        f"{what}: shapes {tuple(pos.shape)}/{tuple(deltas.shape)}, transformers "
        f"{tuple(want_pos.shape)}/{tuple(want_deltas.shape)}")
    if not torch.equal(pos, want_pos):
        where = (pos != want_pos).nonzero()[0].tolist()
        a, b = where[0], where[1]
        raise AssertionError(f"{what}: position_ids differ first at axis {a} row {b} token {where[2]}:\n"
                             f"  ours {pos[a, b].tolist()}\n  hf   {want_pos[a, b].tolist()}\n{describe(case)}")
    assert torch.equal(deltas, want_deltas), (
        f"{what}: rope_deltas ours {deltas.view(-1).tolist()}, transformers {want_deltas.view(-1).tolist()}: "
        f"{describe(case)}")


# --------------------------------------------------------------------- tests ---

@pytest.mark.parametrize("category", CATEGORIES)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_positions_equal_the_release(model_type, category):
    for i, case in enumerate(cases(category, model_type)):
        args = tensors(case)
        want = real_rope_index(model_type, case, args)
        check_equal(ours(model_type, case, args), want, case,
                    f"{model_type} {category} #{i} (transformers {VERSION}, {hf.compat_for_version(VERSION)})")


def _styles():
    styles = ["keywords", "positional"]
    if V >= (5, 2, 0):
        styles.append("generate")
    return styles


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_adapter_has_the_real_signature(model_type):
    holder, config = model_of(model_type)
    fn = hf.rope_index_fn(config, scheme="mrope")
    assert fn.compat == hf.compat_for_version(VERSION)

    def shape(f):
        return [(p.name, p.kind, p.default is inspect.Parameter.empty) for p in _parameters(f)]
    assert shape(fn) == shape(holder.get_rope_index), (
        f"transformers {VERSION}: {inspect.signature(holder.get_rope_index)}, ours {inspect.signature(fn)}")


@pytest.mark.parametrize("style", _styles())
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_adapter_called_as_the_model_calls_it(model_type, style):
    holder, config = model_of(model_type)
    for category in ("mixed", "left_padding"):
        for i, case in enumerate(cases(category, model_type, 4)):
            if case["tokens_per_second"] is not None:
                config.vision_config.tokens_per_second = case["tokens_per_second"]
            fn = hf.rope_index_fn(config, scheme="mrope")
            args = tensors(case)
            want = outcome(lambda: call_as_the_model_does(holder.get_rope_index, args, style, model_type))
            got = outcome(lambda: call_as_the_model_does(fn, args, style, model_type))
            check_equal(got, want, case, f"adapter {model_type} {style} {category} #{i} (transformers {VERSION})")


def _rotary_positions(model):
    """Hooks the text model's rotary embedding: the list fills with the position_ids of each
    forward pass ([3, B, L]; 5.x's 4-row ids lose their text row)."""
    seen = []
    for name, module in model.named_modules():
        if name.endswith("rotary_emb") and "visual" not in name and "layers" not in name:
            def hook(mod, args, kwargs, out):
                ids = args[1] if len(args) > 1 else kwargs.get("position_ids")
                seen.append(ids[-3:].detach().clone())
            module.register_forward_hook(hook, with_kwargs=True)
    return seen


_GENERATORS = {}


def _generator(model_type):
    if model_type not in _GENERATORS:
        Model = (transformers.Qwen2VLForConditionalGeneration if model_type == "qwen2_vl"
                 else transformers.Qwen2_5_VLForConditionalGeneration)
        torch.manual_seed(0)
        model = Model(_config(model_type)).eval()
        _GENERATORS[model_type] = (model, _rotary_positions(model))
    return _GENERATORS[model_type]


@pytest.mark.parametrize("model_type,seconds", [("qwen2_vl", None), ("qwen2_5_vl", None), ("qwen2_5_vl", 1.5)])
def test_patched_model_generates_with_the_same_positions(model_type, seconds):
    """generate() of a tiny model, left-padded batch with an image and a video, before and
    after get_rope_index is replaced by rope_index_fn(config, scheme="mrope"): the same
    position_ids reach the rotary embedding at the prefill and at every decoding step (each
    release's own decode rule then runs on our deltas), and the same tokens come out."""
    model, seen = _generator(model_type)
    holder = model.model if hasattr(getattr(model, "model", None), "get_rope_index") else model
    row0 = [PAD, PAD, PAD, 11, START, IMAGE, IMAGE, IMAGE, IMAGE, END, 12]
    row1 = [13, START, VIDEO, VIDEO, VIDEO, VIDEO, END, 14, 15, 16, 17]  # a 4-frame video, 1 cell each
    ids = torch.tensor([row0, row1])
    torch.manual_seed(1)
    inputs = dict(input_ids=ids, attention_mask=(ids != PAD).long(), pixel_values=torch.randn(16, 1176),
                  image_grid_thw=torch.tensor([[1, 4, 4]]), pixel_values_videos=torch.randn(16, 1176),
                  video_grid_thw=torch.tensor([[4, 2, 2]]))
    if model_type == "qwen2_5_vl":
        model.config.vision_config.tokens_per_second = 2
    if seconds is not None:  # 5.3-5.5.3 hand it to the image first, then raise for the video
        inputs["second_per_grid_ts"] = torch.tensor([seconds])
    if V >= (5, 3, 0):
        inputs["mm_token_type_ids"] = tensors({"input_ids": ids.tolist(), "attention_mask": None,
                                               "image_grid_thw": None, "video_grid_thw": None,
                                               "second_per_grid_ts": None})["mm_token_type_ids"]

    def run():
        seen.clear()
        with torch.no_grad():
            result = outcome(lambda: model.generate(**inputs, max_new_tokens=3, do_sample=False,
                                                    suppress_tokens=[START, END, IMAGE, VIDEO]))
        return result, list(seen)

    want, want_seen = run()
    holder.get_rope_index = hf.rope_index_fn(holder.config, scheme="mrope")
    try:
        got, got_seen = run()
    finally:
        del holder.get_rope_index
    if want[0] == "error":
        assert got[0] == "error", f"transformers {VERSION} raised {want[1]}, the patched model did not"
        return
    assert got[0] == "ok", got[1]
    assert len(got_seen) == len(want_seen) == 3
    for step, (a, b) in enumerate(zip(got_seen, want_seen)):
        assert torch.equal(a, b), f"step {step}: patched {a[:, :, -1].tolist()}, transformers {b[:, :, -1].tolist()}"
    assert torch.equal(got[1], want[1])


def test_record_the_release_on_the_fixed_requests():
    """With HF_MATRIX_RECORD_DIR set: writes what this release returns on the requests of
    tests/data/hf_mrope_releases.json (two per category and model) to DIR/VERSION.json."""
    out_dir = os.environ.get("HF_MATRIX_RECORD_DIR")
    if not out_dir:
        pytest.skip("HF_MATRIX_RECORD_DIR is not set (scripts/hf_matrix.sh --record sets it)")
    records = []
    for model_type in MODEL_TYPES:
        for category in CATEGORIES:
            for i, case in enumerate(record_cases(category, model_type)):
                status, value = real_rope_index(model_type, case, tensors(case))
                result = ({"error": value.split(":")[0]} if status == "error" else
                          {"position_ids": value[0].tolist(), "rope_deltas": value[1].view(-1).tolist(),
                           "dtype": [str(value[0].dtype), str(value[1].dtype)]})
                records.append({"name": f"{model_type}_{category}_{i}", "model": model_type,
                                "request": request_json(case, model_type), "result": result})
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{VERSION}.json"), "w") as f:
        json.dump({"version": VERSION, "compat": hf.compat_for_version(VERSION), "records": records}, f)


def record_cases(category, model_type):
    rng = random.Random(f"record/{category}/{model_type}")
    out = []
    while len(out) < 2:
        case = make_case(rng, category, model_type)
        if len(case["input_ids"][0]) <= 48:  # small enough to read, and to keep the file small
            out.append(case)
    return out


def request_json(case, model_type):
    """The request in the format of tests/data (circlerope positions --request)."""
    vision = {"spatial_merge_size": 2, "vision_start_token_id": START, "image_token_id": IMAGE,
              "video_token_id": VIDEO, "time": "index" if model_type == "qwen2_vl" else "seconds",
              "tokens_per_second": case["tokens_per_second"] or 2}
    seconds = case["second_per_grid_ts"]
    return {"scheme": "mrope", "vision": vision, "input_ids": case["input_ids"],
            "attention_mask": case["attention_mask"], "image_grid_thw": case["image_grid_thw"] or [],
            "video_grid_thw": case["video_grid_thw"] or [],
            # float32 values, as the processor's tensor holds them
            "second_per_grid_ts": None if seconds is None else torch.tensor(seconds, dtype=torch.float32).tolist()}


# ------------------------------------------------------------------- merging ---

def merge(record_dir, out_path):
    """Releases' records -> one file: each request once, its result per compat mode, and which
    releases gave it (releases of one mode must agree, or this fails)."""
    runs = []
    for name in sorted(os.listdir(record_dir)):
        if name.endswith(".json"):
            with open(os.path.join(record_dir, name)) as f:
                runs.append(json.load(f))
    runs.sort(key=lambda r: _version_tuple(r["version"]))
    modes, cases_out = {}, {}
    for run in runs:
        modes.setdefault(run["compat"], []).append(run["version"])
        for rec in run["records"]:
            entry = cases_out.setdefault(rec["name"], {"name": rec["name"], "model": rec["model"],
                                                       "request": rec["request"], "expected": {}})
            if entry["request"] != rec["request"]:
                raise SystemExit(f"{rec['name']}: transformers {run['version']} was asked another request")
            seen = entry["expected"].get(run["compat"])
            if seen is not None and seen != rec["result"]:
                raise SystemExit(f"{rec['name']}: releases of {run['compat']} disagree ({run['version']})")
            entry["expected"][run["compat"]] = rec["result"]
    doc = {"source": "transformers' own get_rope_index of each release, tiny models built from configs "
                     "(python/tests/test_hf_versions.py; scripts/hf_matrix.sh --record)",
           "releases": modes, "cases": list(cases_out.values())}
    with open(out_path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{out_path}: {len(doc['cases'])} requests, modes " +
          ", ".join(f"{m} ({', '.join(v)})" for m, v in modes.items()))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--merge":
        merge(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
