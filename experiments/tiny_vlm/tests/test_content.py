"""The content-only (Bayes) baseline against posteriors computed by hand on tiny grids."""

import random

import pytest

from tiny_vlm import content, data

RED, BLUE = (0, 0), (2, 0)          # red circle, blue circle: colours 0 and 2, one object each
R, B = data.COLOUR0 + 0, data.COLOUR0 + 2


def lookup(r, c):
    return data.Question("lookup", (data.Q_AT, data.ROW0 + r, data.COL0 + c), -1, (r, c))


def exact(questions, objs, h, w, needs):
    return content.posteriors(questions, data.placements(objs, h, w, needs))


def test_lookup_on_a_2x2_grid_is_the_class_prior():
    # Two objects on 2x2, no constraint: 12 placements. The answer classes are red, blue and
    # none; with two informative classes "none" gets min(1/4, 1/3) = 1/4, red and blue 3/8 each.
    # A lookup question with answer a is asked with P(class a) / (cells with answer a): 3/8 for a
    # red or blue cell, 1/4 / 2 = 1/8 for an empty one. Cell (0, 0) is red in 3 placements, blue
    # in 3, empty in 6: posterior red : blue : none = 3 * 3/8 : 3 * 3/8 : 6 * 1/8 = 3/8 : 3/8 : 1/4.
    (post,) = exact([lookup(0, 0)], [RED, BLUE], 2, 2, data.Needs())
    assert post == pytest.approx({R: 3 / 8, B: 3 / 8, data.NONE: 1 / 4})
    assert content.best(post) == R        # a tie: the lowest token id


def test_a_constraint_on_the_placement_makes_places_informative():
    # 1x3 grid, red and blue, a neighbour question asked: they must be side by side, so 4
    # placements: [R B _], [B R _], [_ R B], [_ B R]. The middle cell is never empty:
    # red : blue = 2 * 3/8 : 2 * 3/8, none 0. A corner (0, 0) holds red in 1 placement (3/8),
    # blue in 1 (3/8), nothing in 2 (1/4 / 1 empty cell each): 3/8 : 3/8 : 2/4 -> 0.3 / 0.3 / 0.4.
    needs = data.Needs(neighbour=True)
    middle, corner = exact([lookup(0, 1), lookup(0, 0)], [RED, BLUE], 1, 3, needs)
    assert middle == pytest.approx({R: 0.5, B: 0.5})
    assert corner == pytest.approx({R: 0.3, B: 0.3, data.NONE: 0.4})
    assert content.best(corner) == data.NONE


def test_that_a_question_was_asked_is_evidence():
    # "What is right of the red object?" on the same 1x3 grid. In each placement the neighbour
    # candidates are red's and blue's four directions (8 questions); answers red, blue or none.
    # [R B _]: right of red is blue, the only question answered blue: asked with 3/8.
    # [B R _]: right of red is empty: none, shared by 6 questions (1/4 / 6 = 1/24).
    # [_ R B]: blue again, 3/8. [_ B R]: off the grid, none, 1/24.
    # Posterior blue : none = 6/8 : 2/24 = 0.9 : 0.1 (the prior over the placements is 1/2).
    right_of_red = data.Question("neighbour", (data.Q_DIR + data.DIRECTIONS.index("right"), R), -1)
    (post,) = exact([right_of_red], [RED, BLUE], 1, 3, data.Needs(neighbour=True))
    assert post == pytest.approx({B: 0.9, data.NONE: 0.1})


def test_count_is_known_from_the_contents():
    count_red = data.Question("count", (data.Q_COUNT, R), -1)
    count_green = data.Question("count", (data.Q_COUNT, data.COLOUR0 + 1), -1)
    post = exact([count_red, count_green], [RED, (0, 1), BLUE], 2, 2, data.Needs())
    assert post == [{data.DIGIT0 + 2: 1.0}, {data.DIGIT0: 1.0}]


def test_monte_carlo_agrees_with_the_enumeration():
    needs = data.Needs(neighbour=True)
    qs = [lookup(0, 0), lookup(0, 1)]
    rng = random.Random(0)
    sampled = content.posteriors(qs, (data.place(rng, [RED, BLUE], 1, 3, needs)[0] for _ in range(4000)))
    for got, want in zip(sampled, exact(qs, [RED, BLUE], 1, 3, needs)):
        assert set(got) == set(want)
        assert all(abs(got[a] - want[a]) < 0.03 for a in want), (got, want)


def test_baseline_scores_the_bayes_answer():
    # On real sequences: every question scored once, count always right, the same numbers twice.
    layout = data.Layout("t", ((4, 4), (4, 6)), questions=8)
    examples = data.make_examples(3, layout.key(), 0, range(40), layout)
    b = content.baseline(examples, layout.key(), samples=32)
    assert b["accuracy"]["count"] == 1.0
    assert set(b["accuracy"]) == set(data.QUESTION_TYPES)
    assert sum(b["questions"].values()) == 40 * 8
    assert b == content.baseline(examples, layout.key(), samples=32)   # seeded
