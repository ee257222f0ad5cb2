"""Which secrets a job's integrations read on the nodes: the experiment trackers ``report_to`` names and the model
hubs. Each is an environment variable its library reads, or a file its ``login`` command leaves in the home
directory instead. Without either, the job fails after the model has loaded (wandb: "api_key not configured
(no-tty)"). The rule that asks for them, preflight and the Launch page read this one table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Credential:
    """A secret one integration needs: the variable it reads, the login files that serve instead, and the source."""

    env: str
    what: str                      # who reads it, for the messages
    login: str                     # the command that stores it on a node instead
    login_file: str                # where that command stores it
    marker: str                    # text the file holds once it has this key ("" when the file is only this key)
    source: str


WANDB = Credential("WANDB_API_KEY", "Weights & Biases", "wandb login",
                   "~/.netrc", "api.wandb.ai", "wandb docs, 'wandb login': the key goes to ~/.netrc; WANDB_API_KEY "
                   "overrides it")
SWANLAB = Credential("SWANLAB_API_KEY", "SwanLab", "swanlab login",
                     "~/.swanlab/.netrc", "", "ms-swift SwanlabArguments: 'You can also specify it using the "
                     "SWANLAB_API_KEY environment variable'; swanlab login stores it in ~/.swanlab/.netrc")
HF_TOKEN = Credential("HF_TOKEN", "the Hugging Face Hub", "huggingface-cli login",
                      "~/.cache/huggingface/token", "", "huggingface_hub constants: HF_TOKEN, else HF_TOKEN_PATH "
                      "($HF_HOME/token)")
MODELSCOPE_TOKEN = Credential("MODELSCOPE_API_TOKEN", "the ModelScope Hub", "modelscope login",
                              "~/.modelscope/credentials", "", "ms-swift swift/hub/hub.py: 'Please specify a token by "
                              "`--hub_token` or `MODELSCOPE_API_TOKEN=xxx`'")

REPORTERS = {"wandb": WANDB, "swanlab": SWANLAB}
# Hugging Face organisations whose checkpoints ask each user to accept a licence first ("You need to agree to share
# your contact information to access this model" on their model pages): downloading them needs a token.
GATED_ON_HF = ("meta-llama/", "google/gemma", "mistralai/")


def needed(report_to: list[str], models: list[str], from_hf: bool, push_to_hub: bool) -> list[tuple[Credential, str]]:
    """The credentials a job needs, each with why: ``report_to`` as set, the model ids it downloads, whether it
    downloads from Hugging Face (USE_HF, --use_hf) rather than ModelScope, and whether it pushes to a hub."""
    out = [(REPORTERS[r], f"report_to {r}") for r in report_to if r in REPORTERS]
    gated = [m for m in models if m.startswith(GATED_ON_HF)]
    if from_hf and gated:
        out.append((HF_TOKEN, f"{gated[0]} is gated on Hugging Face"))
    if push_to_hub:
        out.append((HF_TOKEN, "push_to_hub") if from_hf else (MODELSCOPE_TOKEN, "push_to_hub"))
    return list({c.env: (c, why) for c, why in out}.values())
