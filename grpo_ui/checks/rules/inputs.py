"""Required inputs: a model, a dataset, values an import left open, and ms-swift's exclusive or paired arguments."""

from __future__ import annotations

from grpo_ui.checks.rules.base import rule
from grpo_ui.core.findings import finding
from grpo_ui.knowledge.catalog import find_model
from grpo_ui.spec.fields import ENGINES


@rule(engines=ENGINES)
def required_inputs(spec, eff):
    t = spec.train
    if not (t.model or "").strip():
        yield finding("SPEC-MODEL-MISSING", "error", "train.model", "No model is set.",
                      "Set train.model to a hub id (e.g. Qwen/Qwen2.5-7B-Instruct) or a local path on every node.")
    elif "/" not in t.model and not t.model.startswith(("~", ".")) and (known := find_model(t.model)) and known.hub:
        yield finding("MODEL-BARE-NAME", "warning", "train.model", f"`{t.model}` is neither a Hub id (owner/name) "
                      "nor a path: unless the working directory holds a folder of that name, the download fails.",
                      f"Use the Hub id, e.g. {known.hub[0]}.", {"train.model": known.hub[0]})
    if not t.dataset:
        yield finding("SPEC-DATASET-MISSING", "error", "train.dataset", "No training dataset is set.",
                      "Add a dataset: a hub id, optionally with #N samples, or a local .jsonl path.")


@rule(engines=ENGINES)
def unresolved(spec, eff):
    for path, text in spec.unresolved.items():
        yield finding("IMPORT-UNRESOLVED", "error", path, f"{path} is `{text}` in the imported script: a value only "
                      "the shell that ran it knew (a variable it never set, $(…), ~ or a script argument).",
                      f"Fill in {path} with the value it has when the script runs.")


@rule(engines=ENGINES)
def partial_import(spec, eff):
    """A draft kept from an import that was refused: what could not be read, until the field is filled in (or, for
    the script as a whole, until the user says the draft was checked against it)."""
    for path, message in spec.import_errors.items():
        if path == "spec":
            yield finding("IMPORT-PARTIAL", "error", path, f"Partial import: {message}",
                          "Compare the draft with the script (every field after that line may be missing), then mark "
                          "the draft checked.", {"import_errors": {k: v for k, v in spec.import_errors.items()
                                                                   if k != "spec"}})
        else:
            yield finding("IMPORT-PARTIAL", "error", path, f"Partial import: {message}",
                          f"Fill in {path} with the value the script means.")


@rule(engines=ENGINES)
def truncation(spec, eff):
    ts = spec.train.truncation_strategy
    if ts not in (None, "left", "delete"):
        yield finding("TRUNCATION-STRATEGY", "error", "train.truncation_strategy",
                      f"GRPO requires truncation_strategy 'left' or 'delete'; it is {ts!r}.",
                      "Set truncation_strategy to left (keep the end of long prompts) or delete (drop them).",
                      {"train.truncation_strategy": "left"})


@rule
def ref_model_lora(spec, eff):
    if spec.train.ref_model and spec.train.tuner_type != "full" and eff.beta != 0:
        yield finding("REF-MODEL-LORA", "error", ("train.ref_model", "train.tuner_type"),
                      "LoRA training does not take a ref_model: the frozen base model is the reference.",
                      "Clear train.ref_model.", {"train.ref_model": None})


@rule(engines=ENGINES)
def soft_overlong(spec, eff):
    t = spec.train
    if "soft_overlong" not in t.reward_funcs:
        return
    if t.soft_cache_length is None:
        yield finding("SOFT-OVERLONG-CACHE", "error", "train.soft_cache_length",
                      "The soft_overlong reward needs soft_cache_length.",
                      "Set soft_cache_length (the penalty-free margin) below soft_max_length.")
    elif t.soft_max_length is not None and t.soft_cache_length >= t.soft_max_length:
        yield finding("SOFT-OVERLONG-CACHE", "error", ("train.soft_cache_length", "train.soft_max_length"),
                      f"soft_cache_length ({t.soft_cache_length}) must be < soft_max_length ({t.soft_max_length}).",
                      "Lower soft_cache_length or raise soft_max_length.")


@rule
def warmup(spec, eff):
    if spec.train.warmup_ratio and spec.train.warmup_steps:
        yield finding("WARMUP-BOTH", "error", ("train.warmup_ratio", "train.warmup_steps"),
                      f"warmup_ratio ({spec.train.warmup_ratio}) and warmup_steps ({spec.train.warmup_steps}) "
                      "cannot be set at the same time.", "Keep one of them; set the other to 0.",
                      {"train.warmup_steps": 0})
