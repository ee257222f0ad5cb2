"""JobSpec: the one declaration of a GRPO job, and the field registry.

Every field is declared once (grpo_ui.spec.fields): ms-swift's arguments in swift_args.py, the machines in cluster.py,
the Slurm request in slurm.py, what the run is expected to be in estimate.py, the job's own settings here. The form, the validation, the argv rendering, YAML and the
docs derive from the registry below (``ARGS``, ``SETTINGS``). What the fields mean together, the job's effective
values, is grpo_ui.spec.resolve's; YAML in and out is yaml_io.py's, changes by dotted path paths.py's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from grpo_ui.knowledge.catalog import from_hf_config
from grpo_ui.spec.cluster import ClusterSpec, Node
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.estimate import EstimateSpec
from grpo_ui.spec.fields import ENGINES, ArgDecl, SettingDecl, arg_decls, setting, setting_decls
from grpo_ui.spec.names import check_env_names, check_name, check_no_secrets, is_secret_name
from grpo_ui.spec.slurm import SlurmSpec
from grpo_ui.spec.swift_args import SUPPORTED_VERSIONS, RolloutArgs, ServerArgs, TrainArgs, dialect_of


def _split_secrets(data: dict) -> tuple[dict, list[str]]:
    """Raw spec data with token-like names taken out of ``env`` and every node's ``env`` and added to
    ``secret_env`` (their values dropped); and the names moved. ``data`` itself is left as it was."""
    moved: list[str] = []

    def take(env):
        if not isinstance(env, dict):
            return env
        found = [k for k in env if isinstance(k, str) and is_secret_name(k)]
        moved.extend(k for k in found if k not in moved)
        return {k: v for k, v in env.items() if k not in found}

    data = {**data, **({"env": take(data["env"])} if "env" in data else {})}
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("nodes"), list):
        nodes = [{**n, "env": take(n["env"])} if isinstance(n, dict) and "env" in n else n for n in cluster["nodes"]]
        data["cluster"] = {**cluster, "nodes": nodes}
    names = data.get("secret_env") or []
    if moved and isinstance(names, list):
        data["secret_env"] = [*names, *(k for k in moved if k not in names)]
    return data, moved


class JobSpec(BaseModel):
    """A whole GRPO job: training args, rollout, optional rollout servers, the cluster and the ms-swift version."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    name: str = setting("grpo-job", "Job name (letters, digits, . _ -).")
    swift_version: str = setting("4.6", "ms-swift version on the nodes; picks the flag dialect.",
                                 options=lambda: list(SUPPORTED_VERSIONS[::-1]))
    engine: Literal[ENGINES] = setting(
        "swift", "Training engine. swift: `swift rlhf`, the transformers Trainer with DDP, DeepSpeed ZeRO or FSDP2. "
        "megatron: `megatron rlhf`, Megatron-Core with tensor, pipeline, context and expert parallelism (ms-swift ≥ "
        "4.0 here; the Megatron arguments are in the parallel section).")
    train: TrainArgs = Field(default_factory=TrainArgs, description="swift rlhf / megatron rlhf arguments.")
    rollout: RolloutArgs = Field(default_factory=RolloutArgs, description="Trainer-side rollout arguments.")
    server: ServerArgs = Field(default_factory=ServerArgs, description="swift rollout arguments.")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, description="The machines.")
    slurm: SlurmSpec = Field(default_factory=SlurmSpec, description="The Slurm request.")
    estimate: EstimateSpec = Field(default_factory=EstimateSpec, description="What the run is expected to be, for "
                                   "the step-time and cost prediction.")
    env: dict[str, str] = setting({}, "Environment for every node: NAME=value, one per line.", widget="lines")
    secret_env: list[str] = setting([], "Names of secret variables (values live in a 0600 file, never here).")
    extra_args: list[str] = setting([], "Extra swift rlhf arguments, verbatim (shell-quoted).", widget="text")
    rollout_extra_args: list[str] = setting([], "Extra swift rollout arguments, verbatim (shell-quoted).",
                                            widget="text")
    unresolved: dict[str, str] = Field(default_factory=dict, description="Values an imported script left to its "
                                       "caller's shell ({field path: shell text}); each must be filled in.")
    import_errors: dict[str, str] = Field(default_factory=dict, description="What an import could not read, kept in "
                                          "a draft made from the partial result ({field path, or 'spec' for the "
                                          "script as a whole: what went wrong}); each entry holds the launch until "
                                          "its field is set.")
    hf_configs: dict[str, dict] = Field(default_factory=dict, description="The config.json of models the catalogue "
                                        "does not know, by model id: the memory estimate reads their architecture.")
    _moved_secrets: list[str] = PrivateAttr(default_factory=list)  # token-like env names moved when loaded

    @model_validator(mode="wrap")
    @classmethod
    def _secrets_out_of_env(cls, data, handler):
        """Token-like names (``*_TOKEN``, ``*_KEY``, ``*PASSWORD*``, ``*SECRET*``) in ``env`` or a node's ``env``
        become ``secret_env`` names; their values are dropped so they never reach a script, YAML or the database
        (``moved_secrets`` lists them for the finding)."""
        data, moved = _split_secrets(data) if isinstance(data, dict) else (data, [])
        spec = handler(data)
        if moved and isinstance(spec, JobSpec):
            spec._moved_secrets = moved
        return spec

    @property
    def moved_secrets(self) -> list[str]:
        return list(self._moved_secrets)

    @field_validator("hf_configs")
    @classmethod
    def _hf_configs_ok(cls, v: dict[str, dict]) -> dict[str, dict]:
        for model, cfg in v.items():
            try:
                from_hf_config(cfg)
            except ValueError as e:
                raise ValueError(f"the config.json given for {model}: {e}") from None
        return v

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        try:
            return check_name(v, "job name", longest=64)
        except SpecError as e:
            raise ValueError(e.problems[0][1]) from None

    @field_validator("swift_version")
    @classmethod
    def _version_ok(cls, v: str) -> str:
        dialect_of(v)  # a version without GRPO is refused with its reason
        return v

    @field_validator("env")
    @classmethod
    def _env_ok(cls, v: dict[str, str]) -> dict[str, str]:
        return check_no_secrets(check_env_names(v))

    @field_validator("secret_env")
    @classmethod
    def _secret_names_ok(cls, v: list[str]) -> list[str]:
        return check_env_names(v)

    def value(self, decl: ArgDecl):
        """An argument's value for this job: as set, else its engine's default in the target version (what ms-swift
        assumes when the flag is not given)."""
        owner = decl.owner(self)
        if decl.name in owner.model_fields_set:
            return getattr(owner, decl.name)
        return decl.on(self.engine).swift_default(self.swift_version)

    def value_of(self, path: str):
        """``value`` of the argument at a dotted path (``train.tuner_type``)."""
        return self.value(ARGS_BY_PATH[path])

    def numbered(self, role: str) -> list[tuple[int, Node]]:
        """(index in cluster.nodes, node) of one role's nodes in the order listed: a trainer's place in this list is
        its NODE_RANK, a rollout node's its number among the rollout servers (ROLLOUT_INDEX)."""
        return [(i, n) for i, n in enumerate(self.cluster.nodes) if n.role == role]

    def trainer_nodes(self) -> list[Node]:
        """The trainer nodes, by NODE_RANK."""
        return [n for _, n in self.numbered("trainer")]

    def rollout_nodes(self) -> list[Node]:
        return [n for _, n in self.numbered("rollout")]


# ---------------------------------------------------------------------------------------------------------------
# The field registry: what the form, the CLI renderer, the importer and the docs iterate over.

SECTIONS: dict[str, type[BaseModel]] = {"train": TrainArgs, "rollout": RolloutArgs, "server": ServerArgs}
SECTION_APPLIES = {"server": "server"}  # the swift rollout arguments act in server mode only
# grpo-ui's own settings: section → (model, where its fields live in a JobSpec; '[i]': in every node)
SETTING_SECTIONS: dict[str, tuple[type[BaseModel], str]] = {
    "job": (JobSpec, ""), "cluster": (ClusterSpec, "cluster."), "node": (Node, "cluster.nodes[i]."),
    "slurm": (SlurmSpec, "slurm."), "estimate": (EstimateSpec, "estimate.")}
STRUCTURE = {"train", "rollout", "server", "cluster", "slurm", "estimate", "nodes", "unresolved", "import_errors",
             "hf_configs"}  # not form settings


ARGS: tuple[ArgDecl, ...] = tuple(d for s, m in SECTIONS.items() for d in arg_decls(s, m, SECTION_APPLIES.get(s)))
ARGS_BY_PATH: dict[str, ArgDecl] = {d.path: d for d in ARGS}
SETTINGS: tuple[SettingDecl, ...] = tuple(d for s, (m, prefix) in SETTING_SECTIONS.items()
                                          for d in setting_decls(s, m, prefix, STRUCTURE))
SETTINGS_BY_PATH: dict[str, SettingDecl] = {d.path: d for d in SETTINGS}
