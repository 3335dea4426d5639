"""What a new user looks for in the docs is there and matches the code (issue 43 item 8)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.colors as mcolors
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _colour_name(rgba) -> str:
    """The plain name of a bar's colour: which of red, grey, orange, blue it is nearest to."""
    names = {"red": "#d62728", "grey": "#9aa5b1", "orange": "#ff7f0e", "blue": "#1f77b4"}
    r, g, b = mcolors.to_rgb(rgba)
    return min(names, key=lambda n: sum((x - y) ** 2 for x, y in zip((r, g, b), mcolors.to_rgb(names[n]))))


def test_the_histogram_colours_the_page_names_are_the_plots():
    from lightning_div.semantic.plots import share_histogram

    fig = share_histogram([0.7, 0.3], [0.5, 0.5], ["0: a", "1: b"], "t")
    ax = fig.axes[0]
    colours = {c.get_label(): _colour_name(c.patches[0].get_facecolor()) for c in ax.containers}
    assert colours == {"generated": "red", "gold": "grey"}
    page = (DOCS / "callbacks" / "semantic-diversity.md").read_text()
    text = page.split("`val/cluster_histogram`: ", 1)[1].split("\n\n", 1)[0]
    assert "generated responses (red" in text and "(grey" in text
    assert "orange" not in page and "blue" not in page


def test_gpu_config_fine_tunes_a_pretrained_dialogpt():
    config = yaml.safe_load((ROOT / "configs" / "gpu.yaml").read_text())
    model = config["model"]["init_args"]
    assert model["model_name_or_path"] == "microsoft/DialoGPT-medium"
    assert "from_scratch" not in model and "tokenizer" not in model  # the model's own tokenizer
    assert config["trainer"]["accelerator"] == "gpu" and config["trainer"]["precision"] == "bf16-mixed"


def test_a_gpu_user_finds_dialogpt_medium_and_the_faiss_clash():
    guide = (DOCS / "getting-started.md").read_text()
    gpu = guide.split("\n## On a GPU\n", 1)[1].split("\n## ", 1)[0]
    assert "microsoft/DialoGPT-medium" in gpu and "configs/gpu.yaml" in gpu
    assert "not measured here" in gpu  # said, not guessed: no Hub and no GPU on the build machine
    assert "pip uninstall -y faiss-cpu" in gpu


def test_sem_ent_is_read_against_the_gold_with_the_results_numbers():
    page = (DOCS / "callbacks" / "semantic-diversity.md").read_text()
    part = page.split("## What a good or a bad Sem-Ent is", 1)[1].split("\n## ", 1)[0]
    assert "val/sem_ent_gold" in part and "ln 20 = 3.00" in part
    results = (DOCS / "results" / "dress_vs_baseline.md").read_text()
    # every figure the table quotes from the results page is on that page
    for number in ("2.605 ± 0.036", "2.746 ± 0.026", "own Sem-Ent on the same 500 contexts is 2.95", "0.67 ± 0.09"):
        assert number in results, number
    for shown in ("2.61 ± 0.04", "2.75 ± 0.03", "| 2.95 |", "0.06–0.79"):
        assert shown in part, shown


def test_model_attr_on_every_callback_is_documented():
    page = (DOCS / "callbacks" / "index.md").read_text()
    assert 'common = dict(model_attr="net", tokenizer_attr="tok")' in page
