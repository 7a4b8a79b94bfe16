"""Paired statistics against published textbook values."""

import pytest

from tiny_vlm import stats

# Student (1908) / Cushny and Peebles: extra hours of sleep, drug 2 minus drug 1, 10 patients.
# R: t.test(extra ~ group, data = sleep, paired = TRUE): t = 4.0621, df = 9, p-value = 0.002833,
# 95 percent confidence interval 0.7001142 2.4598858, mean difference 1.58.
SLEEP = [1.2, 2.4, 1.3, 1.3, 0.0, 1.0, 1.8, 0.8, 4.6, 1.4]

# Darwin's Zea mays, crossed minus self-fertilised heights in eighths of an inch, 15 pairs, as
# Fisher (The Design of Experiments, 1935, section 21) analysed them: the paired t is 2.148
# (p = 0.0497, two-sided, 14 df), and of the 2^15 = 32768 sign patterns 863 give a sum at least
# the observed 314, so the two-sided randomisation p is 1726 / 32768 = 0.05267.
DARWIN = [49, -67, 8, 16, 6, 23, 28, 41, 14, 29, 56, 24, 75, 60, -48]


def test_paired_t_on_students_sleep_data():
    r = stats.paired(SLEEP)
    assert r["n"] == 10 and r["mean"] == pytest.approx(1.58)
    assert r["sd"] == pytest.approx(1.229995, abs=1e-6)          # the sample SD (n - 1)
    assert r["t"] == pytest.approx(4.0621, abs=1e-4)
    assert r["p_t"] == pytest.approx(0.002833, abs=1e-6)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((0.7001142, 2.4598858), abs=1e-7)
    assert (r["positive"], r["negative"]) == (9, 0)
    # sign flips: all nine non-zero differences positive (the zero flips freely): 4 / 1024
    assert r["p_sign_flip"] == pytest.approx(4 / 1024)


def test_fishers_randomisation_test_on_darwins_data():
    r = stats.paired(DARWIN)
    assert r["p_sign_flip"] == 1726 / 32768
    assert r["t"] == pytest.approx(2.148, abs=1e-3)
    assert r["p_t"] == pytest.approx(0.0497, abs=1e-4)


def test_t_distribution():
    assert stats.t_quantile(0.975, 9) == pytest.approx(2.262157, abs=1e-6)
    assert stats.t_quantile(0.975, 11) == pytest.approx(2.200985, abs=1e-6)
    assert stats.t_two_sided(2.0, 1) == pytest.approx(0.2951672, abs=1e-7)    # 1 - 2 atan(2) / pi
    assert stats.betainc(3.0, 3.0, 0.5) == pytest.approx(0.5)
    assert stats.betainc(1.0, 1.0, 0.3) == pytest.approx(0.3)                # the uniform


def test_small_and_degenerate_samples():
    assert stats.paired([])["mean"] is None
    one = stats.paired([0.2])
    assert one["mean"] == 0.2 and one["sd"] is None and one["p_sign_flip"] == 1.0
    three = stats.paired([0.1, 0.2, 0.3])
    assert three["p_sign_flip"] == 2 / 8          # the smallest p three seeds allow
    same = stats.paired([0.1, 0.1, 0.1, 0.1])
    assert same["sd"] == 0 and same["p_t"] == 0.0 and same["p_sign_flip"] == 2 / 16


def test_holm():
    # Holm (1979): sorted p times (m, m-1, ...), made monotone.
    assert stats.holm([0.01, 0.04, 0.03, None, 0.005]) == pytest.approx([0.03, 0.06, 0.06, None, 0.02])
    assert stats.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
