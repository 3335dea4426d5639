"""Every read of another library's private state, one small module per library.

A release of Lightning, torch, transformers, TRL or W&B may rename or remove what these read,
without a deprecation: each read is one function here, commented with what it reads, why no
public API serves, and the versions it was checked on, and each is covered by
``tests/test_compat.py``, which CI runs on the newest releases and on the oldest ones
``pyproject.toml`` declares (``.ci/minimums.txt``). Nothing outside this folder reads a private
name of another library (``tests/test_compat.py`` reads every module's syntax tree to hold that),
and there are at most eight reads in all:

============================  =====================================================  =======================
module                        function (what it reads)                               why
============================  =====================================================  =======================
:mod:`.lightning`             ``loaded_checkpoint``                                  the epoch a resumed fit
                              (``trainer._checkpoint_connector._loaded_checkpoint``)  starts with, in
                                                                                     ``on_fit_start``
:mod:`.lightning`             ``batches_that_stepped``                               the step Lightning logs
                              (``fit_loop.epoch_loop._batches_that_stepped``)        epoch-end scalars at
:mod:`.torch`                 ``fsdp1_flattened`` (``_is_flat_param``,               FSDP1's flat parameters
                              ``_fsdp_flattened``)                                   in weight decay groups
:mod:`.torch`                 ``fsdp1_call_inner`` (``_fsdp_wrapped_module``)        a unit's forward without
                                                                                     its all-gather
:mod:`.torch`                 ``fsdp2_held_unsharded`` (the FSDP2 state's param      full parameters for a
                              groups, ``_auto_reshard_after_forward``, ``_is_root``)  measurement, restored after
:mod:`.transformers`          ``train_sampler`` (``Trainer._get_train_sampler``)     DRESS's weighted sampler
:mod:`.trackers`              ``drop_wandb_anonymous`` (``WandbLogger._wandb_init``)  a W&B warning Lightning
                                                                                     causes
:mod:`.trl`                   ``logged_rollouts`` (``trainer._logs``)                the deprecated
                                                                                     ``rollouts_of`` only
============================  =====================================================  =======================
"""

#: The functions above, by module: the one list ``tests/test_compat.py`` holds the package to.
PRIVATE_READS = {
    "lightning": ("loaded_checkpoint", "batches_that_stepped"),
    "torch": ("fsdp1_flattened", "fsdp1_call_inner", "fsdp2_held_unsharded"),
    "transformers": ("train_sampler",),
    "trackers": ("drop_wandb_anonymous",),
    "trl": ("logged_rollouts",),
}
