"""tiny_vlm: a small vision-language model trained with each rotary geometry of circlerope.

Synthetic "images" (grids of coloured shapes) whose patch embeddings carry no position, so
every spatial answer must come through the rotary positions. See docs/experiment.md.

    PYTHONPATH=build/release/python:experiments .venv/bin/python -m tiny_vlm quick
"""
