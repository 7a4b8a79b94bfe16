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


def run3(arm, seed, lookup=0.5, relation=0.5, count=1.0, far=None, long_count=1.0, side_count=1.0, gaps=None):
    """A v3 run: gap splits 0/4/8/12 (gaps: {k: (lookup, relation)}), unseen-gap-0/20 (far:
    (lookup, relation, count) at gap 20), the 6x5, 4x8, 8x4 grids (long_count on the two long
    ones, side_count on 6x5)."""
    acc = lambda **kw: {"accuracy": {"neighbour": 0.5, "lookup": lookup, "relation": relation, "count": count, **kw}}  # noqa: E731
    splits = {"train": acc()}
    for k in (0, 4, 8, 12):
        lo, re = (gaps or {}).get(k, (lookup, relation))
        splits[f"gap-{k}"] = acc(lookup=lo, relation=re)
    splits["unseen-gap-0"] = acc()
    if far is not None:
        splits["unseen-gap-20"] = acc(lookup=far[0], relation=far[1], count=far[2])
    splits.update({"grid-6x5": acc(count=side_count), "grid-4x8": acc(count=long_count),
                   "grid-8x4": acc(count=long_count - 0.1), "grid-8x8": acc(count=0.2)})
    return {"arm": arm, "seed": seed, "splits": splits}


def test_v3_outcomes_by_hand():
    r = run3("circle", 0, gaps={0: (0.9, 0.5), 4: (0.7, 0.5), 8: (0.5, 0.3), 12: (0.3, 0.1)},
             far=(0.25, 0.35, 0.6), long_count=0.8, side_count=0.95)
    # spatial over the trained gaps: ((0.9+0.5) + (0.7+0.5) + (0.5+0.3) + (0.3+0.1)) / 8 = 0.475
    assert report.outcome(r, "spatial-gaps") == pytest.approx(0.475)
    assert report.outcome(r, "spatial-unseen-gap") == pytest.approx(0.30)
    assert report.outcome(r, "count-unseen-gap") == pytest.approx(0.6)
    # count on 4x8 and 8x4 (0.8, 0.7) minus on 6x5 (0.95); 8x8 takes no part
    assert report.outcome(r, "count-long-side") == pytest.approx(0.75 - 0.95)
    # a run without the unseen gap has no value there
    assert report.outcome(run3("circle", 0), "count-unseen-gap") is None


def test_v3_contrasts_and_holm_over_the_declared_set_by_hand():
    """Six seeds. P1a: circle - mrope spatial-gaps = 0.1, 0.2, ..., 0.6 (all positive: of the 2^6
    sign patterns only all + and all - reach the sum, p = 2/64); P2b the same on count at the
    unseen gap; every other contrast 0 (p = 1). Holm over the 18 declared: the two smallest
    p get 18 x 2/64 = 0.5625 (and 17 x 2/64, raised to the running maximum), the rest 1."""
    results = []
    for s in range(6):
        d = 0.1 * (s + 1)
        for arm in ("circle", "circle-small"):     # P4a-c compare these two: 0
            results.append(run3(arm, s, lookup=0.2 + d, relation=0.2 + d, far=(0.3, 0.3, 0.5 + d / 2)))
        for arm in ("mrope", "mrope-spread"):
            results.append(run3(arm, s, lookup=0.2, relation=0.2, far=(0.3, 0.3, 0.5)))
        for arm in ("circle-interleaved", "mrope-interleaved", "mrope-patchpos", "circle-patchpos"):
            results.append(run3(arm, s, far=(0.3, 0.3, 0.5)))
    tests = report.contrasts(results, "v3")
    by = {d["key"]: d for d in tests["declared"]}
    assert len(by) == 18 and tests["design"] == "v3"
    p1 = by["P1a"]
    assert p1["differences"] == pytest.approx([0.1 * (s + 1) for s in range(6)])
    assert p1["mean"] == pytest.approx(0.35) and p1["p_sign_flip"] == 2 / 64
    # sample SD of 0.1..0.6: sqrt(0.175 / 5) = 0.18708; t = 0.35 / (0.18708 / sqrt 6) = 4.5826
    assert p1["sd"] == pytest.approx(0.187083, abs=1e-6) and p1["t"] == pytest.approx(4.582576, abs=1e-6)
    # 95% interval: t(0.975, 5) = 2.570582; 0.35 +- 2.570582 x 0.076376
    assert (p1["ci_low"], p1["ci_high"]) == pytest.approx((0.153669, 0.546331), abs=1e-6)
    assert by["P2b"]["differences"] == pytest.approx([0.05 * (s + 1) for s in range(6)])
    assert by["P1a"]["p_holm"] == pytest.approx(18 * 2 / 64) and by["P2b"]["p_holm"] == pytest.approx(18 * 2 / 64)
    others = [d for k, d in by.items() if k not in ("P1a", "P2b")]
    assert all(d["p_sign_flip"] == 1.0 and d["p_holm"] == 1.0 and not d["decided"] for d in others)
    assert not by["P1a"]["decided"]          # 0.5625: six seeds cannot decide 18 contrasts
    # the pairs beside the declared ones, uncorrected
    assert {e["pair"] for e in tests["exploratory"] if e["pair"].startswith("E")} == {
        "E1: circle − mrope-spread", "E2: circle-small − mrope", "E3: mrope-patchpos − mrope",
        "E4: circle-patchpos − circle"}


def test_v3_steps_to_threshold_beside_the_final_outcomes_by_hand():
    """The v3 headline table: each arm's declared outcomes (mean ± SD over seeds) and, beside
    them, the median step at which its curve reached each threshold over the runs that did."""
    curves = {0: [(100, 0.3, 0.5), (200, 0.65, 0.95), (300, 0.7, 0.95)],      # lookup 60% at 200, count 90% at 200
              1: [(100, 0.62, 0.91), (200, 0.7, 0.95), (300, 0.7, 0.95)],     # both at 100
              2: [(100, 0.2, 0.5), (200, 0.3, 0.8), (300, 0.4, 0.92)]}        # lookup never, count at 300
    results = []
    for s, curve in curves.items():
        r = run3("circle", s, lookup=0.4 + 0.1 * s, relation=0.4 + 0.1 * s)
        r["steps"] = 300
        r["curve"] = [{"step": st, "accuracy": {"neighbour": 0.0, "lookup": lo, "relation": 0.0, "count": c}}
                      for st, lo, c in curve]
        results.append(r)
    agg = {"circle": {"steps_to": {}}}
    for kind, t in report.THRESHOLDS.items():
        hit = sorted(x for x in (report.steps_to(r, kind, t) for r in results) if x is not None)
        agg["circle"]["steps_to"][kind] = {"threshold": t, "reached": len(hit), "runs": 3,
                                           "median": report.statistics.median(hit) if hit else None, "steps": 300}
    assert agg["circle"]["steps_to"]["lookup"]["median"] == 150          # median of 100, 200
    assert agg["circle"]["steps_to"]["count"]["median"] == 200           # median of 100, 200, 300
    row = [line for line in report._headline_lines(results, agg, ["circle"]) if line.startswith("| circle")]
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    # spatial-gaps per seed: 0.4, 0.5, 0.6 -> 50.0 ± 10.0; count-long-side (1.0 + 0.9) / 2 - 1.0 on
    # every seed
    assert cells[:2] == ["circle", "50.0 ± 10.0"] and cells[4] == "-5.0 ± 0.0"
    # lookup 150 (2 of 3 runs), relation never (0/3: "> 300"), count 200 (3/3)
    assert cells[5:] == ["150 (2/3)", "> 300 (0/3)", "200 (3/3)"]


def test_a_constant_difference_is_written_as_json():
    """Every seed's difference the same: the paired t is ±inf (stats.paired), which JSON cannot
    hold; results.json gets null there and reads back (files.read_json refuses Infinity)."""
    import json
    d = stats.paired([0.5, 0.5, 0.5])
    assert d["t"] == float("inf") and d["p_t"] == 0.0
    safe = report.json_safe({"contrasts": [d], "nan": float("nan"), "runs": [{"x": (1.0, -float("inf"))}]})
    assert safe["contrasts"][0]["t"] is None and safe["contrasts"][0]["mean"] == 0.5
    assert safe["nan"] is None and safe["runs"] == [{"x": [1.0, None]}]
    json.dumps(safe, allow_nan=False)
