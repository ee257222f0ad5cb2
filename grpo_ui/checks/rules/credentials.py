"""The keys a job's trackers and hubs read on the nodes (grpo_ui.knowledge.credentials): declared, so the Launch page
asks for them, unless the job's own arguments carry them."""

from __future__ import annotations

from grpo_ui.checks.rules.base import rule
from grpo_ui.core.findings import finding
from grpo_ui.knowledge.credentials import REPORTERS, Credential, needed
from grpo_ui.spec.fields import ENGINES
from grpo_ui.spec.model import JobSpec

GIVEN_BY_FLAG = {"SWANLAB_API_KEY": "--swanlab_token", "HF_TOKEN": "--hub_token",
                 "MODELSCOPE_API_TOKEN": "--hub_token"}  # ms-swift arguments that carry the key themselves


def _flag_on(args: list[str], name: str) -> bool:
    """``--name`` given as a switch or with a true value in verbatim arguments."""
    for i, token in enumerate(args):
        flag, eq, value = token.partition("=")
        if flag == name:
            value = value if eq else (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--")
                                      else "true")
            return value.lower() in ("true", "1", "yes")
    return False


def credentials_needed(spec: JobSpec) -> list[tuple[Credential, str]]:
    """The credentials the job reads on its nodes and does not carry in its own arguments, each with why."""
    t, args = spec.train, spec.extra_args
    from_hf = spec.env.get("USE_HF", "0").lower() in ("1", "true") or _flag_on(args, "--use_hf")
    models = [m for m in (t.model, t.ref_model, *(t.reward_model or [])) if m]
    return [(c, why) for c, why in needed(t.report_to, models, from_hf, _flag_on(args, "--push_to_hub"))
            if GIVEN_BY_FLAG.get(c.env) not in args]


def undeclared(spec: JobSpec) -> list[tuple[Credential, str]]:
    return [(c, why) for c, why in credentials_needed(spec) if c.env not in spec.secret_env]


@rule(engines=ENGINES)
def credentials(spec, eff):
    missing = undeclared(spec)
    if not missing:
        return
    names = [c.env for c, _ in missing]
    fields = ["secret_env"] + ["train.report_to" if c in REPORTERS.values() else "train.model" for c, _ in missing]
    yield finding("CREDENTIAL-UNDECLARED", "warning", tuple(dict.fromkeys(fields)),
                  " ".join(f"{why}: {c.what} reads {c.env} on the nodes." for c, why in missing)
                  + f" {' and '.join(names)} {'is' if len(names) == 1 else 'are'} not among the job's secrets, so the "
                  "Launch page does not ask for them; unless every node is logged in already, the job fails once the "
                  "model has loaded.",
                  f"Declare {' and '.join(names)} (the Launch page then asks for the values, sent in a 0600 file), or "
                  f"run {' / '.join(f'`{c.login}`' for c, _ in missing)} on every node; preflight checks for one or "
                  "the other.", {"secret_env": [*spec.secret_env, *names]})
