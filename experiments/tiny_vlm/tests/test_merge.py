"""tiny_vlm.merge: the runs of one plan, finished by separate drivers (each on some of the
seeds), give the report one driver would have written; a folder of another plan is refused."""

import json
import subprocess
import sys

import pytest

from tiny_vlm import merge


def _split(src, dst, seeds, seed_text):
    doc = json.loads((src / "results.json").read_text())
    doc["runs"] = [r for r in doc["runs"] if r["seed"] in seeds]
    doc["meta"]["settings"]["seeds"] = seed_text
    dst.mkdir()
    (dst / "results.json").write_text(json.dumps(doc))


def test_merged_halves_give_the_whole_runs_report(tmp_path, env):
    whole = tmp_path / "whole"
    p = subprocess.run([sys.executable, "-m", "tiny_vlm", "micro", "--seeds", "0,1", "--workers", "1", "--no-plots",
                        "--no-checkpoints", "--out", str(whole)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    _split(whole, tmp_path / "a", {0}, "0,")
    _split(whole, tmp_path / "b", {1}, "1,")
    merge.merge(str(tmp_path / "m"), [str(tmp_path / "a"), str(tmp_path / "b")], ["micro", "--seeds", "0,1"])
    a, b = (json.loads((d / "results.json").read_text()) for d in (whole, tmp_path / "m"))
    assert b["runs"] == a["runs"] and b["contrasts"] == a["contrasts"] and b["summary"] == a["summary"]
    assert b["meta"]["complete"] and [m["folder"] for m in b["meta"]["merged_from"]] == [
        str(tmp_path / "a"), str(tmp_path / "b")]
    # half of the plan: incomplete, and says which runs are missing
    merge.merge(str(tmp_path / "h"), [str(tmp_path / "a")], ["micro", "--seeds", "0,1"])
    h = json.loads((tmp_path / "h" / "results.json").read_text())
    assert not h["meta"]["complete"] and h["meta"]["not_run"] == ["mrope/s1", "circle/s1"]
    # a folder of another plan (other steps) is refused, naming what differs
    with pytest.raises(merge.InputError, match="differ from the plan's in steps"):
        merge.merge(str(tmp_path / "x"), [str(tmp_path / "a")], ["micro", "--seeds", "0,1", "--steps", "5"])
