"""The diversity monitors and DRESS in Hugging Face ``transformers.Trainer`` and TRL's ``SFTTrainer``.

:class:`TrainerDiversityMonitor` is the Hugging Face front end of the Lightning
:class:`~lightning_div.callbacks.SemanticDiversityMonitor` and :class:`~lightning_div.callbacks.RUQMonitor`
together: at each evaluation it generates responses for a fixed sample of evaluation contexts with the
trainer's model and logs Sem-Ent, the lexical metrics, the cluster divergence from the gold responses and
RUQ, named as the Trainer names its evaluation metrics: ``eval_<metric>`` (``eval_sem_ent``,
``eval_distinct_2``, ``eval_ruq`` ...), which the Trainer's trackers (TensorBoard, W&B, Comet ...) show as
``eval/<metric>``: the Lightning monitors' ``val/<metric>`` names with ``eval/`` for ``val/``. Like
``eval_loss``, they can be ``metric_for_best_model`` (``"sem_ent"``).

At each evaluation (``on_evaluate``; also before the first step with ``measure_at_start``):

* generate one response (greedy, 3-gram blocking, ``Generation.max_new_tokens``) for each of a fixed
  sample of ``num_contexts`` evaluation contexts, drawn once with ``args.seed`` as
  :class:`~lightning_div.callbacks.SemanticDiversityMonitor` draws it;
* log ``eval_sem_ent``, ``eval_cluster_js``, ``eval_top_cluster_share``, the lexical metrics
  (``eval_distinct_1`` ... ``eval_ead``) and, at the first measurement, ``eval_sem_ent_gold``
  (Sem-Ent of the same contexts' gold responses);
* score the references and the IDK strings of a fixed sample of ``num_contexts`` evaluation
  pairs (drawn with ``args.seed + 1``, as :class:`~lightning_div.callbacks.RUQMonitor` draws its
  validation sample) and log ``eval_ruq``, ``eval_ruq_margin`` and, per IDK string,
  ``eval_ruq_idk<j>`` and ``eval_ruq_margin_idk<j>`` (without a RUQMeasure in ``measures=``, no RUQ), and
  ``eval_ruq_alert`` (see ``alert=RUQAlert(...)``); with ``train_pairs``, the same on a
  fixed sample of ``num_train_contexts`` training pairs (drawn with ``args.seed``, as RUQMonitor
  draws its training prompts), logged as ``ruq``, ``ruq_margin`` ... (``<name>/ruq`` with a
  name), which the trackers chart as ``train/ruq``: the paper's RUQ-train, the Lightning
  monitor's ``train/ruq``;
* log ``eval_diversity_runtime``, the seconds the measurement took;
* with ``ruq_plot=RUQPlot()``, RUQ's per-position plot (``eval/ruq_plot``);
* on the first process, send the figures and tables of the Lightning monitor to the trainer's
  ``report_to`` trackers that take them (TensorBoard, W&B, MLflow) and write them to
  ``<output_dir>/lightning_div/``: the labelled cluster histogram (``eval/cluster_histogram``),
  with ``Outputs.cluster_views`` the steps x clusters heatmap (``eval/cluster_shares``),
  ``eval_cluster_shares.csv`` and the cluster cards (``eval/clusters/cards``, once), and
  ``Outputs.log_samples`` generated responses beside the gold ones (``eval/samples``).

The keys are :func:`eval_key`'s: the trackers chart them as ``eval/sem_ent`` ... .

```python
trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val)
TrainerDiversityMonitor(val_pairs, train_responses, space=SemanticSpace(encoder="minilm")).attach(trainer)
trainer.train()  # trainer.state.log_history holds {"eval_sem_ent": ..., "eval_ruq": ..., "step": ...}
```

The values go through ``trainer.log`` right after the Trainer's own evaluation log, so they reach
``trainer.state.log_history`` and every ``report_to`` tracker (W&B, TensorBoard, MLflow ...) as
the loss does; they are also added to the metrics ``trainer.evaluate()`` returns. This is why the
monitor is given its trainer (:meth:`TrainerDiversityMonitor.attach`) instead of being passed in
``callbacks=[...]``: a ``TrainerCallback`` is given the model, not the trainer, and the Trainer logs
an evaluation's metrics *before* its callbacks' ``on_evaluate``, so adding to them there would reach
no tracker.

Nothing here imports Lightning. What is measured is :mod:`lightning_div.measure`'s, the Lightning
monitors' own: a :class:`~lightning_div.semantic.space.SemanticSpace` (clusters fitted once on the
cluster texts and kept in the same disk cache), the
:class:`~lightning_div.model.adapters.HuggingFaceAdapter` (greedy generation with 3-gram blocking,
in eval mode under a forked RNG: the training mode and random stream are restored), and
:mod:`lightning_div.metrics`. Under ``torchrun`` / ``accelerate launch`` every process must run the
evaluation (the Trainer does): generation and scoring are sharded over the processes and gathered
(:func:`lightning_div._internal.distributed.distributed_map`).

The package is split by job, in private modules; this is the one import path of every name: the
monitor (and its :class:`RUQPlot`), DRESS in a ``Trainer`` (:class:`DressTrainer`, :func:`dress_dataset`, :func:`gold_dress_state`),
and the chat helpers for TRL (:data:`DIALOGPT_CHAT_TEMPLATE`, :func:`as_messages`).
"""

from lightning_div._internal.deprecation import moved_names
from lightning_div.integrations.transformers._callback import RUQPlot, TrainerDiversityMonitor
from lightning_div.integrations.transformers._chat import DIALOGPT_CHAT_TEMPLATE, as_messages
from lightning_div.integrations.transformers._dress import (
    DRESS_FIELDS,
    DressTrainer,
    DressTrainerMixin,
    dress_dataset,
    gold_dress_state,
)
from lightning_div.integrations.transformers._keys import EVAL_PREFIX, eval_key

__all__ = [
    "DIALOGPT_CHAT_TEMPLATE",
    "DRESS_FIELDS",
    "EVAL_PREFIX",
    "DressTrainer",
    "DressTrainerMixin",
    "RUQPlot",
    "TrainerDiversityMonitor",
    "as_messages",
    "dress_dataset",
    "eval_key",
    "gold_dress_state",
]

#: 0.2's names, importable for one release with a DeprecationWarning.
__getattr__ = moved_names(__name__, {"DiversityTrainerCallback": (__name__, "TrainerDiversityMonitor")})
