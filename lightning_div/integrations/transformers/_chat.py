"""Chat helpers for TRL's conversational datasets: DialoGPT's token layout as a chat template, a pair as messages."""

from __future__ import annotations

from lightning_div.pairs import DialoguePair

__all__ = ["DIALOGPT_CHAT_TEMPLATE", "as_messages"]

#: A chat template with DialoGPT's token layout, the one lightning-div trains, generates and scores
#: with (:class:`~lightning_div.model.formatting.DialogueLayout`'s default): every turn's content
#: followed by the EOS token, whoever speaks, and nothing else (no role names, no generation
#: prompt: the response starts right after the last turn's EOS). DialoGPT's tokenizers, and the
#: base model's, ship no chat template; set ``tokenizer.chat_template = DIALOGPT_CHAT_TEMPLATE``
#: before TRL's ``SFTTrainer`` reads a conversational (``messages``) dataset. The assistant turns
#: are marked ``{% generation %}``, so ``SFTConfig(assistant_only_loss=True)`` trains on the
#: responses only, as :class:`~lightning_div.datamodules.DialogueDataModule` does.
DIALOGPT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)


def as_messages(pair: DialoguePair) -> dict[str, list[dict[str, str]]]:
    """A dialogue pair as one conversational example for TRL: ``{"messages": [{"role", "content"}, ...]}``.

    The response is the assistant's turn; the context's turns alternate backwards from it, so the
    last context turn is the user's (``user, assistant, user, assistant`` for a 3-turn context).

    Args:
        pair: a :class:`~lightning_div.pairs.DialoguePair` (its extra references are not used).

    Returns:
        The example, in TRL's conversational format.
    """
    n = len(pair.context)
    turns = [{"role": "user" if (n - i) % 2 else "assistant", "content": t} for i, t in enumerate(pair.context)]
    return {"messages": [*turns, {"role": "assistant", "content": pair.response}]}
