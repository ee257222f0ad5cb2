"""A model's config.json from the hub the job downloads it from, for a hub id the catalogue lacks: ModelScope by
default, as ms-swift does, or Hugging Face when the job says use_hf. Fetched once with the user's token and kept in
the app's data directory (``hub-configs/``); the places that assess a job (the CLI, Configure, the launch plan) call
``lookup`` and pass the architecture down (``resolve(spec, arch)``).

The hubs' addresses and tokens come from the variables their own clients read: HF_ENDPOINT and HF_TOKEN (or the older
HUGGING_FACE_HUB_TOKEN) for huggingface_hub; MODELSCOPE_ENDPOINT (or the older MODELSCOPE_DOMAIN, a bare domain
meaning https) and MODELSCOPE_API_TOKEN for modelscope. Files are read where those clients read them:
``{endpoint}/{repo}/resolve/main/config.json`` (Hugging Face, token as a Bearer header) and
``{endpoint}/api/v1/models/{repo}/repo?Revision=master&FilePath=config.json`` (ModelScope, token as its
``m_session_id`` cookie and a Bearer header).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from grpo_ui.core.private import home
from grpo_ui.knowledge.catalog import ModelArch, from_hf_config, parse_hf_config

HF_ENDPOINT = "https://huggingface.co"
MODELSCOPE_ENDPOINT = "https://www.modelscope.cn"
RETRY_AFTER_S = 60.0  # a failed fetch is not retried sooner (the form reruns on every change)
MAX_CONFIG_BYTES = 1 << 20
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_failures: dict[tuple[str, str], tuple[float, HubError]] = {}


class HubError(ValueError):
    """The hub cannot give the config.json; the message names the model, the hub and what to do."""


@dataclass(frozen=True)
class Hub:
    """One hub as its client library sees it: its name, where it answers and the token to send."""

    name: str
    endpoint: str
    token: str | None
    env_endpoint: str  # the variable that moves it
    env_token: str

    def url(self, repo: str) -> str:
        if self.name == "Hugging Face":
            return f"{self.endpoint}/{repo}/resolve/main/config.json"
        return (f"{self.endpoint}/api/v1/models/{repo}/repo?"
                + urllib.parse.urlencode({"Revision": "master", "FilePath": "config.json"}))

    def request(self, repo: str) -> urllib.request.Request:
        headers = {"User-Agent": "grpo-ui"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
            if self.name == "ModelScope":
                headers["Cookie"] = f"m_session_id={self.token}"
        return urllib.request.Request(self.url(repo), headers=headers)


def hub_for(use_hf: bool, env: dict | None = None) -> Hub:
    """The hub a job's model comes from (ms-swift's use_hf / USE_HF), with the endpoint and token its client uses."""
    env = os.environ if env is None else env
    if use_hf:
        return Hub("Hugging Face", (env.get("HF_ENDPOINT") or HF_ENDPOINT).rstrip("/"),
                   env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN"), "HF_ENDPOINT", "HF_TOKEN")
    endpoint = env.get("MODELSCOPE_ENDPOINT") or env.get("MODELSCOPE_DOMAIN") or MODELSCOPE_ENDPOINT
    if not endpoint.startswith(("http://", "https://")):
        endpoint = "https://" + endpoint
    return Hub("ModelScope", endpoint.rstrip("/"), env.get("MODELSCOPE_API_TOKEN"), "MODELSCOPE_ENDPOINT",
               "MODELSCOPE_API_TOKEN")


def is_hub_id(model: str | None) -> bool:
    """owner/name, and no local file or directory of that name (ms-swift reads a local path first)."""
    if not model or not _HUB_ID.match(model):
        return False
    return not Path(model).exists()


def cache_file(hub: Hub, repo: str) -> Path:
    """Where a fetched config.json is kept: per hub, its address (a mirror's copy is not the hub's) and repo."""
    host = urllib.parse.urlsplit(hub.endpoint).netloc.replace(":", "_")
    return home() / "hub-configs" / hub.name.replace(" ", "-").lower() / host / repo / "config.json"


def fetch_config(repo: str, hub: Hub, timeout: float = 10.0) -> dict:
    """config.json of ``repo`` on ``hub``: the cached copy, else fetched and cached. HubError when the hub says no
    (gated, private, missing) or cannot be reached."""
    cached = cache_file(hub, repo)
    if cached.is_file():
        return parse_hf_config(cached.read_text())
    key = (hub.endpoint, repo)
    if key in _failures and time.monotonic() - _failures[key][0] < RETRY_AFTER_S:
        raise _failures[key][1]
    try:
        with urllib.request.urlopen(hub.request(repo), timeout=timeout) as response:
            text = response.read(MAX_CONFIG_BYTES + 1).decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        error = _refused(repo, hub, e.code)
    except (urllib.error.URLError, OSError) as e:  # no network, DNS, refused, timed out
        reason = getattr(e, "reason", e)
        error = HubError(f"cannot reach {hub.name} at {hub.endpoint} for {repo}'s config.json ({reason}). Offline? "
                         f"Give the model's config.json (Configure's model step, or --config), or point "
                         f"{hub.env_endpoint} at a mirror.")
    else:
        try:
            config = parse_hf_config(text)
            from_hf_config(config)
        except ValueError as e:
            error = HubError(f"{hub.name}'s config.json for {repo} is not a model configuration grpo-ui reads: {e}")
        else:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(config))
            return config
    _failures[key] = (time.monotonic(), error)
    raise error


def _refused(repo: str, hub: Hub, status: int) -> HubError:
    token = f"the token in {hub.env_token}" if hub.token else f"no token ({hub.env_token} is not set)"
    if status in (401, 403):
        return HubError(f"{hub.name} refused {repo}'s config.json (HTTP {status}) with {token}: the model is gated "
                        f"or private. Accept its licence on {hub.name} and set {hub.env_token}, or give its "
                        "config.json yourself.")
    if status == 404:
        other = "Hugging Face (set train.use_hf)" if hub.name == "ModelScope" else "ModelScope (unset train.use_hf)"
        return HubError(f"{hub.name} has no model {repo} (HTTP 404). Check the id, or the job may mean {other}.")
    return HubError(f"{hub.name} answered HTTP {status} for {repo}'s config.json; try again later or give the "
                    "config.json yourself.")


def lookup(model: str | None, use_hf: bool, timeout: float = 10.0) -> ModelArch | None:
    """The architecture of a hub id from its config.json (cached); None when ``model`` is not a hub id (a local
    path). HubError as fetch_config."""
    if not is_hub_id(model):
        return None
    return from_hf_config(fetch_config(model, hub_for(use_hf), timeout), name=model.split("/")[-1])
