"""Names that reach a shell, a file system or another host: job names and ids, host names and addresses,
environment variable names, and which of them are secrets (their values travel in a 0600 file, never in a spec)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from grpo_ui.spec.errors import SpecError

# The launch variables: torchrun's and CUDA's, set by every node script from the cluster settings
# (spec.resolve.Resolved.launch_env gives their values).
LAUNCH_ENV = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES")
RUN_TOKEN = "GRPO_UI_RUN"  # the SSH launcher marks every process of a node with it (backends.ssh)
RESERVED_ENV = (*LAUNCH_ENV, RUN_TOKEN)  # a spec's env must not change them
# Which environment names hold secrets (their values travel in the 0600 secrets file, never in a spec, script or
# database): a name ending in _TOKEN or _KEY (HF_TOKEN, MODELSCOPE_API_TOKEN, WANDB_API_KEY, OPENAI_API_KEY,
# SWANLAB_API_KEY, AWS_SECRET_ACCESS_KEY), or one with PASSWORD or SECRET anywhere. Only at the end for TOKEN and KEY:
# GRPO scripts also export TOKENIZERS_PARALLELISM (Hugging Face tokenizers' fork warning), IMAGE_MAX_TOKEN_NUM and
# VIDEO_MAX_TOKEN_NUM (Qwen-VL's vision-token caps, which the memory estimate reads) and HF_TOKEN_PATH (a path), whose
# values a job needs as they are.
_SECRET_NAME = re.compile(r"(_TOKEN|_KEY)$|PASSWORD|SECRET", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name holds a secret (see _SECRET_NAME); the spec, the importer and
    the command line all ask here."""
    return bool(_SECRET_NAME.search(name))


def check_env_names(names, reserved: tuple[str, ...] = RESERVED_ENV):
    """Variable names as bash exports them (they reach scripts unquoted), none of them ``reserved``; ValueError lists
    the bad ones."""
    bad = [k for k in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    if bad:
        raise ValueError(f"not valid environment variable names: {bad}")
    taken = [k for k in names if k in reserved]
    if taken:
        raise ValueError(f"{', '.join(taken)} cannot be set in env: grpo-ui sets it on every node from the cluster "
                         "settings" + (" (CUDA_VISIBLE_DEVICES from each node's gpus)" if "CUDA_VISIBLE_DEVICES" in
                                       taken else ""))
    return names


def check_no_secrets(env: dict[str, str]) -> dict[str, str]:
    """A spec loaded whole has token-like names moved to secret_env already; one changed field by field must not
    bring them back (ValueError names them)."""
    found = [k for k in env if is_secret_name(k)]
    if found:
        raise ValueError(f"{', '.join(found)} look(s) like secrets: list the name in secret_env instead (the value "
                         "travels in a 0600 file at launch, never in the spec)")
    return env


def check_name(value: str, what: str = "job id", longest: int = 128) -> str:
    """A name that becomes a file or directory name (job ids, job names): letters, digits, '.', '_' and '-', not
    starting with '.' or '-' (so never '..' or an option), at most ``longest`` characters. Raises SpecError."""
    if not re.fullmatch(rf"[A-Za-z0-9_][A-Za-z0-9._-]{{0,{longest - 1}}}", value or ""):
        raise SpecError([(what, f"{value!r} is not usable as a {what}: use up to {longest} letters, digits, '.', "
                                "'_' or '-', starting with a letter, digit or '_'")])
    return value


def is_loopback(host: str) -> bool:
    """localhost or a loopback address (127.0.0.0/8, ::1): this machine only, which no other node can reach."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip()).is_loopback
    except ValueError:
        return False


# What example scripts write for the user to fill in: a dotted quad with x's for numbers (ms-swift's multi-node
# examples' MASTER_ADDR=xxx.xxx.xxx.xxx, 10.0.x.x) or a name that says it is yours to give (your_master_ip)
_PLACEHOLDER = re.compile(r"(?i)^(?:(?:\d{1,3}|x+)\.){3}(?:\d{1,3}|x+)$|^your[-_]")


def is_placeholder(host: str) -> bool:
    """A host or address left as an example script's stand-in (xxx.xxx.xxx.xxx, your_master_ip): no machine has it."""
    text = host.strip()
    return bool(_PLACEHOLDER.search(text)) and not text.replace(".", "").isdigit()


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_ALIAS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")


def check_host(value: str, alias: bool = False) -> str:
    """An IPv4 or IPv6 address (without brackets: ms-swift adds them in URLs), a host name (RFC 1123) or, with
    ``alias``, an ~/.ssh/config alias (letters, digits, '.', '_', '-'). ValueError says which forms are accepted."""
    forms = "an IPv4/IPv6 address, a host name" + (" or an ~/.ssh/config alias" if alias else "")
    if value.startswith("[") and value.endswith("]"):
        raise ValueError(f"write the IPv6 address {value[1:-1]!r} without brackets")
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.removesuffix(".").split(".")
    if len(value) <= 253 and all(_LABEL.fullmatch(x) for x in labels) and not all(x.isdigit() for x in labels):
        return value
    if alias and _ALIAS.fullmatch(value) and not value.replace(".", "").isdigit():
        return value
    raise ValueError(f"{value!r} is not {forms}")


def check_jobs_address(value: str) -> str:
    """A Ray Jobs API address: http(s)://HOST:PORT with HOST as check_host accepts it (an IPv6 address in brackets, as
    URLs write it), nothing else (no user, path, query or fragment). ValueError says what is wrong."""
    try:
        url = urlsplit(value)
        port = url.port
    except ValueError as e:
        raise ValueError(f"{value!r} is not an http://HOST:PORT address: {e}") from None
    if url.scheme not in ("http", "https") or not url.hostname or port is None or url.username or url.password \
            or url.path not in ("", "/") or url.query or url.fragment or any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not a Ray Jobs API address: write http://HOST:PORT (e.g. http://10.0.0.1:8265), "
                         "with no user, path or query")
    check_host(url.hostname)
    return value.rstrip("/")
