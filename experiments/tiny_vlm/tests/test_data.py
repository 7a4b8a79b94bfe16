"""The data generator: answers checked by an independent function, no position in the patch
features, balanced answers, splits as described, shard-independent generation."""

import random
from collections import Counter

import numpy as np
import pytest

from tiny_vlm import data
from tiny_vlm.cli import resolve

LAYOUT = data.Layout("train", ((6, 6), (8, 8), (6, 10)), questions=12)


def independent_answer(example: data.Example, q: data.Question) -> str:
    """Recomputes an answer from the sequence alone (patch features + question tokens), with
    numpy grids instead of the generator's Image: returns the answer's name."""
    h, w = example.grid
    first = example.image_start + 1
    colour = np.full((h, w), -1)
    shape = np.full((h, w), -1)
    for j in range(h * w):
        f = example.feats[first + j]
        if f[0] == data.OBJECT:
            colour[j // w, j % w] = f[1] - data.COLOUR0
            shape[j // w, j % w] = f[2] - data.SHAPE0
        else:
            assert f == (data.EMPTY,) + (data.PAD,) * (data.FEATURES - 1)
    name = [data.TOKEN_NAMES[t].rstrip("'") for t in q.tokens]

    def find(c):
        hits = np.argwhere(colour == data.COLOURS.index(c))
        assert len(hits) == 1, "questions name objects whose colour is unique"
        return hits[0]

    def colour_at(r, c):
        if 0 <= r < h and 0 <= c < w and colour[r, c] >= 0:
            return data.COLOURS[colour[r, c]]
        return "none"

    if name[0].startswith("Q:") and name[0][2:] in data.DIRECTIONS:
        assert len(name) == 2
        r, c = find(name[1])
        dr, dc = {"left": (0, -1), "right": (0, 1), "above": (-1, 0), "below": (1, 0)}[name[0][2:]]
        return colour_at(r + dr, c + dc)
    if name[0] == "Q:at":
        assert name[1].startswith("row") and name[2].startswith("col")
        return colour_at(int(name[1][3:]), int(name[2][3:]))
    if name[0] == "Q:where":
        assert len(name) == 3 and data.TOKEN_NAMES[q.tokens[2]].endswith("'")
        a, b = find(name[1]), find(name[2])
        assert a[0] != b[0] and a[1] != b[1], "relations are asked when rows and columns differ"
        return ("above" if a[0] < b[0] else "below") + "-" + ("left" if a[1] < b[1] else "right")
    if name[0] == "Q:count":
        return str(int((colour == data.COLOURS.index(name[1])).sum()))
    raise AssertionError(f"unknown question {name}")


@pytest.mark.parametrize("question_first", [False, True])
def test_every_answer_is_right(question_first):
    layout = data.Layout("x", ((6, 6), (8, 8), (6, 10), (8, 12)), questions=1 if question_first else 12,
                         question_first=question_first)
    seen = Counter()
    for i in range(300):
        e = data.make_example(random.Random(i), layout)
        for q, ask in zip(e.questions, e.ask):
            assert data.TOKEN_NAMES[q.answer] == independent_answer(e, q)
            assert e.tokens[ask] == data.ASK and q.answer not in e.tokens[e.image_start:]
            if not question_first:
                assert e.feats[ask - 1][:len(q.tokens)] == q.tokens
            seen[q.kind] += 1
    assert set(seen) == set(data.QUESTION_TYPES)


def test_the_checker_catches_a_wrong_answer():
    e = data.make_example(random.Random(5), LAYOUT)
    q = e.questions[0]
    wrong = next(a for a in (data.NONE, data.QUAD0, data.COLOUR0, data.COLOUR0 + 1, data.DIGIT0) if a != q.answer)
    assert data.TOKEN_NAMES[q.answer] == independent_answer(e, q)
    assert data.TOKEN_NAMES[wrong] != independent_answer(e, q)


def test_patch_features_carry_no_position():
    # Every patch's (token, colour, shape) is a function of its cell's content alone: the same
    # content gives the same features wherever it sits, and moving cells moves features.
    rng = random.Random(3)
    for _ in range(50):
        img = data.make_image(rng, 6, 10, (3, 8))
        feats = [data.cell_features(c) for c in img.cells]
        for cell, f in zip(img.cells, feats):
            assert f == data.cell_features(cell)
        assert len({f for c, f in zip(img.cells, feats) if c is None}) == 1  # every empty cell alike
        perm = list(range(len(img.cells)))
        rng.shuffle(perm)
        moved = data.Image(img.h, img.w, tuple(img.cells[p] for p in perm))
        assert [data.cell_features(c) for c in moved.cells] == [feats[p] for p in perm]
    # ...and the model has no position table: the token embedding, per-layer weights, norms.
    import re
    from tiny_vlm.arms import NAMED
    from tiny_vlm.model import ModelConfig, TinyVLM
    m = TinyVLM(ModelConfig(layers=2), NAMED["mrope"])
    for name, p in m.named_parameters():
        assert re.fullmatch(r"embed\.weight|norm\.weight|blocks\.\d\.(norm1|qkv|proj|norm2|gate_up|down)\.weight", name), name
    assert m.embed.weight.shape == (data.VOCAB_SIZE, m.cfg.width)


@pytest.mark.parametrize("kind", data.QUESTION_TYPES)
def test_answers_are_balanced(kind):
    counts = Counter()
    rng = random.Random(11)
    while sum(counts.values()) < 3000:
        img = data.make_image(rng, *rng.choice(LAYOUT.grids), (3, 8))
        q = data.balanced_question(rng, img, kind)
        if q is not None:
            counts[data.TOKEN_NAMES[q.answer]] += 1
    share = counts.most_common(1)[0][1] / sum(counts.values())
    assert share <= 1 / 3, (kind, counts)
    assert len(counts) >= 4, counts


def test_splits_differ_as_described():
    plan = resolve(["quick", "--train-grids", "12x12,16x16,12x20", "--eval-grid", "16x24"])
    ev = plan.configs[0].evals
    assert set(ev) == {"train", "long-prefix", "question-first", "unseen-grid"}
    for name, layout in ev.items():
        for i in range(40):
            e = data.make_example(random.Random(i), layout)
            vs = e.tokens.index(data.VS)
            filler = sum(1 for t in e.tokens[:vs] if data.FILLER0 <= t < data.FILLER0 + data.N_FILLER)
            if name == "unseen-grid":
                assert e.grid == (8, 12)
            else:
                assert e.grid in ((6, 6), (8, 8), (6, 10))
            lo, hi = (64, 128) if name == "long-prefix" else (0, 16)
            assert lo <= filler <= hi
            before = [t for t in e.tokens[:vs] if data.Q_DIR <= t < data.NONE]
            if name == "question-first":
                assert len(e.questions) == 1 and before == [e.questions[0].tokens[0]]
                assert e.ask[0] == e.tokens.index(data.VE) + 1
            else:
                assert before == [] and len(e.questions) == plan.configs[0].train.questions


def test_generation_is_shard_independent_and_seeded():
    full = data.make_examples(7, "train", 3, range(8), LAYOUT)
    shard = data.make_examples(7, "train", 3, range(4, 8), LAYOUT)
    assert [e.tokens for e in full[4:]] == [e.tokens for e in shard]
    again = data.make_examples(7, "train", 3, range(8), LAYOUT)
    assert [e.tokens for e in full] == [e.tokens for e in again]
    other = data.make_examples(8, "train", 3, range(8), LAYOUT)
    assert [e.tokens for e in full] != [e.tokens for e in other]


def test_a_single_question_type_never_hangs():
    # Regression: with only neighbour questions and 3 objects on 60 cells, most images have no
    # adjacent objects; the generator used to retry the same image forever.
    import signal

    # A hang is a busy loop: bounded by this process's CPU time (ITIMER_VIRTUAL), not by the
    # wall clock, which a loaded machine stretches. The 30 examples need ~0.02 CPU-s.
    def too_slow(signum, frame):
        raise TimeoutError("make_example did not return within 20 CPU-s")
    old = signal.signal(signal.SIGVTALRM, too_slow)
    signal.setitimer(signal.ITIMER_VIRTUAL, 20)
    try:
        layout = data.Layout("x", ((6, 10),), questions=6, objects=(3, 3), mix=(1, 0, 0, 0))
        for i in range(30):
            e = data.make_example(random.Random(i), layout)
            assert [q.kind for q in e.questions] == ["neighbour"] * 6
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)
