"""One PNG per metric: metric vs parameter (decTest) or the two classes' histograms (conTest)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div._internal.io import atomic_write


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "metric"


def plot_result(result: Mapping[str, Any], path: str | Path, label_name: str = "parameter") -> Path:
    """Save one dec/con result (from :func:`dec_test` / :func:`con_test`) as a PNG at ``path``."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state is touched

    name, scores = result["metric"], np.asarray(result["scores"])
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    ci = f"[{result['ci_low']:.2f}, {result['ci_high']:.2f}]"
    if result["test"] == "dec":
        x = np.asarray(result["parameters"])
        ax.scatter(x, scores, s=12, alpha=0.5, label="response sets")
        levels = np.unique(x)
        ax.plot(levels, [scores[x == v].mean() for v in levels], color="black", lw=1.5, label="mean")
        ax.set(xlabel=label_name, ylabel=name)
        ax.set_title(f"decTest {name}: Spearman ρ = {result['spearman']:.2f} {ci}", fontsize=10)
    else:
        y = np.asarray(result["labels"])
        bins = np.histogram_bin_edges(scores, bins=20).tolist()
        ax.hist(scores[y == 1], bins=bins, alpha=0.5, label=f"high content diversity ({int((y == 1).sum())})")
        ax.hist(scores[y == 0], bins=bins, alpha=0.5, label=f"low content diversity ({int((y == 0).sum())})")
        ax.axvline(result["threshold"], color="black", ls="--", lw=1, label="optimal threshold")
        ax.set(xlabel=name, ylabel="sets")
        ax.set_title(f"conTest {name}: OCA = {result['oca']:.2f}, ρ = {result['spearman']:.2f} {ci}", fontsize=10)
    ax.legend(fontsize=8)
    path = Path(path)
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format=path.suffix.lstrip(".") or "png", dpi=100)
    return path


def plot_results(
    results: Mapping[str, Mapping[str, Any]], out_dir: str | Path, label_name: str = "parameter"
) -> list[Path]:
    """One ``<metric>.png`` per result in ``out_dir`` (created if needed)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [plot_result(r, out_dir / f"{_file_name(name)}.png", label_name) for name, r in results.items()]
