"""GRPO / RLOO test setup without TRL's trainers: a four-topic encoder and its references, a batch whose group
diversity is computed by hand, the reward on them, and a stub of what the callback reads of a TRL trainer.

Used by ``test_grpo_reward.py``, ``test_grpo_trainer.py``, ``test_group_alert.py`` and ``test_verdict.py``.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from fakes import VectorEncoder, first_word_encoder

from lightning_div.integrations.trl import SemanticGroupReward
from lightning_div.semantic.space import SemanticSpace

#: Each text's first word is its topic (``topic_encoder``): one cluster per topic.
TOPICS = ("yes", "no", "maybe", "hello")


def topic_encoder() -> VectorEncoder:
    """A text's first word as a topic direction, plus a little noise seeded by the text (distinct directions)."""
    return first_word_encoder(TOPICS, default="hello", noise=0.01)


REFERENCES = [f"{t} {i}" for t in TOPICS for i in range(12)]

# three groups of G = 4; with 2 processes of 6 completions each, the second group straddles them
BATCH = ["yes a", "yes b", "no c", "maybe d", "hello e", "hello f", "yes g", "yes h", "no i", "no j", "no k", "no l"]


def topic_space(tmp_path, **kwargs) -> SemanticSpace:
    return SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False, **kwargs)


def topic_reward(tmp_path, **kwargs) -> SemanticGroupReward:
    kwargs.setdefault("space", topic_space(tmp_path))
    return SemanticGroupReward(num_generations=4, cluster_texts=REFERENCES, **kwargs)


EOS, PAD = 2, 0  # the stub tokenizer's


class StubTrainer:
    """What the callback reads of a TRL GRPO/RLOO trainer, all public: ``args.num_generations`` and
    ``output_dir``, ``reward_funcs``, ``model.training`` and its ``generation_config``, ``processing_class``,
    ``state``. :meth:`log_metric` records what a reward function hands TRL, one list per key, as TRL's
    ``_metrics["train"]`` holds it until the log."""

    def __init__(self, output_dir, g=4):
        self.args = SimpleNamespace(num_generations=g, output_dir=str(output_dir))
        self.reward_funcs: list = []
        self.model = SimpleNamespace(training=True, generation_config=SimpleNamespace(eos_token_id=None))
        self.processing_class = SimpleNamespace(eos_token_id=EOS, pad_token_id=PAD, all_special_tokens=[])
        self.callback_handler = SimpleNamespace(callbacks=[])
        self.state = SimpleNamespace(global_step=0, is_world_process_zero=True, stateful_callbacks={})
        self.logged: defaultdict[str, list[float]] = defaultdict(list)

    def add_callback(self, cb):
        self.callback_handler.callbacks.append(cb)

    def log_metric(self, name, value):
        self.logged[name].append(value)

    def with_callback(self, cb):
        """The callback in ``reward_funcs``, then attached: the order the callback's docs give."""
        self.reward_funcs.append(cb)
        return cb.attach(self)


def begin(cb, trainer, state=None):
    cb.on_train_begin(trainer.args, state if state is not None else trainer.state, None)


def rollout_step(cb, trainer, completions, step=1, prompts=None, ids=None):
    """TRL's call of the reward functions for the generation batch that trains ``step`` (one process)."""
    trainer.state.global_step = step - 1
    g = trainer.args.num_generations
    rewards = cb(
        prompts=prompts if prompts is not None else [f"p{i // g}" for i in range(len(completions))],
        completions=completions,
        completion_ids=ids,
        trainer_state=trainer.state,
        log_extra=lambda column, values: None,
        log_metric=trainer.log_metric,
        reply=["a dataset column"] * len(completions),
    )
    assert rewards == [0.0] * len(completions)  # it adds nothing to any reward
