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
