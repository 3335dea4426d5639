"""Front ends other than Lightning: the same measurements and DRESS in other training loops.

:mod:`lightning_div.integrations.transformers`: Hugging Face ``transformers.Trainer`` and TRL's
``SFTTrainer`` (:class:`~lightning_div.integrations.transformers.TrainerDiversityMonitor`).
Nothing here imports Lightning: these modules are built on the framework-free parts
(:class:`~lightning_div.semantic.space.SemanticSpace`, the adapters, generation and scoring,
:mod:`lightning_div.metrics`).
"""
