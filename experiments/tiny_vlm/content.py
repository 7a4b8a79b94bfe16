"""The content-only baseline: the best a predictor can score that knows the question and the
image's contents (which objects, how many empty cells, the grid) but not where anything is.

This is what a model without any position inside the image (`unordered`) can reach at most, so
it is the floor a spatial accuracy has to clear; the majority answer is a lower one.

For a question q and contents M, the Bayes predictor answers argmax_a P(a | q, M), with

    P(a | q, M)  proportional to  sum over placements L of M:  P(L | M) P(q | L) [answer of q in L = a]

P(L | M) is uniform over the placements that allow the sequence's question types (data.place
draws exactly so), and P(q | L) is the probability that data.balanced_question asks q of L (the
answer class first, then a question with that answer): that a question was asked says something
about the placement. The sum runs over every placement (data.placements, tiny grids) or over
placements drawn by data.place (a Monte Carlo estimate; SAMPLES per sequence).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Sequence

from . import data

SAMPLES = 256


def posteriors(questions: Sequence[data.Question], images: Iterable[data.Image]) -> List[Dict[int, float]]:
    """P(answer | question, contents) for each question (all about the same contents), from
    equally likely placements `images` of those contents. A question that no placement could
    ask gets an empty dict."""
    kinds = {q.kind for q in questions} - {"lookup"}
    acc: List[Dict[int, float]] = [defaultdict(float) for _ in questions]
    for img in images:
        probs = {kind: data.question_probabilities(img, kind) for kind in kinds}
        for a, q in zip(acc, questions):
            hit = data.lookup_probability(img, q) if q.kind == "lookup" else probs[q.kind].get(q.tokens)
            if hit is not None:
                a[hit[0]] += hit[1]
    out = []
    for a in acc:
        total = sum(a.values())
        out.append({k: v / total for k, v in a.items()} if total > 0 else {})
    return out


def best(posterior: Dict[int, float]) -> Optional[int]:
    """The Bayes answer: the most probable, ties to the lowest token id (deterministic)."""
    return min(posterior, key=lambda a: (-posterior[a], a)) if posterior else None


def example_posteriors(e: data.Example, rng: random.Random, samples: int = SAMPLES) -> List[Dict[int, float]]:
    """Monte Carlo posteriors of an example's questions: `samples` placements of its contents."""
    objs = e.image.objects
    h, w = e.grid
    return posteriors(e.questions, (data.place(rng, objs, h, w, e.needs)[0] for _ in range(samples)))


def baseline(examples: Sequence[data.Example], stream: str, samples: int = SAMPLES) -> dict:
    """The content-only predictor on `examples`, per question type: its answers scored against
    the true ones, as a model is scored ("accuracy"). (Its own mean probability of being right
    would overstate it: the maximum of Monte Carlo posteriors is biased upwards.)"""
    hits: Dict[str, List[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        rng = random.Random(f"content/{stream}/{i}")
        for q, post in zip(e.questions, example_posteriors(e, rng, samples)):
            hits[q.kind].append(int(best(post) == q.answer))
    return {"accuracy": {k: sum(v) / len(v) for k, v in hits.items()},
            "questions": {k: len(v) for k, v in hits.items()}, "samples": samples}
