"""The workflow of a user who fine-tunes a switched model with the Hugging Face stack, on a tiny
random Qwen2.5-VL (nothing downloaded), each step checked against what it must equal:

- transformers' Trainer with gradient checkpointing, circlerope.hf.pack as the data collator
  (images and text in one packed row);
- save_pretrained, then reload through circlerope.hf.from_pretrained, AutoModelForImageTextToText
  and AutoModel: the same geometry and the same logits; the base class refuses the checkpoint
  instead of running it as M-RoPE;
- PEFT LoRA on a switched model (apply before get_peft_model, or after it): train, save the
  adapter with its geometry, reload it onto the reloaded base, merge; loading it onto a base of
  another geometry is refused;
- generate(cache_implementation="static") equals the dynamic cache's generate;
- regional torch.compile of the text model (each decoder layer, fullgraph=True) equals eager.

Needs transformers 5 (the pinned release) and PEFT (constraints.txt); skipped where either is
missing, as under scripts/hf_matrix.sh's older releases.
"""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

import circlerope.hf as hf
import tiny_qwen

transformers = pytest.importorskip("transformers")
if int(re.match(r"(\d+)", transformers.__version__).group(1)) < 5:
    pytest.skip("the training-stack workflow is tested with transformers 5 (constraints.txt's release)",
                allow_module_level=True)
peft = pytest.importorskip("peft")
if os.environ.get("CIRCLEROPE_SANITIZED") == "1":
    pytest.skip("model forwards in torch, which no sanitizer sees", allow_module_level=True)

VOCAB = 512
START, END, IMAGE, VIDEO = 300, 301, 302, 303
TOKENS = dict(vision_start_token_id=START, vision_end_token_id=END, image_token_id=IMAGE, video_token_id=VIDEO)
PATCH_ROW = 3 * 2 * 14 * 14  # channels x temporal patch x patch x patch


def make_model(seed=0):
    cfg = tiny_qwen.config("qwen2_5_vl", tokens=TOKENS, vocab=VOCAB, attn="eager",
                           special=dict(pad_token_id=0, eos_token_id=1, bos_token_id=2))
    torch.manual_seed(seed)
    return transformers.Qwen2_5_VLForConditionalGeneration(cfg).eval()


def sample(seed, image=True):
    """One training sample: text, optionally a 4x4-patch image (4 tokens after merging)."""
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(5, 250, (6,), generator=g)
    out = {}
    if image:
        ids = torch.cat([text[:3], torch.tensor([START, IMAGE, IMAGE, IMAGE, IMAGE, END]), text[3:]])
        out.update(pixel_values=torch.randn(16, PATCH_ROW, generator=g), image_grid_thw=torch.tensor([[1, 4, 4]]))
    else:
        ids = text
    out.update(input_ids=ids, labels=ids.clone())
    return out


def request():
    """A prompt batch: a left-padded text row and a row with an image."""
    ids = torch.tensor([[0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4],
                        [9, 8, 7, START, IMAGE, IMAGE, IMAGE, IMAGE, END, 6, 5]])
    mask = torch.tensor([[0] * 5 + [1] * 6, [1] * 11])
    g = torch.Generator().manual_seed(7)
    return dict(input_ids=ids, attention_mask=mask, pixel_values=torch.randn(16, PATCH_ROW, generator=g),
                image_grid_thw=torch.tensor([[1, 4, 4]]))


def logits(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits


# transformers 5.24 renames gradient checkpointing to activation checkpointing (the old names warn).
CHECKPOINTING = ("activation_checkpointing" if "activation_checkpointing" in
                 transformers.TrainingArguments.__dataclass_fields__ else "gradient_checkpointing")


def train(model, output_dir, steps=3):
    """A few Trainer steps with gradient checkpointing, pack() as the collator."""
    args = transformers.TrainingArguments(
        output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=2, learning_rate=1e-3,
        use_cpu=True, report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True,
        remove_unused_columns=False, dataloader_num_workers=0, **{CHECKPOINTING: True})
    data = [sample(i, image=i % 2 == 0) for i in range(2 * steps)]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   data_collator=lambda samples: hf.pack(model, samples))
    result = trainer.train()
    return trainer, result


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A switched model (AGE alternate) after Trainer steps, saved; and its logits on request()."""
    path = tmp_path_factory.mktemp("trained")
    model = make_model()
    hf.apply(model, "circle", age="alternate")
    before = [p.detach().clone() for p in model.parameters()]
    trainer, result = train(model, tmp_path_factory.mktemp("trainer"))
    assert getattr(model, "is_" + CHECKPOINTING)
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in trainer.state.log_history if "loss" in h)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    model.eval()
    model.save_pretrained(path)
    return model, path, logits(model, request())


def test_trainer_with_gradient_checkpointing_and_pack_then_save_and_reload_everywhere(trained):
    model, path, want = trained
    with open(path / "config.json") as f:
        saved = json.load(f)
    assert saved["model_type"] == "qwen2_5_vl_circlerope" and saved["circlerope"]["age"] == "CM"
    assert saved["text_config"]["rope_parameters"]["rope_type"] == "circlerope"
    inputs = request()
    reopened = [hf.from_pretrained(transformers.Qwen2_5_VLForConditionalGeneration, path, attn_implementation="eager"),
                transformers.AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager")]
    for again in reopened:
        again.eval()
        assert type(again).__name__ == "Qwen2_5_VLCircleRopeForConditionalGeneration"
        assert hf.geometry(again)["age"] == "CM"
        # Only the saved JSON has the circlerope type: the live config keeps its own, which
        # the model's code, PEFT's default target modules and kernels patching by type read.
        assert again.config.model_type == "qwen2_5_vl" and again.config.to_dict()["model_type"] == "qwen2_5_vl"
        torch.testing.assert_close(logits(again, inputs), want, rtol=0, atol=0)
    base = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    assert hf.geometry(base)["age"] == "CM"
    with torch.no_grad():
        hidden = base(**inputs).last_hidden_state
    torch.testing.assert_close(model.lm_head(hidden), want, rtol=0, atol=0)
    # The base class builds no M-RoPE model from it.
    with pytest.raises(ValueError, match="circlerope"):
        transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(path)
    # restore() gives back the base config class: the model saves as a plain Qwen2.5-VL again.
    again = reopened[1]
    hf.restore(again)
    assert type(again.config) is transformers.Qwen2_5_VLConfig and again.config.model_type == "qwen2_5_vl"


def test_without_circlerope_the_loaders_refuse_the_checkpoint_naming_it(trained):
    """In a process that never imports circlerope: AutoConfig / AutoModelForImageTextToText do not
    know the model type and say so, naming it; the base class cannot build its rotary for the rope
    type "circlerope"."""
    _, path, _ = trained
    script = (
        "import sys, transformers\n"
        "for load in (transformers.AutoModelForImageTextToText.from_pretrained,\n"
        "             transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained):\n"
        "    try:\n"
        "        load(sys.argv[1])\n"
        "        print('LOADED')\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, str(e).replace(chr(10), ' ')[:200])\n"
        "assert 'circlerope' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    auto, plain = done.stdout.strip().splitlines()[-2:]
    assert "qwen2_5_vl_circlerope" in auto and not auto.startswith("LOADED"), auto
    assert plain.startswith("KeyError") and "circlerope" in plain, plain


def test_peft_lora_trains_saves_reloads_with_its_geometry_and_merges(trained, tmp_path):
    _, path, _ = trained
    inputs = request()
    model = transformers.AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    lora.train()
    for step in range(2):
        batch = hf.pack(lora, [sample(10 + step), sample(20 + step, image=False)])
        loss = lora(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    lora.eval()
    want = logits(lora, inputs)
    hf.peft.save_adapter(lora, tmp_path / "adapter")
    with open(tmp_path / "adapter" / "adapter_config.json") as f:
        assert json.load(f)["circlerope"]["age"] == "CM"

    base = transformers.AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
    # PEFT itself reads adapter_config.json and warns that it ignores "circlerope".
    with pytest.warns(UserWarning, match="circlerope"):
        again = hf.peft.load_adapter(base, tmp_path / "adapter").eval()
    torch.testing.assert_close(logits(again, inputs), want, rtol=0, atol=0)
    merged = again.merge_and_unload()
    assert hf.geometry(merged)["age"] == "CM"
    torch.testing.assert_close(logits(merged, inputs), want, rtol=1e-5, atol=1e-5)

    # Onto a base of another geometry (here unswitched, M-RoPE): refused, naming both.
    plain = make_model()
    with pytest.raises(ValueError, match=r"trained on the geometry AGE CM.*runs none \(M-RoPE"):
        hf.peft.load_adapter(plain, tmp_path / "adapter")
    hf.apply(plain, "circle")
    with pytest.raises(ValueError, match="runs circle"):
        hf.peft.load_adapter(plain, tmp_path / "adapter")


def test_apply_after_get_peft_model_switches_the_base_model():
    inputs = request()
    first = make_model()
    hf.apply(first, "circle")
    first = peft.get_peft_model(first, peft.LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False))
    torch.manual_seed(1)
    second = peft.get_peft_model(make_model(), peft.LoraConfig(r=4, target_modules=["q_proj"],
                                                               init_lora_weights=False))
    second.load_state_dict(first.state_dict())
    assert hf.apply(second, "circle") is second
    assert hf.geometry(second)["scheme"] == "circle"
    torch.testing.assert_close(logits(second.eval(), inputs), logits(first.eval(), inputs), rtol=0, atol=0)
    hf.restore(second)
    assert hf.geometry(second) is None


def test_static_cache_generate_equals_the_dynamic_cache():
    model = make_model()
    hf.apply(model, "circle", age="alternate")
    kwargs = dict(request(), max_new_tokens=4, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                  output_logits=True)
    dynamic = model.generate(**kwargs)
    static = model.generate(**kwargs, cache_implementation="static")
    assert torch.equal(static.sequences, dynamic.sequences)
    for a, b in zip(static.logits, dynamic.logits):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_regional_compile_of_the_text_model_equals_eager():
    """Each decoder layer compiled with fullgraph=True (so no graph break inside it), through
    AOTAutograd (aot_eager: the graphs torch.compile would hand inductor, without compiling
    kernels, which would take minutes on two cores)."""
    torch._dynamo.reset()
    model = make_model()
    hf.apply(model, "circle", age="alternate")
    inputs = request()
    want = logits(model, inputs)
    for layer in model.model.language_model.layers:
        layer.compile(fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(logits(model, inputs), want, rtol=1e-5, atol=1e-5)


def test_a_whole_model_compile_of_a_text_forward_has_no_graph_break():
    """torch.compile(fullgraph=True) of the whole switched model on a text prompt (backend eager:
    Dynamo's tracing, which is where a graph break would be): one graph, the eager logits."""
    torch._dynamo.reset()
    model = make_model()
    hf.apply(model, "circle", age="alternate")
    inputs = dict(input_ids=torch.tensor([[9, 8, 7, 6, 5, 4]]))
    want = logits(model, inputs)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    torch.testing.assert_close(logits(compiled, inputs), want, rtol=0, atol=0)


@pytest.mark.parametrize("model_type", hf.families.supported())
def test_every_family_saves_and_reloads_on_its_geometry_and_the_base_class_refuses_it(model_type, tmp_path):
    """A switched model of each family, saved: model_type "<family>_circlerope", reopened by
    AutoModelForImageTextToText on its geometry with the same logits; the family's own class
    refuses the checkpoint instead of running it as M-RoPE."""
    config = tiny_qwen.family_config(model_type, attn="eager")
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(config).eval()
    hf.apply(model, "circle", age="alternate")
    inputs = dict(input_ids=torch.tensor([[5, 6, 7, 8, 9, 10]]))
    want = logits(model, inputs)
    model.save_pretrained(tmp_path)
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["model_type"] == model_type + "_circlerope"
    again = transformers.AutoModelForImageTextToText.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert hf.geometry(again)["age"] == hf.geometry(model)["age"]
    torch.testing.assert_close(logits(again, inputs), want, rtol=0, atol=0)
    # A ValueError from the rotary (Cosmos3-Edge's config validation refuses the rope type before:
    # huggingface_hub's StrictDataclassClassValidationError, which names it too)
    with pytest.raises(Exception, match="circlerope"):
        type(model).from_pretrained(tmp_path)
