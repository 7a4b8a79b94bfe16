"""python -m tiny_vlm.merge OUT DIR [DIR ...] --argv PRESET [OPTIONS]: one results.json (and its
report) from the finished runs of several output folders of one plan, run as separate drivers
(for example seeds 13-20 in one and 21-24 in another, at the same time on a machine with spare
cores).

Every folder's settings must be the plan's except for the seeds (and the worker count), and each
of its runs a run of the plan; a run is taken once (the first folder that finished it), an
interrupted or failed one never. The content baseline is the first folder's (it depends on the
splits and the evaluation seed only: the folders' baselines must agree). `meta` says it was
merged: `merged_from` keeps each folder's own meta, `wall_seconds` runs from the first start to
the last end, `complete` says whether every run of the plan is there. The runs' numbers are not
touched. A bad folder exits with one line, code 2."""

from __future__ import annotations

import datetime
import json
import os
import sys
from typing import List

from . import report
from .limits import InputError
from .plan import Parser, resolve

# Settings that may differ between the merged folders.
FREE = ("seeds", "workers", "threads")


def _load(folder: str) -> dict:
    """A driver's results.json, as report.load_results reads it, but with the Infinity a driver
    of an earlier version wrote for a paired t of a constant difference (report.json_safe): the
    contrasts and the summary are computed again, and a run's own numbers must be finite."""
    path = os.path.join(folder, "results.json")
    try:
        return report.load_results(folder)
    except InputError as e:
        if "Infinity" not in str(e) or not os.path.exists(path):
            raise
    with open(path) as f:
        doc = json.load(f)
    for r in doc.get("runs", []):
        if json.dumps(r) != json.dumps(report.json_safe(r)):
            raise InputError(f"{path}: run {r.get('arm')}/s{r.get('seed')} holds a number JSON does not allow")
    return doc


def merge(out: str, folders: List[str], argv: List[str]) -> List[str]:
    plan = resolve(list(argv) + ["--out", out])
    want = {(c.arm.name, c.seed): i for i, c in enumerate(plan.configs)}
    runs, metas, content = {}, [], None
    for folder in folders:
        doc = _load(folder)
        meta = doc["meta"]
        theirs = {k: v for k, v in meta["settings"].items() if k not in FREE + ("secondary_seed_list",)}
        ours = {k: v for k, v in plan.settings.items() if k not in FREE + ("secondary_seed_list",)}
        if theirs != ours:
            diff = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
            raise InputError(f"{folder}: its settings differ from the plan's in {', '.join(diff)}")
        if content is None:
            content = doc.get("content_baseline") or {}
        elif doc.get("content_baseline") and doc["content_baseline"] != content:
            raise InputError(f"{folder}: its content baseline differs from {folders[0]}'s")
        for r in doc["runs"]:
            key = (r.get("arm"), r.get("seed"))
            if key not in want:
                raise InputError(f"{folder}: run {key[0]}/s{key[1]} is not a run of the plan")
            if "splits" in r and not r.get("interrupted") and key not in runs:
                runs[key] = r
        metas.append({"folder": folder, **{k: meta[k] for k in meta if k != "settings"}})
    starts = [datetime.datetime.fromisoformat(m["started"]) for m in metas]
    ends = [s + datetime.timedelta(seconds=m["wall_seconds"]) for s, m in zip(starts, metas)]
    names = [f"{c.arm.name}/s{c.seed}" for c in plan.configs]
    missing = [names[i] for k, i in sorted(want.items(), key=lambda x: x[1]) if k not in runs]
    meta = {"preset": plan.preset, "argv": list(argv), "settings": plan.settings, "complete": not missing,
            "interrupted": any(m["interrupted"] for m in metas),
            "failed": [f for m in metas for f in m["failed"]], "not_run": missing,
            "started": min(starts).isoformat(timespec="seconds"),
            "wall_seconds": (max(ends) - min(starts)).total_seconds(),
            "machine_start": metas[0]["machine_start"], "machine_end": metas[-1]["machine_end"],
            "git": metas[0]["git"], "torch": metas[0]["torch"], "distributed_world": 1,
            "workers": sum(m["workers"] or 0 for m in metas), "threads": metas[0]["threads"],
            "merged_from": metas}
    ordered = [runs[k] for k, _ in sorted(want.items(), key=lambda x: x[1]) if k in runs]
    return report.write(plan, ordered, meta, content, plots=True)


def main(argv=None) -> int:
    p = Parser(prog="tiny_vlm.merge")
    p.add_argument("out", help="the output folder of the merged results")
    p.add_argument("folders", nargs="+", help="output folders of the plan's drivers")
    p.add_argument("--argv", required=True, help="the plan, as one string: 'v3' or 'v3 --steps 700'")
    try:
        a = p.parse_args(argv)
        os.makedirs(a.out, exist_ok=True)
        paths = merge(a.out, a.folders, a.argv.split())
    except (InputError, FileNotFoundError) as e:
        print(f"tiny_vlm.merge: error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
