"""results.json, results.md and the PNG plots."""

from __future__ import annotations

import json
import math
import os
import statistics
import warnings
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

from . import data

SPLIT_ORDER = ("train", "long-prefix", "question-first", "unseen-grid")


def _ms(xs: Sequence[float]) -> tuple:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return (None, None, 0)
    return (statistics.fmean(xs), statistics.pstdev(xs) if len(xs) > 1 else 0.0, len(xs))


def _fmt(m: tuple, pct: bool = True) -> str:
    mean, std, n = m
    if mean is None:
        return "–"
    if pct:
        return f"{100 * mean:.1f}" + (f" ± {100 * std:.1f}" if n > 1 else "")
    return f"{mean:.4f}" + (f" ± {std:.4f}" if n > 1 else "")


def by_arm(results: List[dict]) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = defaultdict(list)
    for r in results:
        out[r["arm"]].append(r)
    return out


def aggregate(results: List[dict]) -> dict:
    """Mean / std over seeds of every headline number, keyed arm -> split -> type."""
    agg: dict = {}
    for arm, runs in by_arm(results).items():
        done = [r for r in runs if "splits" in r]
        a = {"seeds": [r["seed"] for r in done], "accuracy": {}, "majority_baseline": {}, "drop": {},
             "lookup_spread": {}, "neighbour_by_direction": {}, "coupling": {},
             "tokens_per_second": _ms([r["tokens_per_second"] for r in runs]),
             "tokens_per_cpu_second": _ms([r["tokens_per_cpu_second"] for r in runs])}
        for split in SPLIT_ORDER:
            if not done or split not in done[0]["splits"]:
                continue
            a["accuracy"][split] = {k: _ms([r["splits"][split]["accuracy"].get(k) for r in done])
                                    for k in data.QUESTION_TYPES}
            a["majority_baseline"][split] = {k: _ms([r["splits"][split]["majority_baseline"].get(k) for r in done])
                                             for k in data.QUESTION_TYPES}
            a["neighbour_by_direction"][split] = {
                dname: _ms([r["splits"][split]["neighbour_by_direction"].get(dname) for r in done])
                for dname in data.DIRECTIONS}
            spreads = defaultdict(list)
            for r in done:
                for grid, cell in r["splits"][split]["lookup_cells"].items():
                    spreads[grid + " rows"].append(cell["row_spread"])
                    spreads[grid + " columns"].append(cell["column_spread"])
            a["lookup_spread"][split] = {k: _ms(v) for k, v in spreads.items()}
            a["coupling"][split] = {s: {m: _ms([r["coupling"][split][s][m] for r in done])
                                        for m in ("ptd", "rope_kernel_deviation")}
                                    for s in done[0]["coupling"][split]}
        for split in ("long-prefix", "question-first", "unseen-grid"):
            if done and split in done[0].get("drop", {}):
                a["drop"][split] = {k: _ms([r["drop"][split].get(k) for r in done]) for k in data.QUESTION_TYPES}
        agg[arm] = a
    return agg


def write(plan, results: List[dict], meta: dict, plots: bool = True) -> List[str]:
    os.makedirs(plan.out, exist_ok=True)
    agg = aggregate(results)
    doc = {"meta": meta, "arms": [r["arm"] for r in results[:len(plan.arms)]] if results else [],
           "summary": agg, "runs": results}
    paths = []
    p = os.path.join(plan.out, "results.json")
    with open(p, "w") as f:
        json.dump(doc, f, indent=1)
    paths.append(p)
    p = os.path.join(plan.out, "results.md")
    with open(p, "w") as f:
        f.write(markdown(plan, results, agg, meta))
    paths.append(p)
    if plots and plan.plots and results:
        paths += draw(plan.out, results, agg)
    return paths


def markdown(plan, results: List[dict], agg: dict, meta: dict) -> str:
    arms = list(agg)
    s = meta["settings"]
    lines = [f"# tiny_vlm results: preset `{meta['preset']}`", ""]
    git = meta["git"]
    lines += [f"- commit `{git['commit']}`{' (with uncommitted changes)' if git['dirty'] else ''}; torch {meta['torch']}",
              f"- {meta['machine_start']['cpu']}, {meta['machine_start']['cores']} cores; load average "
              f"{meta['machine_start']['load_average'][0]:.1f} at start, {meta['machine_end']['load_average'][0]:.1f} at end; "
              f"wall time {meta['wall_seconds'] / 60:.1f} min" + ("" if meta["complete"] else " (**interrupted: partial results**)"),
              f"- {len(arms)} arms x seeds {sorted({r['seed'] for r in results})}; {s['steps']} steps of {s['batch']} sequences, "
              f"{s['questions']} questions each, lr {s['lr']}; training grids (patches) {s['train_grids']}, unseen {s['eval_grid']}, "
              f"merge {s['merge']}; model {s['layers']} layers, width {s['width']}, {s['heads']} heads, sections {s['sections']}, "
              f"theta {s['theta']}",
              "- accuracy in %, mean ± std over seeds; *majority* is the share of the most frequent answer "
              "(what always giving that answer would score)", ""]
    for split in SPLIT_ORDER:
        if not any(split in a["accuracy"] for a in agg.values()):
            continue
        lines += [f"## {split}", "", "| arm | " + " | ".join(data.QUESTION_TYPES) + " |",
                  "|---|" + "---|" * len(data.QUESTION_TYPES)]
        base = None
        for arm in arms:
            acc = agg[arm]["accuracy"].get(split)
            if acc is None:
                continue
            base = base or agg[arm]["majority_baseline"][split]
            lines.append(f"| {arm} | " + " | ".join(_fmt(acc[k]) for k in data.QUESTION_TYPES) + " |")
        if base:
            lines.append("| *majority* | " + " | ".join(_fmt(base[k]) for k in data.QUESTION_TYPES) + " |")
        lines.append("")
    lines += ["## Accuracy lost from the training layout (percentage points)", "",
              "| arm | split | " + " | ".join(data.QUESTION_TYPES) + " |", "|---|---|" + "---|" * 4]
    for arm in arms:
        for split, drop in agg[arm]["drop"].items():
            lines.append(f"| {arm} | {split} | " + " | ".join(_fmt(drop[k]) for k in data.QUESTION_TYPES) + " |")
    lines += ["", "## Neighbour accuracy by direction (train split, %)", "",
              "| arm | " + " | ".join(data.DIRECTIONS) + " |", "|---|" + "---|" * 4]
    for arm in arms:
        nb = agg[arm]["neighbour_by_direction"].get("train")
        if nb:
            lines.append(f"| {arm} | " + " | ".join(_fmt(nb[d]) for d in data.DIRECTIONS) + " |")
    lines += ["", "## Lookup: spread of accuracy over rows and columns (std of per-row / per-column accuracy, %)", ""]
    keys = sorted({k for a in agg.values() for sp in a["lookup_spread"].values() for k in sp})
    splits = [sp for sp in ("train", "unseen-grid") if any(sp in a["lookup_spread"] for a in agg.values())]
    header = [f"{sp} {k}" for sp in splits for k in keys
              if any(k in a["lookup_spread"].get(sp, {}) for a in agg.values())]
    lines += ["| arm | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    for arm in arms:
        cells = []
        for h in header:
            sp, k = h.split(" ", 1)
            cells.append(_fmt(agg[arm]["lookup_spread"].get(sp, {}).get(k, (None, None, 0))))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += ["", "## Coupling of the evaluated layouts (circlerope.ptd per geometry of the arm)", "",
              "| arm | geometry | split | PTD | RoPE kernel deviation |", "|---|---|---|---|---|"]
    for arm in arms:
        for split, per in agg[arm]["coupling"].items():
            for scheme, m in per.items():
                lines.append(f"| {arm} | {scheme} | {split} | {_fmt(m['ptd'], False)} | "
                             f"{_fmt(m['rope_kernel_deviation'], False)} |")
    lines += ["", "## Training speed", "", "| arm | tokens/s (wall, per run) | tokens per CPU-second |", "|---|---|---|"]
    for arm in arms:
        a = agg[arm]
        lines.append(f"| {arm} | {a['tokens_per_second'][0]:.0f} | {a['tokens_per_cpu_second'][0]:.0f} |")
    interrupted = [f"{r['arm']}/s{r['seed']}" for r in results if r.get("interrupted")]
    if interrupted:
        lines += ["", f"Interrupted runs (loss curves only): {', '.join(interrupted)}"]
    lines.append("")
    return "\n".join(lines)


# -------------------------------------------------------------------- plots ---
def draw(out: str, results: List[dict], agg: dict) -> List[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    paths = []
    arms = list(agg)
    colours = plt.get_cmap("tab10")

    # accuracy per arm and split
    splits = [s for s in SPLIT_ORDER if any(s in a["accuracy"] for a in agg.values())]
    if splits:
        fig, axes = plt.subplots(1, len(splits), figsize=(3.6 * len(splits), 3.4), sharey=True, squeeze=False)
        width = 0.8 / len(arms)
        for ax, split in zip(axes[0], splits):
            x = np.arange(len(data.QUESTION_TYPES))
            for i, arm in enumerate(arms):
                acc = agg[arm]["accuracy"].get(split)
                if not acc:
                    continue
                m = [acc[k][0] or 0 for k in data.QUESTION_TYPES]
                e = [acc[k][1] or 0 for k in data.QUESTION_TYPES]
                ax.bar(x - 0.4 + width * (i + 0.5), m, width, yerr=e, color=colours(i), label=arm, capsize=1.5)
            base = next((agg[a]["majority_baseline"][split] for a in arms if split in agg[a]["majority_baseline"]), None)
            if base:
                for j, k in enumerate(data.QUESTION_TYPES):
                    if base[k][0] is not None:
                        ax.hlines(base[k][0], j - 0.45, j + 0.45, colors="k", linestyles="dashed", linewidth=1)
            ax.set_xticks(x, data.QUESTION_TYPES, fontsize=8)
            ax.set_title(split, fontsize=9)
            ax.set_ylim(0, 1)
        axes[0][0].set_ylabel("accuracy (dashed: majority answer)", fontsize=8)
        axes[0][-1].legend(fontsize=6, loc="upper right")
        fig.tight_layout()
        p = os.path.join(out, "accuracy.png")
        fig.savefig(p, dpi=90)
        plt.close(fig)
        paths.append(p)

    # lookup heatmaps: rows = arms, columns = grids (train split grids, then the unseen grid)
    done = [r for r in results if "splits" in r]
    panels = []
    for split in ("train", "unseen-grid"):
        grids = sorted({g for r in done for g in r["splits"].get(split, {}).get("lookup_cells", {})},
                       key=lambda g: tuple(map(int, g.split("x"))))
        panels += [(split, g) for g in grids]
    if panels and done:
        fig, axes = plt.subplots(len(arms), len(panels), figsize=(2.3 * len(panels), 1.9 * len(arms)), squeeze=False)
        for i, arm in enumerate(arms):
            runs = [r for r in done if r["arm"] == arm]
            for j, (split, grid) in enumerate(panels):
                ax = axes[i][j]
                h, w = map(int, grid.split("x"))
                acc = np.full((h, w), np.nan)
                cells = [r["splits"][split]["lookup_cells"].get(grid) for r in runs]
                cells = [c for c in cells if c]
                if cells:
                    stack = np.array([[[np.nan if v is None else v for v in row] for row in c["accuracy"]] for c in cells])
                    with warnings.catch_warnings():   # cells never asked stay NaN (blank)
                        warnings.simplefilter("ignore", RuntimeWarning)
                        acc = np.nanmean(stack, axis=0)
                ax.imshow(acc, vmin=0, vmax=1, cmap="viridis")
                ax.set_xticks([]); ax.set_yticks([])
                if i == 0:
                    ax.set_title(f"{split} {grid}", fontsize=8)
                if j == 0:
                    ax.set_ylabel(arm, fontsize=8)
        fig.suptitle("lookup accuracy per cell (row r, column c); yellow = 1, purple = 0", fontsize=9)
        fig.tight_layout()
        p = os.path.join(out, "lookup_heatmaps.png")
        fig.savefig(p, dpi=80)
        plt.close(fig)
        paths.append(p)

    # loss curves (and accuracy curves when measured)
    has_curve = any(r.get("curve") for r in results)
    ncols = 1 + (len(data.QUESTION_TYPES) if has_curve else 0)
    fig, axes = plt.subplots(1, ncols, figsize=(3.3 * ncols, 3.0), squeeze=False)
    for i, arm in enumerate(arms):
        runs = [r for r in results if r["arm"] == arm and r["loss"]]
        if not runs:
            continue
        n = min(len(r["loss"]) for r in runs)
        mean = np.mean([r["loss"][:n] for r in runs], axis=0)
        k = max(1, n // 50)
        smooth = np.convolve(mean, np.ones(k) / k, mode="valid")
        axes[0][0].plot(np.arange(len(smooth)) + k, smooth, color=colours(i), label=arm, linewidth=1)
        if has_curve:
            for j, kind in enumerate(data.QUESTION_TYPES):
                pts = defaultdict(list)
                for r in runs:
                    for c in r.get("curve", []):
                        if kind in c["accuracy"]:
                            pts[c["step"]].append(c["accuracy"][kind])
                steps = sorted(pts)
                axes[0][1 + j].plot(steps, [statistics.fmean(pts[s]) for s in steps], color=colours(i), linewidth=1)
    axes[0][0].set_title("training loss (answer tokens)", fontsize=9)
    axes[0][0].set_xlabel("step", fontsize=8)
    axes[0][0].legend(fontsize=6)
    if has_curve:
        for j, kind in enumerate(data.QUESTION_TYPES):
            axes[0][1 + j].set_title(f"{kind} accuracy (train layout)", fontsize=9)
            axes[0][1 + j].set_ylim(0, 1)
            axes[0][1 + j].set_xlabel("step", fontsize=8)
    fig.tight_layout()
    p = os.path.join(out, "loss_curves.png")
    fig.savefig(p, dpi=90)
    plt.close(fig)
    paths.append(p)
    return paths
