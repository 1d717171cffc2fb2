"""The classes a model's cross-entropy is over, from the model: the daemon pages a loss
that sits at ln(classes), the loss of a uniform guess (`wtwin.detect.chance`)."""

from __future__ import annotations

# a model class whose loss is over its labels, or over its vocabulary (Hugging Face's names)
OVER_LABELS = ("ForSequenceClassification", "ForTokenClassification", "ForImageClassification",
               "ForAudioClassification")
OVER_VOCAB = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration")


def classes_of(model_class: str, config) -> int | None:
    """The classes a Hugging Face model's loss is over, from its class's name (a PEFT
    wrapper's too: ``PeftModelForCausalLM``) and its config (a dict, or the config
    object): ``num_labels`` for a classifier, ``vocab_size`` for a language model; None
    for anything else (a regression head, a model of another kind)."""
    get = config.get if isinstance(config, dict) else (lambda k: getattr(config, k, None))
    key = ("num_labels" if any(k in model_class for k in OVER_LABELS)
           else "vocab_size" if any(k in model_class for k in OVER_VOCAB) else None)
    n = get(key) if key else None
    if key == "num_labels" and get("problem_type") == "regression":
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 2 else None
