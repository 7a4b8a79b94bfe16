"""Run by run_consumer_test.cmake against the package installed into a scratch prefix."""
import circlerope
import torch

position_ids, _ = circlerope.get_rope_index(torch.tensor([[1, 2, 3]]))
q = torch.ones(1, 1, 3, 128)
rotated, _ = circlerope.apply_rotary(q, q, circlerope.rotary_table(position_ids))
assert rotated.shape == q.shape
print("python consumer ok:", circlerope.__file__)
