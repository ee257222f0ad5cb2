"""What one host is, read in one remote probe: its versions (in the node's environment), GPUs (nvidia-smi, or NVML
for the local node), driver and torch CUDA, the files the job names (from the node's working directory), the
credentials its trackers and hubs need, disk and clock; from trainer rank 0 also whether rollout servers started
outside the job answer /health/."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from grpo_ui.backends.remote.gpu import APPS, INVENTORY, nvml_inventory, parse_row, query
from grpo_ui.backends.remote.runner import Runner
from grpo_ui.checks.rules.credentials import undeclared
from grpo_ui.core import shell
from grpo_ui.spec.files import job_files, node_workdir
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import resolve

PACKAGES = ("ms-swift", "torch", "vllm", "trl", "transformers", "deepspeed", "ray")
MUST_MATCH = ("ms-swift", "torch", "vllm", "ray")  # Ray refuses a node whose Ray or Python differs from the head's
PROBE = r"""
import json, os, re, shutil, sys, time
from importlib import metadata, util
v = {}
for p in %(packages)r:
    try:
        v[p] = metadata.version(p)
    except metadata.PackageNotFoundError:
        v[p] = None
torch_cuda = None
try:  # torch/version.py states the CUDA it was built for; read, not imported (importing torch takes seconds)
    spec = util.find_spec("torch")
    text = open(os.path.join(spec.submodule_search_locations[0], "version.py")).read()
    found = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    torch_cuda = found and found.group(1)
except Exception:
    pass
root = os.path.expanduser(%(root)r)
while not os.path.exists(root):
    root = os.path.dirname(root) or "/"
os.environ.update(%(job_env)r)  # swift runs with the job's environment: files and logins are found with it
paths = {p: any(os.path.exists(os.path.expanduser(w)) for w in where) for p, where in %(paths)r.items()}
def logged_in(env, path, marker):
    if os.environ.get(env):
        return True
    try:
        with open(os.path.expanduser(path)) as f:
            return marker in f.read()
    except OSError:
        return False
credentials = {env: logged_in(env, path, marker) for env, path, marker in %(credentials)r}
def answer(url):
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.status)
    except Exception as e:
        return str(getattr(e, "reason", None) or e)[:200]
health = {where: answer(url) for where, url in %(health)r}
print(json.dumps({"python": sys.version.split()[0], "versions": v, "paths": paths, "time": time.time(),
                  "credentials": credentials, "health": health,
                  "torch_cuda": torch_cuda,
                  "disk_free_gib": shutil.disk_usage(root).free / 2**30,
                  "proxy": [k for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY") if os.environ.get(k)]}))
"""
# One remote command: the GPUs, the compute processes (by GPU UUID), and the header's "CUDA Version" (the newest
# CUDA the driver supports).
GPU_COMMAND = (f"{query(INVENTORY)} && echo '#apps' && {query(APPS, 'compute-apps')} && echo '#header' && "
               "nvidia-smi | head -n 8")


@dataclass
class HostFacts:
    host: str
    reachable: bool = False
    python: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    gpus: list[dict] = field(default_factory=list)  # gpu_index, gpu_uuid, name, mem_total, mem_used (MiB),
    #                                                 processes [{pid, used_mib}]
    gpu_source: str | None = None  # "nvml" (local node) or "nvidia-smi"
    driver: str | None = None
    driver_cuda: str | None = None
    torch_cuda: str | None = None
    disk_free_gib: float | None = None
    clock_skew_s: float | None = None
    proxy: list[str] = field(default_factory=list)
    paths: dict[str, bool] = field(default_factory=dict)  # each file the job names (and 'workdir'): found?
    credentials: dict[str, bool] = field(default_factory=dict)  # each undeclared credential: in env or a login file?
    health: dict[str, str] = field(default_factory=dict)  # rank 0: each outside server's /health/ status or error
    error: str | None = None
    findings: list = field(default_factory=list)  # what preflight found on this host (preflight.host's findings)
    ray_resources: dict[str, float] | None = None  # a running Ray cluster: the GPUs and CPUs Ray counts on this node


WORKDIR = "workdir"  # the key of the node's working directory among the paths checked


def local_paths(spec: JobSpec, index: int) -> dict[str, list[str]]:
    """The files the job names (grpo_ui.spec.files) → the paths the node's swift may open for each, relative ones
    from the node's working directory (without one, rule PATH-RELATIVE-NO-WORKDIR reports them instead); and the
    working directory itself, which the node script cd's into."""
    workdir = node_workdir(spec, index)
    out = {f.value: list(f.on_node(workdir)) for f in job_files(spec) if workdir or not f.relative}
    return out | ({WORKDIR: [workdir]} if workdir else {})


def outside_servers(spec: JobSpec, index: int) -> list[tuple[str, str]]:
    """Trainer rank 0 checks the rollout servers started outside the job: [(host:port, its /health/ URL)]."""
    trainers = [i for i, n in enumerate(spec.cluster.nodes) if n.role == "trainer"]
    eff = resolve(spec)
    if not (eff.server and spec.cluster.external_rollout and trainers[:1] == [index]):
        return []
    return [(f"{h}:{p}", f"http://{f'[{h}]' if ':' in h else h}:{p}/health/") for h, p in eff.server_endpoints]


def activate(python_env: str | None) -> str:
    if not python_env:
        return ""
    env = shell.path(python_env)
    return f"export PATH={env}/bin:$PATH; "


def probe(spec: JobSpec, index: int, runner: Runner) -> HostFacts:
    """One remote command per node: the Python probe in the node's environment, then GPU_COMMAND (skipped for the
    local node when NVML answers)."""
    node = spec.cluster.nodes[index]
    facts = HostFacts(node.host, reachable=True)
    nvml = node.is_local and nvml_facts(facts)
    code = PROBE % {"packages": PACKAGES, "paths": local_paths(spec, index), "root": spec.cluster.run_root,
                    "credentials": [(c.env, c.login_file, c.marker) for c, _ in undeclared(spec)],
                    "job_env": {**spec.env, **node.env},
                    "health": outside_servers(spec, index)}
    gpu = "" if nvml else f"; echo '#gpu'; {GPU_COMMAND} 2> /dev/null; true"
    res = runner.run(activate(node.python_env) + f"python3 -c {shell.quote(code)} || exit $?{gpu}", timeout=60)
    if res.rc:
        facts.error = f"python probe failed in {node.python_env or 'the login environment'}: {res.err.strip()[-300:]}"
        return facts
    probe, _, smi = res.out.partition("#gpu\n")
    data = json.loads(probe.strip().splitlines()[-1])
    facts.python, facts.versions, facts.paths = data["python"], data["versions"], data["paths"]
    facts.credentials, facts.health = data["credentials"], data["health"]
    facts.disk_free_gib, facts.proxy = data["disk_free_gib"], data["proxy"]
    facts.clock_skew_s = data["time"] - time.time()
    facts.torch_cuda = data["torch_cuda"]
    if not nvml:
        parse_nvidia_smi(smi, facts)
    return facts


def parse_nvidia_smi(out: str, facts: HostFacts) -> None:
    """GPUs, their compute processes matched by UUID, and the driver's CUDA version from GPU_COMMAND's output."""
    gpus, _, rest = out.partition("#apps\n")
    apps, _, header = rest.partition("#header\n")
    rows = [r for r in (parse_row(line, INVENTORY) for line in gpus.splitlines()) if r]
    by_uuid = {r["gpu_uuid"]: {**r, "processes": []} for r in rows}
    facts.gpus = list(by_uuid.values())
    facts.driver = rows[-1]["driver"] if rows else None
    for row in (parse_row(line, APPS) for line in apps.splitlines()):
        if row and row["gpu_uuid"] in by_uuid:
            by_uuid[row["gpu_uuid"]]["processes"].append({"pid": row["pid"], "used_mib": row["used_mib"]})
    found = re.search(r"CUDA Version:\s*([0-9.]+)", header)
    facts.driver_cuda = found.group(1) if found else None
    facts.gpu_source = "nvidia-smi" if facts.gpus else None


def nvml_facts(facts: HostFacts) -> bool:
    """GPU facts of this machine from NVML; False (nothing changed) when NVML is missing or fails."""
    found = nvml_inventory()
    if found:
        (facts.gpus, facts.driver, facts.driver_cuda), facts.gpu_source = found, "nvml"
    return found is not None
