"""The Hugging Face rotary formula in pure PyTorch: Qwen2_5_VLRotaryEmbedding +
apply_multimodal_rotary_pos_emb (chunked sections) and Qwen3-VL's apply_interleaved_mrope,
transcribed from transformers. The tests check the op against it; the speed comparison uses it
as the naive rotation."""

import torch


def hf_inv_freq(dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def hf_rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_cos_sin(position_ids, dim, theta, sections, layout):
    """Qwen2_5_VLRotaryEmbedding.forward + the section merge of
    apply_multimodal_rotary_pos_emb (chunked) or Qwen3-VL's apply_interleaved_mrope."""
    inv_freq = hf_inv_freq(dim, theta)
    inv_freq_expanded = inv_freq[None, None, :, None].float().expand(3, position_ids.shape[1], -1, 1)
    position_ids_expanded = position_ids[:, :, None, :].float()
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(2, 3)   # [3, B, S, dim/2]
    if layout == "chunked":
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        split = list(sections) * 2
        cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(split, dim=-1))], dim=-1)
        sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(split, dim=-1))], dim=-1)
        return cos, sin
    freqs_t = freqs[0].clone()
    for axis, offset in enumerate((1, 2), start=1):
        idx = slice(offset, sections[axis] * 3, 3)
        freqs_t[..., idx] = freqs[axis, ..., idx]
    emb = torch.cat((freqs_t, freqs_t), dim=-1)
    return emb.cos(), emb.sin()


def hf_rotate(model, angles, layout=None):
    """rotate(layer, q, k) for TinyVLM.hidden: the layer's geometry from the plan, HF's formula."""
    cfg = model.cfg
    layout = layout or model.arm.layout

    def rotate(layer, q, k):  # q, k [B, S, H, D]; HF works on [B, H, S, D]
        pos = angles.position_ids[model.plan.layer_scheme(layer)]
        cos, sin = hf_cos_sin(pos, cfg.head_dim, cfg.theta, cfg.sections, layout)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        q_embed = (q * cos) + (hf_rotate_half(q) * sin)
        k_embed = (k * cos) + (hf_rotate_half(k) * sin)
        return q_embed.transpose(1, 2), k_embed.transpose(1, 2)
    return rotate
