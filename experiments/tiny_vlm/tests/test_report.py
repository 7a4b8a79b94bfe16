"""The declared contrasts: paired by seed, only seeds where every arm of both sides finished,
outcomes as declared, Holm over the five."""

import pytest

from tiny_vlm import report, stats


def run(arm, seed, lookup=0.5, relation=0.5, count=1.0, gap_count=1.0, grid_count=1.0):
    acc = lambda **kw: {"accuracy": {"neighbour": 0.5, "lookup": lookup, "relation": relation, "count": count, **kw}}  # noqa: E731
    return {"arm": arm, "seed": seed, "splits": {
        "train": acc(), "gap-0": acc(), "gap-8": acc(count=gap_count),
        "grid-5x5": acc(count=grid_count), "grid-8x8": acc(count=grid_count - 0.1),
        "unseen-length": acc(), "question-before-image": acc()}}


def test_contrasts_pair_by_seed():
    results = []
    for seed in range(5):
        results.append(run("circle", seed, lookup=0.6 + 0.01 * seed, relation=0.4, gap_count=0.9, grid_count=0.99))
        results.append(run("mrope", seed, lookup=0.2, relation=0.3, gap_count=0.5 + 0.01 * seed, grid_count=0.8))
        results.append(run("age-alternate", seed, lookup=0.3, relation=0.3, grid_count=0.7))
    results.append(run("circle", 9, lookup=0.0))          # no mrope run on seed 9: not paired
    results.append({"arm": "mrope", "seed": 7, "interrupted": True})   # unfinished: ignored
    tests = report.contrasts(results)
    by = {d["key"]: d for d in tests["declared"]}
    c1 = by["C1"]
    assert c1["seeds"] == [0, 1, 2, 3, 4]
    assert c1["differences"] == pytest.approx([((0.6 + 0.01 * s + 0.4) - (0.2 + 0.3)) / 2 for s in range(5)])
    assert c1["p_sign_flip"] == 2 / 32 and c1["positive"] == 5
    assert by["C2"]["n"] == 0 and by["C2"]["p_holm"] is None     # arms not run
    # C3: the PTD = 0 side has circle only here, the other side mrope and age-alternate
    c3 = by["C3"]
    assert c3["plus"] == ["circle"] and c3["minus"] == ["mrope", "age-alternate"]
    assert c3["differences"] == pytest.approx([(0.99 + 0.89) / 2 - ((0.8 + 0.7) / 2 + (0.7 + 0.6) / 2) / 2] * 5)
    # C5 is the count gap shift: circle loses 0.1, mrope 0.5 - 0.01 s
    assert by["C5"]["differences"] == pytest.approx([-0.1 - (0.5 + 0.01 * s - 1.0) for s in range(5)])
    # Holm over the contrasts that could be tested
    ps = [d["p_sign_flip"] if d["n"] >= 2 else None for d in tests["declared"]]
    assert [d["p_holm"] for d in tests["declared"]] == stats.holm(ps)
    assert all(d["decided"] == (d["p_holm"] is not None and d["p_holm"] < 0.05) for d in tests["declared"])
    assert {e["pair"] for e in tests["exploratory"]} == {"C1", "C4", "C5"}


def test_steps_to_a_threshold():
    r = {"curve": [{"step": 100, "accuracy": {"lookup": 0.3}}, {"step": 200, "accuracy": {"lookup": 0.61}},
                   {"step": 300, "accuracy": {"lookup": 0.5}}]}
    assert report.steps_to(r, "lookup", 0.6) == 200
    assert report.steps_to(r, "lookup", 0.7) is None
