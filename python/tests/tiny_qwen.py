"""The tiny Qwen2-VL, Qwen2.5-VL and Qwen3-VL configs the tests build transformers models from
(random weights, nothing downloaded), for the transformers this process imports.

Each release keeps the settings in its own place: the rope settings in rope_scaling and
rope_theta before 5.0 and in rope_parameters from 5.0, the text settings in text_config where
the release's config class has one (4.52 on) and on the config itself before. config() writes
them where the installed release reads them; the tests pass what they vary (sizes, token ids,
the rotary settings, the attention implementation).
"""

import re

# Qwen's own token ids, and its vocabulary size.
QWEN_TOKENS = {"vision_start_token_id": 151652, "vision_end_token_id": 151653, "image_token_id": 151655,
               "video_token_id": 151656}
QWEN_VOCAB = 151936


def version() -> tuple:
    """(major, minor) of the installed transformers."""
    import transformers  # noqa: PLC0415 (imported where a test has it; this module is imported first)

    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", transformers.__version__).groups())


def config(model_type: str = "qwen2_5_vl", *, tokens: dict = None, vocab: int = QWEN_VOCAB, hidden: int = 64,
           heads: int = 4, kv_heads: int = 2, head_dim: int = None, layers: int = 2, sections=(2, 3, 3),
           theta: float = 1e6, patch: int = 14, window: int = 28, max_positions: int = 4096, special: dict = None,
           attn: str = None):
    """A transformers config of `model_type` (qwen2_vl, qwen2_5_vl, qwen3_vl): a text model of
    `layers` layers of width `hidden` (intermediate 2 * hidden, `heads` attention heads of
    head_dim, by default hidden / heads, `kv_heads` key-value heads), M-RoPE `sections` and
    `theta` (Qwen3-VL's interleaved), a one-block vision tower of `patch`-pixel patches (window
    `window` for Qwen2.5-VL's window attention) merged 2 x 2, Qwen's token ids or `tokens`
    (vision_start/vision_end/image/video_token_id), `special` token ids of the text config
    (bos_token_id, eos_token_id, pad_token_id), and `attn` as its attention implementation."""
    import transformers  # noqa: PLC0415

    tokens = dict(QWEN_TOKENS, **(tokens or {}))
    text = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                **(special or {}))
    if head_dim is not None or model_type == "qwen3_vl":
        text["head_dim"] = hidden // heads if head_dim is None else head_dim
    # Qwen2-VL and Qwen2.5-VL before 5.0 name their rope type "mrope" (read as the default type)
    rope = {"type": "mrope"} if version() < (5, 0) and model_type != "qwen3_vl" else {"rope_type": "default"}
    rope["mrope_section"] = list(sections)
    if model_type == "qwen3_vl":
        rope["mrope_interleaved"] = True
        cls = transformers.Qwen3VLConfig
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=hidden,
                      patch_size=patch, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
                      num_position_embeddings=64, deepstack_visual_indexes=[0])
    elif model_type == "qwen2_vl":
        cls = transformers.Qwen2VLConfig
        vision = dict(depth=1, embed_dim=32, hidden_size=hidden, num_heads=2, mlp_ratio=2, spatial_merge_size=2,
                      patch_size=patch, temporal_patch_size=2, in_channels=3)
    else:
        cls = transformers.Qwen2_5_VLConfig
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=hidden,
                      spatial_merge_size=2, patch_size=patch, temporal_patch_size=2, in_channels=3,
                      tokens_per_second=2, window_size=window, fullatt_block_indexes=[0])
    if version() >= (5, 0):
        text["rope_parameters"] = dict(rope, rope_theta=theta)
    else:
        text["rope_scaling"], text["rope_theta"] = rope, theta
    if "text_config" in (getattr(cls, "sub_configs", None) or {}):
        cfg = cls(text_config=text, vision_config=vision, **tokens)
    else:  # before 4.52: the text settings on the config itself
        cfg = cls(vision_config=vision, **text, **tokens)
    if attn is not None:
        cfg._attn_implementation = attn
    return cfg


# ------------------------------------------------------------------ families ---

# Token ids of the tiny family models (in a vocabulary of FAMILY_VOCAB): the Qwen families open a
# block with vision_start; GLM's with image_start, and wrap a video's frames in video_start / end.
FAMILY_VOCAB = 300
FAMILY_TOKENS = {"vision_start_token_id": 290, "vision_end_token_id": 291, "image_token_id": 292,
                 "video_token_id": 293}
GLM_TOKENS = {"image_start_token_id": 290, "image_end_token_id": 291, "image_token_id": 292,
              "video_token_id": 293, "video_start_token_id": 294, "video_end_token_id": 295}

# Small values for whichever of these fields a family's text and vision configs have.
_TEXT = dict(vocab_size=FAMILY_VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
             # mixture of experts
             num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
             shared_expert_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
             decoder_sparse_step=1, mlp_only_layers=[],
             # Qwen3.5's linear attention
             linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
             linear_num_value_heads=4,
             # Qwen4-Exp's n-gram embeddings
             ple_embed_dim=64, heads_per_ngram=2, ngram_vocab_size_base=256, make_ngram_vocab_size_divisible_by=8,
             split_ngram_parts=4,
             # Qwen4-Exp's token indexer
             indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=64, indexer_compress_ratio=4)
_VISION = dict(depth=1, num_hidden_layers=1, hidden_size=32, embed_dim=32, intermediate_size=64, num_heads=2,
               num_attention_heads=2, patch_size=2, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
               num_channels=3, num_position_embeddings=64, deepstack_visual_indexes=[0], image_size=8, num_patches=16,
               tokens_per_second=2, window_size=4, fullatt_block_indexes=[0], mlp_ratio=2)


def _fields(config_class) -> set:
    """The names a config class takes (its dataclass fields, or its __init__'s parameters)."""
    import dataclasses  # noqa: PLC0415
    import inspect  # noqa: PLC0415

    names = {f.name for f in dataclasses.fields(config_class)} if dataclasses.is_dataclass(config_class) else set()
    return names | set(inspect.signature(config_class.__init__).parameters)


def family_config(model_type: str, *, layers: int = 2, sections=(2, 3, 3), theta: float = 1e4, attn: str = None,
                  layer_types: list = None):
    """A tiny random config of any family circlerope.hf switches (model_type), built from that
    family's own config class: a text model of `layers` layers (4 for a hybrid, below, or
    `layer_types` as given) of width 64 (4 heads of 16, M-RoPE `sections` over the rotary half,
    `theta`), a one-layer vision tower of 2-pixel patches merged 2 x 2, the ids of FAMILY_TOKENS
    (GLM_TOKENS for GLM), bos 1, eos 2, pad 0."""
    import transformers  # noqa: PLC0415

    config_class = transformers.CONFIG_MAPPING[model_type]
    default = config_class()
    text_class, vision_class = type(default.text_config), type(default.vision_config)
    text_fields, vision_fields = _fields(text_class), _fields(vision_class)
    text = {k: v for k, v in _TEXT.items() if k in text_fields}
    vision = {k: v for k, v in _VISION.items() if k in vision_fields}
    if "out_hidden_size" in vision_fields:
        vision["out_hidden_size"] = text["hidden_size"]
    text.update(num_hidden_layers=layers, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    kinds = list(dict.fromkeys(getattr(default.text_config, "layer_types", None) or []))
    if len(kinds) == 2:
        # A hybrid (Qwen3.5: linear attention, which takes no positions, and full attention):
        # 4 layers, linear, full, full, linear, so that every AGE plan of alternating
        # geometries puts each geometry on an attention layer.
        text.update(num_hidden_layers=4, layer_types=[kinds[0], kinds[1], kinds[1], kinds[0]])
    elif kinds:
        text["layer_types"] = kinds[:1] * layers
    if layer_types is not None:  # as given (a hybrid's real order)
        text.update(num_hidden_layers=len(layer_types), layer_types=list(layer_types))
    params = dict(getattr(default.text_config, "rope_parameters", None) or {})
    rope = {"rope_type": "default", "rope_theta": theta, "mrope_section": list(sections)}
    partial = params.get("partial_rotary_factor")
    if partial is not None:  # the rotary half of a 16-wide head is 8 * partial: 2 sections on a quarter
        rope["partial_rotary_factor"] = 1.0
    if "mrope_interleaved" in params or model_type in ("qwen3_vl", "qwen3_vl_moe"):
        rope["mrope_interleaved"] = True
    # Cohere Compass keeps one set of rope parameters per layer type
    per_type = model_type == "cohere_compass"
    text["rope_parameters"] = {kind: dict(rope) for kind in set(text["layer_types"])} if per_type else rope
    glm = "image_start_token_id" in _fields(config_class)
    tokens = dict(GLM_TOKENS if glm else FAMILY_TOKENS)
    top = {"projector_hidden_size": 64} if "projector_hidden_size" in _fields(config_class) else {}  # Cosmos3-Edge
    cfg = config_class(text_config=text, vision_config=vision, **tokens, **top)
    if attn is not None:
        cfg._attn_implementation = attn
    return cfg


def pixel_rows(config, patches: int, generator=None):
    """Random pixels of `patches` patches as the family's vision tower takes them: one row of
    channels x temporal patch x patch^2 values per patch (Qwen's and GLM's towers), [patches,
    channels, patch, patch] (PaddleOCR-VL's SigLIP), or channels x patch^2 per row (Cosmos3-Edge)."""
    import torch  # noqa: PLC0415

    vision = config.vision_config
    channels = getattr(vision, "in_channels", None) or getattr(vision, "num_channels", 3)
    patch, temporal = vision.patch_size, getattr(vision, "temporal_patch_size", None) or 1
    if config.model_type == "paddleocr_vl":
        return torch.randn(patches, channels, patch, patch, generator=generator)
    return torch.randn(patches, channels * temporal * patch * patch, generator=generator)
