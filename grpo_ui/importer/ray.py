"""ms-swift's Ray mode (``megatron rlhf --use_ray true --config job.yaml``, or the config alone) → a Ray-mode Megatron
job. The config is read the way ms-swift's driver reads it (swift/ray/megatron/driver_utils.py parse_ray_yaml, 4.6):
the Ray-only keys colocate_groups / sleep_level / nnodes, the role groups train / rollout (/ teacher) with their
``gpus``, everything else shared; the trainers read shared + train, the vLLM replicas shared + rollout. The placement
becomes the cluster (colocated: trainer nodes only; separate: rollout nodes for the rollout GPUs); what grpo-ui cannot
hold is a finding naming the key, never dropped silently.
"""

from __future__ import annotations

from grpo_ui.core.findings import finding
from grpo_ui.importer import topology
from grpo_ui.importer.bash import Word
from grpo_ui.importer.build import Call, Draft, Flag, flags_of, place_flags
from grpo_ui.spec.swift_cli import SERVER_FLAGS, TRAIN_FLAGS

RAY_ONLY = ("colocate_groups", "sleep_level", "nnodes")
READ_BY_ROLLOUT = ("model",)  # besides the vLLM arguments: what the replicas read from the shared keys


def is_ray_config(config: dict) -> bool:
    """A Ray config has a role group with ``gpus`` or a colocate group."""
    return "colocate_groups" in config or any(isinstance(config.get(g), dict) and "gpus" in config[g]
                                              for g in ("train", "rollout"))


def uses_ray(call: Call) -> bool:
    """``--use_ray`` given (bare or true), as swift/cli/_megatron/rlhf.py reads it."""
    flag = next((f for f in reversed(call.flags) if f.name == "use_ray"), None)
    return flag is not None and (not flag.values or flag.values[0].text.lower() == "true")


def place_ray(call: Call, config: dict, draft: Draft, version: str) -> None:
    """Fill the draft from a Ray config (``call``: the megatron rlhf --use_ray line that runs it, or one made for a
    config imported alone): the flags onto fields, the placement onto the cluster."""
    where = f"{call.source} line {call.line}"
    config = dict(config)
    groups = {g: dict(config.pop(g) or {}) for g in ("train", "rollout", "teacher") if g in config}
    ray_only = {k: config.pop(k) for k in RAY_ONLY if k in config}
    gpus = {g: _int(groups.get(g, {}).pop("gpus", 0)) for g in ("train", "rollout")}
    colocated = ray_only.get("colocate_groups") or []
    colocate = bool(colocated)
    if "teacher" in groups:
        draft.findings.append(finding("IMPORT-RAY-UNREAD", "warning", "spec", f"{where}: the teacher group (GKD / "
                                      "on-policy distillation replicas) is not imported.",
                                      "grpo-ui runs GRPO with train and rollout roles; drop the teacher group."))
    if colocated and sorted(map(sorted, colocated)) != [["rollout", "train"]]:
        draft.findings.append(finding("IMPORT-RAY-PLACEMENT", "error", "spec", f"{where}: colocate_groups "
                                      f"{colocated} is not GRPO's one group [[train, rollout]].",
                                      "Colocate train and rollout, or omit colocate_groups for separate GPUs."))
    if colocate and gpus["train"] != gpus["rollout"]:  # driver_utils.py _validate_colocate_groups
        draft.findings.append(finding("IMPORT-RAY-PLACEMENT", "error", "cluster.nodes", f"{where}: colocated roles "
                                      f"must have equal gpus (ms-swift stops): train {gpus['train']}, rollout "
                                      f"{gpus['rollout']}; the train GPUs were kept.",
                                      "Give train and rollout the same gpus."))
    if gpus["train"] <= 0:
        draft.findings.append(finding("IMPORT-RAY-PLACEMENT", "error", "cluster.nodes", f"{where}: the train group "
                                      "has no gpus.", "Give the train group its GPU count (gpus: N)."))
    train_flags = [f for f in call.flags if f.name not in ("use_ray", "config")]
    shared = flags_of(config, call.line, ray=True)
    _shared_conflicts(shared, groups.get("train", {}), where, draft)
    train_flags += shared + flags_of(groups.get("train", {}), call.line, ray=True)
    if "sleep_level" in ray_only:
        train_flags.append(Flag("sleep_level", [Word(str(ray_only["sleep_level"]), call.line)], call.line))
    train_flags.append(Flag("use_ray", [Word("true", call.line)], call.line))
    place_flags(Call(call.kind, train_flags, call.env, call.source, call.line, call.program), TRAIN_FLAGS, draft,
                version, "extra_args")
    _place_rollout_group(groups.get("rollout", {}), colocate, where, call, draft, version)
    if config.get("tuner_type") == "lora" and "vllm_enable_lora" not in groups.get("rollout", {}) \
            and "vllm_enable_lora" not in config:
        # The replicas see a shared tuner_type lora and turn LoRA sync on (rollout/replica.py from_rollout_cfg);
        # grpo-ui writes tuner_type in the train group, so it says that switch itself.
        draft.data.setdefault("rollout", {})["vllm_enable_lora"] = True
    draft.data["cluster"] = {"nodes": _nodes(call, gpus, colocate, _int(ray_only.get("nnodes", 1)) or 1, draft)}
    topology.environment([call], [], draft)


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _shared_conflicts(shared: list[Flag], train: dict, where: str, draft: Draft) -> None:
    """A key the replicas read at the top level and the trainers in the train group, with two values: grpo-ui keeps
    one (the train group's)."""
    for flag in shared:
        if (flag.name in READ_BY_ROLLOUT or flag.name.startswith("vllm_")) and flag.name in train \
                and [w.text for w in flag.values] != [str(v) for v in (train[flag.name] if isinstance(
                    train[flag.name], list) else [train[flag.name]])]:
            draft.findings.append(finding("IMPORT-RAY-SHARED", "warning", "spec", f"{where}: {flag.name} is "
                                          f"{' '.join(w.text for w in flag.values)} for the vLLM replicas (top level) "
                                          f"but {train[flag.name]} for the trainers (train group); the train group's "
                                          "value was kept for both.", f"Check {flag.name}."))


def _place_rollout_group(group: dict, colocate: bool, where: str, call: Call, draft: Draft, version: str) -> None:
    """The rollout group's vLLM arguments: the trainer-side rollout section's when colocated, the server section's
    (vLLM on GPUs of its own) when separate; anything else is reported, not imported."""
    table = ({k: d for k, d in TRAIN_FLAGS.items() if d.section == "rollout"} if colocate else SERVER_FLAGS)
    known = {k: v for k, v in group.items() if k in table}
    unread = sorted(set(group) - set(known))
    if unread:
        draft.findings.append(finding("IMPORT-RAY-UNREAD", "warning", "spec", f"{where}: the rollout group's "
                                      f"{', '.join(unread)} {'is' if len(unread) == 1 else 'are'} not imported: "
                                      f"grpo-ui has no such {'colocated' if colocate else 'separate'} vLLM argument.",
                                      "Set the nearest field by hand, or leave them out."))
    place_flags(Call("rollout", flags_of(known, call.line, ray=True), {}, call.source, call.line, call.program), table, draft,
                version, "rollout_extra_args")


def _nodes(call: Call, gpus: dict[str, int], colocate: bool, nnodes: int, draft: Draft) -> list[dict]:
    """The cluster the placement describes: nnodes trainer nodes sharing the train GPUs and, separate, nnodes rollout
    nodes sharing the rollout GPUs. On one machine, CUDA_VISIBLE_DEVICES (when the script sets it) gives the ids: the
    first train.gpus train, the next rollout.gpus roll out."""
    train, rollout = max(gpus["train"], 1), (0 if colocate else gpus["rollout"])
    cvd = call.text("CUDA_VISIBLE_DEVICES")
    ids = [int(x) for x in cvd.split(",") if x.strip().isdigit()] if cvd else list(range(train + rollout))
    if nnodes == 1:
        if len(ids) < train + rollout:
            draft.findings.append(finding("IMPORT-RAY-PLACEMENT", "warning", "cluster.nodes", f"{call.source}: "
                                          f"CUDA_VISIBLE_DEVICES={cvd} shows {len(ids)} GPU(s) but the roles need "
                                          f"{train + rollout}; GPUs 0…{train + rollout - 1} were assumed.",
                                          "Set each node's GPU ids on the Cluster page."))
            ids = list(range(train + rollout))
        nodes = [{"host": "localhost", "gpus": ids[:train]}]
        return nodes + ([{"host": "localhost", "gpus": ids[train:train + rollout], "role": "rollout"}]
                        if rollout else [])
    draft.findings.append(finding("IMPORT-SET-HOSTS", "info", "cluster.nodes", f"nnodes {nnodes}: each role's GPUs "
                                  "split over that many machines; placeholder names were used.",
                                  "Set each node's host on the Cluster page."))
    nodes = [{"host": f"node{i}", "gpus": list(range(train // nnodes))} for i in range(nnodes)]
    return nodes + [{"host": f"rollout{i}", "gpus": list(range(rollout // nnodes)), "role": "rollout"}
                    for i in range(nnodes if rollout else 0)]
