"""Field experience (shared/seeds): what published runs and field reports hit beyond ms-swift's own checks. Two of
them, vllm_share and reference_model, need the memory estimate and are asked by the assessment with its report; the
others are rules."""

from __future__ import annotations

from grpo_ui.checks.rules.base import is_multimodal, model_size_b, rule, size_label
from grpo_ui.core.findings import Finding, finding
from grpo_ui.memory.report import MemoryReport
from grpo_ui.spec.fields import ENGINES


@rule
def seed_zero3_kl0(spec, eff):
    t = spec.train
    if eff.zero and eff.zero.stage == 3 and t.per_device_train_batch_size == 1 and eff.grad_accum > 1:
        yield finding("SEED-ZERO3-KL0", "warning", ("train.deepspeed", "train.per_device_train_batch_size",
                                                    "train.gradient_accumulation_steps"),
                      f"ZeRO-3 with per-device batch 1 and gradient accumulation {eff.grad_accum}: users saw "
                      "parameters never update and KL stay 0 (field report 001).",
                      "Use ZeRO-2, or raise per_device_train_batch_size and lower gradient_accumulation_steps; "
                      "watch kl in the first steps.", {"train.deepspeed": "zero2"})


@rule
def seed_offload_large(spec, eff):
    size = model_size_b(eff)
    offloading = (spec.rollout.offload_model and eff.colocate) or eff.zero_offload
    if size and size >= 30 and offloading:
        yield finding("SEED-OFFLOAD-STALL", "warning", ("rollout.offload_model", "train.deepspeed"),
                      f"A {size_label(eff)} model with offload_model / ZeRO offload: moving the weights "
                      "between CPU and GPU around every rollout stalled training without an error (field report 000).",
                      "Prefer a separate rollout node (server mode), or ZeRO-3 without offload and move_model_batches "
                      "8–12 if memory allows; watch for a hang alert.", {"rollout.offload_model": False})


def vllm_share(eff, report: MemoryReport | None) -> list[Finding]:
    """SEED-VLLM-UTIL-LOW, asked by the assessment with its memory report: whether vLLM fits its share of the GPU
    is the estimate's (memory.report.VllmShare); this says what field reports 000 and 004 saw when it did not. No
    estimate, no advisory (the estimate's own finding says why there is none)."""
    share = next((r.vllm for r in report.roles if r.vllm), None) if report else None
    size = model_size_b(eff)
    if share is None or size is None:
        return []
    section = "server" if eff.server else "rollout"
    fields = (f"{section}.vllm_gpu_memory_utilization", f"{section}.vllm_tensor_parallel_size")
    if share.capacity_gib is None:
        if size >= 30 and share.util <= 0.5:  # field report 000: 0.5 on a 32B model, GPUs unknown to us
            return [finding("SEED-VLLM-UTIL-LOW", "info", fields,
                            f"vLLM may use {share.util} of each GPU for {share.weights_gib:.0f} GiB of "
                            f"{size_label(eff)} weights per GPU (TP {share.tp}) plus the KV cache of every rollout; "
                            "field report 000 found 0.5 too small for a 32B model.",
                            "Set the GPUs' model on the Cluster page so the estimate can check it; 0.6–0.7 is where "
                            "that report landed.")]
        return []
    if not share.short:
        return []
    held = ("too little to start with one sequence of KV cache" if not share.starts else
            f"leaving KV cache for ~{share.sequences_held} of the {share.sequences_wanted} sequences a rollout "
            "generates at once")
    need = min(0.95, round(share.util_for_all() + 0.05, 2))
    return [finding("SEED-VLLM-UTIL-LOW", "warning", fields,
                    f"vLLM may use {share.util} × {share.capacity_gib:.0f} GiB = {share.budget_gib:.1f} GiB per GPU; "
                    f"its weights take {share.weights_gib:.1f} GiB (TP {share.tp}), {held}: rollouts crawl or fail "
                    "(field reports 000, 004).", f"Raise vllm_gpu_memory_utilization to ≈{need} (check the memory "
                    "estimate) or raise vllm_tensor_parallel_size.", {fields[0]: need})]


@rule
def seed_tp_spans_node(spec, eff):
    """Field report 000: TP 8 with 8 inference workers on the 8 training GPUs, with async generation and offload."""
    r, nproc = spec.rollout, eff.nproc_per_node
    tp = r.vllm_tensor_parallel_size
    busy = [what for what, on in (("async_generate", r.async_generate), ("offload_model", r.offload_model),
                                  ("ZeRO offload", eff.zero_offload)) if on]
    if eff.colocate and tp >= 4 and tp == nproc and busy:
        workers = f" with num_infer_workers {r.num_infer_workers}" if r.num_infer_workers else ""
        yield finding("SEED-TP-SPANS-NODE", "warning", ("rollout.vllm_tensor_parallel_size", "rollout.async_generate",
                                                        "rollout.offload_model"),
                      f"vLLM TP {tp}{workers} spans all {nproc} training GPUs of the node while {', '.join(busy)} "
                      "moves work on the same GPUs: every rollout waits for all of them; field report 000 stalled "
                      "this way without an error.", "Use a smaller TP (more, smaller engines) or move rollouts to a "
                      "rollout server node; keep async_generate and offload off on shared GPUs.")


@rule
def seed_offload_small(spec, eff):
    size = model_size_b(eff)
    r = spec.rollout
    if size is None or size > 8:
        return
    what = [p for p, on in (("rollout.offload_model", r.offload_model), ("rollout.offload_optimizer",
                                                                          r.offload_optimizer),
                            ("train.deepspeed", eff.zero_offload),
                            ("rollout.move_model_batches", bool(r.move_model_batches))) if on]
    if what:
        yield finding("SEED-OFFLOAD-SMALL", "warning", tuple(what),
                      f"Offloading on a {size_label(eff)} model ({', '.join(what)}): GPUs wait on host copies, utilisation "
                      "swings 0–90% and training ran over 2× slower (field report 002).",
                      "Use ZeRO-3 (or ZeRO-2) without offload, offload_* false, no move_model_batches.",
                      {"rollout.offload_model": False, "rollout.offload_optimizer": False,
                       "rollout.move_model_batches": None,
                       **({"train.deepspeed": f"zero{eff.zero.stage}"} if eff.zero_offload else {})})


@rule
def seed_dataloader(spec, eff):
    workers = spec.train.dataloader_num_workers
    if is_multimodal(eff) and (workers is None or workers < 2):
        yield finding("SEED-DATALOADER-WORKERS", "info", "train.dataloader_num_workers",
                      f"dataloader_num_workers is {workers if workers is not None else 'unset (1)'} for a vision-language "
                      "model: decoding and resizing images can leave the GPUs idle between steps (field report 002).",
                      "Set dataloader_num_workers to 4–16 (fewer than the CPU cores per GPU).",
                      {"train.dataloader_num_workers": 4})


@rule(engines=ENGINES)
def seed_node_differ(spec, eff):
    trainers = spec.numbered("trainer")
    if len(trainers) < 2:
        return
    i0, n0 = trainers[0]
    for i, n in trainers[1:]:
        for attr in ("env", "python_env", "workdir"):
            if getattr(n, attr) != getattr(n0, attr):
                yield finding("SEED-NODE-DIFFER", "warning", f"cluster.nodes[{i}].{attr}",
                              f"Node {i} ({n.host}) has {attr} {getattr(n, attr)!r}, node {i0} has "
                              f"{getattr(n0, attr)!r}: nodes that differ in more than NODE_RANK are the usual cause "
                              "of multi-node hangs (field report 003).",
                              "Keep it only if the machines really differ (e.g. another install path); preflight "
                              "compares the versions found there.")


def reference_model(eff, report: MemoryReport | None) -> list[Finding]:
    """SEED-REF-MODEL, asked by the assessment with its memory report: beta > 0 with full tuning loads a frozen
    reference copy of the model. beta 0 is a one-click change only while memory may be short (TIGHT, OOM, or no
    verdict yet); a job that fits is told what the reference costs and its room to spare, with nothing to apply:
    beta 0 drops the KL term, a change to what is learned that memory does not ask for."""
    spec = eff.spec
    if not (eff.reference_model and spec.train.tuner_type == "full"):
        return []
    size = model_size_b(eff)
    what = f" (≈{size * 2:.0f} GB more in bf16)" if size and eff.reference_model == spec.train.model else ""
    copy = "copy of the model" if eff.reference_model == spec.train.model else f"model ({eff.reference_model})"
    loads = f"beta {eff.beta} with full tuning loads a frozen reference {copy}{what}"
    fields = ("train.beta", "train.tuner_type")
    trainer = report.trainer if report is not None else None
    if trainer is not None and trainer.verdict == "fits":  # the reference sits on the trainer GPUs
        return [finding("SEED-REF-MODEL", "info", fields, f"{loads}; the trainer GPU fits it with "
                        f"{trainer.headroom_gib:.0f} GiB to spare.", "Nothing to change while it fits: the KL term "
                        "needs the reference. If memory gets short, beta 0 (no KL term, no reference model) frees it, "
                        "as ms-swift's 32B example does.")]
    return [finding("SEED-REF-MODEL", "info", fields, f"{loads}.", "If memory is short, set beta 0 (no KL term, no "
                    "reference model) as ms-swift's 32B example does.", {"train.beta": 0.0})]


@rule(engines=ENGINES)
def env_secret_moved(spec, eff):
    if spec.moved_secrets:
        names = ", ".join(spec.moved_secrets)
        yield finding("ENV-SECRET-MOVED", "warning", "secret_env",
                      f"{names} in env looked like secret(s): moved to secret_env, and the value(s) dropped so they "
                      "never reach a script, the YAML or the job database.",
                      "Enter the value(s) on the Launch page (or export them for `python -m grpo_ui launch`); they "
                      "travel in a 0600 file that is removed once the job has started.")
