"""A run's verdict, the same for every front end: the alert records the callbacks write, and the report that
opens with them (issue 63: a GRPO run that broke down ended with a clean-looking summary and a report whose
alert was two 0/1 charts 2,800 px down, its reason on stderr only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grpo_setup import topic_encoder

from lightning_div.integrations.trl import GroupDiversityMonitor
from lightning_div.measure import RecordingReporter
from lightning_div.measure.alerts import GroupAlert
from lightning_div.report import build_report, find_run, run_inputs
from lightning_div.report.figures import _on_spans, drawn
from lightning_div.semantic.space import SemanticSpace
from lightning_div.verdict import next_alert_record, verdict

REASON = "the most frequent word is 63% of the words within a group (breakdown_top_word = 0.4)"


def test_the_alert_record_keeps_its_start_and_is_written_only_when_it_changes(tmp_path):
    reporter = RecordingReporter(tmp_path)
    on = next_alert_record(None, "X", "breakdown", 9, "step", [REASON], "diversity/breakdown_alert")
    path = reporter.record_alert("X", on)
    assert path == tmp_path / "alerts" / "X.json"
    assert json.loads(path.read_text()) == {
        "who": "X",
        "kind": "breakdown",
        "since": 9,
        "unit": "step",
        "reasons": [REASON],
        "key": "diversity/breakdown_alert",
    }
    still = next_alert_record(on, "X", "breakdown", 12, "step", [REASON], "diversity/breakdown_alert")
    assert still["since"] == 9 and reporter.record_alert("X", still) is None  # the same state: not written again
    other = next_alert_record(still, "X", "collapse", 15, "step", ["fell"], "diversity/collapse_alert")
    assert other["since"] == 15  # another kind starts anew
    off = next_alert_record(other, "X", None, 18, "step", [], "")
    assert reporter.record_alert("X", off) == path
    assert json.loads(path.read_text())["kind"] is None and json.loads(path.read_text())["since"] is None


def test_the_grpo_callback_keeps_why_and_since_when_its_alert_is_on(tmp_path):
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    cb = GroupDiversityMonitor(space=space, alert=GroupAlert(start_steps=2), name="run")
    with pytest.warns(RuntimeWarning, match=r"step 3: the text broke down.*\(top_word_share = 0\.4\)"):
        for step, top in [(1, 0.1), (2, 0.1), (3, 0.55), (4, 0.6)]:
            alert = cb.check_alert({"group_sem_ent": 1.0, "group_top_word_share": top}, step=step)
    assert alert == {"collapse_alert": 0.0, "breakdown_alert": 1.0}
    record = cb.alert_record
    assert record is not None
    assert (record["who"], record["kind"], record["since"], record["key"]) == (
        "GroupDiversityMonitor-run",
        "breakdown",
        3,
        "diversity/run/breakdown_alert",
    )
    assert record["reasons"] and record["reasons"][0].startswith("the most frequent word is 60%")


def trl_run(output_dir: Path, steps: int = 12, since: int = 9) -> None:
    """A GRPO output_dir as TRL and GroupDiversityMonitor leave it: TensorBoard scalars under train/, a group
    sample per step, the alert record."""
    from torch.utils.tensorboard import SummaryWriter

    art = output_dir / "lightning_div"
    (art / "alerts").mkdir(parents=True)
    for step in range(1, steps + 1):
        (art / f"diversity_group_sample_step{step}.csv").write_text(
            f"step,group,prompt,completion,cluster\n{step},0,hi,reply {step},1\n"
        )
    record = next_alert_record(None, "GroupDiversityMonitor", "breakdown", since, "step", [REASON], "")
    record["key"] = "diversity/breakdown_alert"
    (art / "alerts" / "GroupDiversityMonitor.json").write_text(json.dumps(record))
    writer = SummaryWriter(str(output_dir / "runs" / "Dec04_20-00-00_host"))
    for step in range(1, steps + 1):
        writer.add_scalar("train/epoch", step / 8, step)
        writer.add_scalar("train/diversity/group_sem_ent", 1.0 - step / 20, step)
        writer.add_scalar("train/diversity/reference_nll", 4.5 + (step >= since) * 6, step)
        writer.add_scalar("train/diversity/breakdown_alert", float(step >= since), step)
        writer.add_scalar("train/reward", 0.1 * step, step)
    writer.add_scalar("train/train_runtime", 39.6, steps)  # logged once, at the end
    writer.close()


def test_the_report_of_a_grpo_run_opens_with_its_breakdown_and_reads_top_down(tmp_path):
    trl_run(tmp_path / "grpo")
    page = build_report(tmp_path / "grpo")
    assert "steps 1-12" in page  # a run of steps, not "epochs 0-1"
    box = page.split('<div id="verdict" class="verdict bad">')[1].split("</div>")[0]
    assert "<strong>breakdown since step 9 (diversity/breakdown_alert)</strong>" in box
    assert f"why: {REASON}" in box  # the reason in words, from the run's files
    assert "numbers: group Sem-Ent 0.4 (first 0.95); NLL under the reference 10.5 (first 4.5)" in box
    order = [page.index(s) for s in ('id="verdict"', '<img alt="diversity"', '<img alt="train"')]
    assert order == sorted(order)  # the summary, the diversity curves, then the trainer's own
    heads = [h for h in page.split("<h3>") if h.startswith("diversity/group_sample")]
    assert [h.split("</h3>")[0].split("(")[1] for h in heads] == [
        "first step: step 1)</span>",
        "the alert's first step: step 9)</span>",
        "last step: step 12)</span>",
    ]
    assert "<td>train/train_runtime</td>" in page.split('id="once"')[1]  # a single value: a table, not a chart
    assert find_run(tmp_path / "grpo").alerts[0] in run_inputs(find_run(tmp_path / "grpo"))


def test_the_alert_is_a_band_and_a_single_value_no_panel():
    series = {
        "diversity/group_sem_ent": [(0.0, s, 1.0) for s in (1, 2, 3, 4)],
        "diversity/breakdown_alert": [(0.0, s, v) for s, v in ((1, 0), (2, 1), (3, 1), (4, 0))],
        "train/train_runtime": [(0.5, 4, 39.6)],
        "diversity/distinct_1": [(0.0, s, 0.5) for s in (1, 2)],
    }
    assert drawn(series) == ["diversity/group_sem_ent", "diversity/distinct_1"]  # the headline panel first
    assert _on_spans([(1, 0), (2, 1), (3, 1), (4, 0)]) == [(2, 4)]  # on from step 2 until it went off at 4
    assert _on_spans([(1, 0), (2, 1), (3, 1)]) == [(2, 3)]  # still on at the last step
    assert _on_spans([(1, 1)]) == [(1, 1.5)]  # one step on: a visible band


def test_a_lightning_run_has_the_same_verdict_with_its_epochs(tmp_path):
    version = tmp_path / "run" / "csv" / "version_0"
    (version / "lightning_div" / "alerts").mkdir(parents=True)
    (version / "metrics.csv").write_text(
        "epoch,step,val/sem_ent,val/ruq,val/ruq_alert\n0,3,2.0,40.0,0\n1,7,1.5,20.0,1\n2,11,1.25,15.0,1\n"
    )
    why = "val/ruq dropped from 40.0 to 20.0 (more than warn_drop = 10.0)"
    record = next_alert_record(None, "RUQMonitor", "RUQ alert", 1, "epoch", [why], "val/ruq_alert")
    (version / "lightning_div" / "alerts" / "RUQMonitor.json").write_text(json.dumps(record))
    page = build_report(tmp_path / "run")
    assert "epochs 0-2" in page
    assert "<strong>RUQ alert since epoch 1 (val/ruq_alert)</strong>" in page and f"why: {why}" in page
    assert "numbers: Sem-Ent 1.25 (first 2); RUQ 15 (first 40)" in page
    # a torn record is a note, the verdict still comes from the scalars
    (version / "lightning_div" / "alerts" / "RUQMonitor.json").write_text('{"who": ')
    page = build_report(tmp_path / "run")
    assert "<strong>RUQ alert since epoch 1 (val/ruq_alert)</strong>" in page and "why:" not in page
    assert "alerts/RUQMonitor.json could not be read (JSONDecodeError" in page


def test_an_alert_that_ended_is_not_the_verdict():
    rows = [(s, {"val/ruq_alert": v, "val/ruq": r}) for s, v, r in ((0, 0.0, 40.0), (1, 1.0, 20.0), (2, 0.0, 38.0))]
    v = verdict(rows, unit="epoch")
    assert v.headline() == "healthy (val/ruq_alert off)" and v.numbers == ["RUQ 38 (first 40)"]


@pytest.mark.parametrize("share", [0.5, 11 / 12])
def test_mostly_empty_replies_are_a_verdict_of_their_own(share):
    v = verdict([(0, {"val/empty_share": 0.0, "val/distinct_2": 0.4}), (1, {"val/empty_share": share})], unit="epoch")
    assert v.headline() == "mostly empty replies since epoch 1 (val/empty_share)"
    assert v.reasons == [
        f"{share:.0%} of the replies are empty (from 50% on, the lexical metrics describe almost nothing)"
    ]


def test_the_reports_table_marks_the_lexical_metrics_of_mostly_empty_replies(tmp_path):
    version = tmp_path / "run" / "csv" / "version_0"
    version.mkdir(parents=True)
    (version / "metrics.csv").write_text(
        "epoch,step,val/empty_share,val/distinct_2,val/sem_ent\n0,3,0.0,0.3,2.0\n1,7,0.92,1.0,0.2\n"
    )
    page = build_report(tmp_path / "run")
    assert "<strong>mostly empty replies since epoch 1 (val/empty_share)</strong>" in page
    table = page.split('<table id="summary">')[1].split("</table>")[0]
    rows = {r.split("</td>")[0]: r for r in table.split("<tr><td>")[1:]}
    assert "[of mostly empty replies: 92% empty]" in rows["val/distinct_2"]
    assert "mostly empty" not in rows["val/sem_ent"] and "mostly empty" not in rows["val/empty_share"]


def test_a_hugging_face_runs_report_has_its_summary_table(tmp_path):
    """TensorBoard charts a Hugging Face evaluation's eval_ruq as eval/ruq: the table had no row of them."""
    from torch.utils.tensorboard import SummaryWriter

    (tmp_path / "sft" / "lightning_div").mkdir(parents=True)
    writer = SummaryWriter(str(tmp_path / "sft" / "runs" / "Dec04_21-00-00_host"))
    for step, ruq, alert in ((4, 40.0, 0.0), (8, 20.0, 1.0)):
        writer.add_scalar("train/epoch", step / 8, step)
        writer.add_scalar("eval/ruq", ruq, step)
        writer.add_scalar("eval/ruq_alert", alert, step)
        writer.add_scalar("eval/empty_share", 0.75, step)
        writer.add_scalar("eval/distinct_2", 1.0, step)
    writer.close()
    page = build_report(tmp_path / "sft")
    assert "<strong>RUQ alert since step 8 (eval/ruq_alert)</strong>" in page and "steps 4-8" in page
    table = page.split('<table id="summary">')[1].split("</table>")[0]
    assert '<tr><td>eval_ruq</td><td class="num">20.0 %</td><td class="num">8</td>' in table
    assert "[of mostly empty replies: 75% empty] share of distinct 2-grams" in table
