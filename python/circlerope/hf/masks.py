"""circlerope.hf.masks: the 2-D [batch, seq] attention mask of a prompt, where transformers hands
a switched model's forward its masks already built.

A switched model places its prompt tokens from the 2-D mask (which tokens are real). generate()
with a static cache (cache_implementation="static", and transformers' compiled decoding, which
uses it) builds the attention masks before the model's forward and passes them as a dict, one
4-D mask per attention type ({"full_attention": [B, 1, S, K], ...}). The 2-D mask is then read
back, in this order:
1. the mask get_rope_index was given for the same input_ids (transformers 5 calls it before the
   first forward of a generate() with images or videos): exactly the mask transformers placed the
   prompt with;
2. else from the dict's full-attention mask: key j of row b is real where the last query of the
   prompt may attend to it. transformers' masks are causal masks combined with the padding mask
   on the keys, so the last query sees every real key of the prompt and no padding, whether the
   batch is padded on the left or on the right (a pad query masks its own key too). A None entry
   is transformers' "no mask needed": no padding.
A 4-D mask a caller passes itself (a tensor, not generate()'s dict) is not read: the switch
refuses it, as before, naming the 2-D mask it needs.
"""

from __future__ import annotations

from typing import Optional

import torch

Tensor = torch.Tensor


def prompt_mask(mask, input_ids: Tensor, computed: Optional[dict]):
    """The 2-D mask of a prefill of input_ids [B, S] whose attention_mask is `mask`: `mask`
    itself unless it is a dict of built masks (then as the module docstring says, or `mask`
    unchanged where the dict holds no mask of that shape, for the caller to refuse)."""
    if not isinstance(mask, dict):
        return mask
    if computed is not None and computed.get("input_ids") is not None:
        ids = computed["input_ids"]
        if ids.shape == input_ids.shape and torch.equal(ids, input_ids.to(ids.device)):
            return computed["mask"]
    if not mask:
        return mask
    built = mask.get("full_attention", next(iter(mask.values())))
    if built is None:
        return None
    b, s = int(input_ids.size(0)), int(input_ids.size(1))
    if not isinstance(built, Tensor) or built.dim() != 4 or built.size(0) != b or built.size(2) != s \
            or built.size(3) < s:
        return mask
    last = built[:, 0, s - 1, :s]
    real = last if last.dtype == torch.bool else last == 0
    return real.to(torch.int64)
