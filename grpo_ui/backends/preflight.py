"""Preflight: check every host in parallel before a launch, as findings (the same form as the validation rules)
plus one HostFacts record per node: reachable, GPUs (nvidia-smi, or NVML for the local node), driver and torch CUDA
versions, versions in the node's environment, ports, paths, disk, clock."""

from __future__ import annotations

import json
import posixpath
import re
import time
from dataclasses import dataclass, field

from grpo_ui.backends.remote.gpu import APPS, INVENTORY, nvml_inventory, parse_row, query
from grpo_ui.backends.remote.pyspy import find_py_spy, py_spy_candidates
from grpo_ui.backends.remote.runner import Runner, parallel, runner_for
from grpo_ui.backends.remote.ssh import Pool, SshError, UnknownHostKey
from grpo_ui.core import shell
from grpo_ui.core.findings import Finding, finding
from grpo_ui.knowledge.compat import conflicts
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.fields import parse_version
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve

PACKAGES = ("ms-swift", "torch", "vllm", "trl", "transformers", "deepspeed")
MUST_MATCH = ("ms-swift", "torch", "vllm")
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
paths = {p: any(os.path.exists(os.path.expanduser(w)) for w in where) for p, where in %(paths)r.items()}
root = os.path.expanduser(%(root)r)
while not os.path.exists(root):
    root = os.path.dirname(root) or "/"
print(json.dumps({"python": sys.version.split()[0], "versions": v, "paths": paths, "time": time.time(),
                  "torch_cuda": torch_cuda,
                  "disk_free_gib": shutil.disk_usage(root).free / 2**30,
                  "proxy": [k for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY") if os.environ.get(k)]}))
"""
# One remote command: the GPUs, the compute processes (by GPU UUID), and the header's "CUDA Version" (the newest
# CUDA the driver supports).
GPU_COMMAND = (f"{query(INVENTORY)} && echo '#apps' && {query(APPS, 'compute-apps')} && echo '#header' && "
               "nvidia-smi | head -n 8")
LISTEN = ("import socket, sys, time\nsocks = []\nfor p in sys.argv[1:]:\n    s = socket.socket()\n"
          "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n    s.bind(('0.0.0.0', int(p)))\n"
          "    s.listen(16)\n    socks.append(s)\ntime.sleep(15)")


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
    paths: dict[str, bool] = field(default_factory=dict)
    error: str | None = None


def _local_paths(spec: JobSpec, index: int) -> dict[str, list[str]]:
    """Model and dataset values that are paths (not hub ids: they start with / . or ~) → the files the node's swift
    may read for them: relative ones from the node's workdir, as ms-swift resolves them from its cwd (without a
    workdir, rule PATH-RELATIVE-NO-WORKDIR reports them instead). A dataset value is read as ms-swift's dataset
    syntax reads it (``path[:subsets][#sample]``): the whole value if that file exists, else the part before the
    last '#', else that part before its first ':'."""
    workdir = spec.cluster.nodes[index].workdir or spec.cluster.workdir

    def candidates(value: str, dataset: bool) -> list[str]:
        sampled = value.rsplit("#", 1)[0]
        return list(dict.fromkeys([value, sampled, sampled.split(":", 1)[0]] if dataset else [value]))

    values = [(spec.train.model or "", False), *((d, True) for d in spec.train.dataset)]
    return {v: [posixpath.join(workdir, c) if c.startswith(".") else c for c in candidates(v, dataset)]
            for v, dataset in values if v.startswith(("/", ".", "~")) and (workdir or not v.startswith("."))}


def _activate(python_env: str | None) -> str:
    if not python_env:
        return ""
    env = shell.path(python_env)
    return f"export PATH={env}/bin:$PATH; "


def _probe(spec: JobSpec, index: int, runner: Runner) -> HostFacts:
    """One remote command per node: the Python probe in the node's environment, then GPU_COMMAND (skipped for the
    local node when NVML answers)."""
    node = spec.cluster.nodes[index]
    facts = HostFacts(node.host, reachable=True)
    nvml = node.is_local and _nvml_facts(facts)
    code = PROBE % {"packages": PACKAGES, "paths": _local_paths(spec, index), "root": spec.cluster.run_root}
    gpu = "" if nvml else f"; echo '#gpu'; {GPU_COMMAND} 2> /dev/null; true"
    res = runner.run(_activate(node.python_env) + f"python3 -c {shell.quote(code)} || exit $?{gpu}", timeout=60)
    if res.rc:
        facts.error = f"python probe failed in {node.python_env or 'the login environment'}: {res.err.strip()[-300:]}"
        return facts
    probe, _, smi = res.out.partition("#gpu\n")
    data = json.loads(probe.strip().splitlines()[-1])
    facts.python, facts.versions, facts.paths = data["python"], data["versions"], data["paths"]
    facts.disk_free_gib, facts.proxy = data["disk_free_gib"], data["proxy"]
    facts.clock_skew_s = data["time"] - time.time()
    facts.torch_cuda = data["torch_cuda"]
    if not nvml:
        _parse_nvidia_smi(smi, facts)
    return facts


def _parse_nvidia_smi(out: str, facts: HostFacts) -> None:
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


def _nvml_facts(facts: HostFacts) -> bool:
    """GPU facts of this machine from NVML; False (nothing changed) when NVML is missing or fails."""
    found = nvml_inventory()
    if found:
        (facts.gpus, facts.driver, facts.driver_cuda), facts.gpu_source = found, "nvml"
    return found is not None


def _taken(runner: Runner, ports: list[int]) -> list[int]:
    """The ports something already listens on (on the node itself)."""
    cmd = f"for p in {shell.join(ports)}; do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && echo $p; done"
    return [int(p) for p in runner.run(cmd, timeout=15).out.split()]


def _unreachable(runner: Runner, endpoints: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (host, port)s this node cannot open a TCP connection to within 5 s (--norc: see backends.ssh)."""
    hps = shell.join(f"{h}:{p}" for h, p in endpoints)
    cmd = (f'for hp in {hps}; do timeout 5 bash --norc -c "exec 3<>/dev/tcp/${{hp%:*}}/${{hp##*:}}" 2>/dev/null '
           '|| echo "$hp"; done')
    down = set(runner.run(cmd, timeout=5 * len(endpoints) + 15).out.split())
    return [(h, p) for h, p in endpoints if f"{h}:{p}" in down]


def _listen(runner: Runner, node: Node, ports: list[int]) -> str:
    """Listen on the ports on that node for at most 15 s (nothing of the job runs yet); returns the listener's pid
    once the last port accepts connections."""
    cmd = (_activate(node.python_env) + f"nohup python3 -c {shell.quote(LISTEN)} {shell.join(ports)} "
           f"> /dev/null 2>&1 & pid=$!; for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{int(ports[-1])}) "
           "2>/dev/null && break; sleep 0.05; done; echo $pid")
    return runner.run(cmd, timeout=20).out.strip()


def _master_checks(eff: Resolved, runners: dict[int, Runner], trainers: list[int]) -> list[Finding]:
    """MASTER_PORT free on the master and reachable from every other trainer node."""
    spec = eff.spec
    master, port, addr = trainers[0], eff.master_port, eff.master_addr
    if _taken(runners[master], [port]):
        return [finding("PREFLIGHT-PORT-TAKEN", "error", "cluster.master_port",
                        f"MASTER_PORT {port} is already in use on {spec.cluster.nodes[master].host}.",
                        "Pick another master_port, or stop what listens there.")]
    if len(trainers) < 2:
        return []
    pid = _listen(runners[master], spec.cluster.nodes[master], [port])
    try:
        results = parallel(lambda i: _unreachable(runners[i], [(addr, port)]), trainers[1:])
    finally:
        runners[master].run(shell.join(["kill", pid]) + " 2>/dev/null", timeout=10)
    return [finding("PREFLIGHT-MASTER-UNREACHABLE", "error", f"cluster.nodes[{i}].host",
                    f"{spec.cluster.nodes[i].host} cannot reach MASTER_ADDR {addr}:{port}: the rendezvous would hang.",
                    "Open the port between the nodes (firewall, security group) or set master_addr to an address "
                    "the workers can reach.") for i, down in results if down]


def _rollout_checks(eff: Resolved, runners: dict[int, Runner], rank0: int) -> list[Finding]:
    """Server mode: every rollout server's HTTP port and NCCL group port free on its node and reachable from trainer
    rank 0 (through a short-lived listener); servers outside the cluster are only probed."""
    spec = eff.spec
    out, nodes = [], spec.cluster.nodes
    own = [] if spec.rollout.vllm_server_host else [i for i, n in enumerate(nodes) if n.role == "rollout"]
    r0, http_field = nodes[rank0].host, "rollout.vllm_server_port" if spec.rollout.vllm_server_host else "server.port"
    for k, ((host, http), group) in enumerate(zip(eff.server_endpoints, eff.group_ports, strict=True)):
        ports = {http: ("HTTP port", http_field), group: ("group port", "rollout.vllm_server_group_port")}
        index = own[k] if k < len(own) else None
        if index is None or index not in runners:
            for h, p in _unreachable(runners[rank0], [(host, p) for p in ports]):
                out.append(finding("PREFLIGHT-ROLLOUT-UNREACHABLE", "warning", ports[p][1],
                                   f"Trainer rank 0 ({r0}) cannot reach rollout server {h}:{p} ({ports[p][0]}); fine "
                                   "if that server is not started yet.",
                                   f"Check that {h} accepts connections on {p} from {r0}."))
            continue
        taken = _taken(runners[index], list(ports))
        for p in taken:
            out.append(finding("PREFLIGHT-PORT-TAKEN", "error", ports[p][1],
                               f"{ports[p][0].capitalize()} {p} is already in use on rollout node {nodes[index].host} "
                               "(an old server still running?).", "Stop what listens there, or pick another port."))
        free = [p for p in ports if p not in taken]
        if not free:
            continue
        pid = _listen(runners[index], nodes[index], free)
        try:
            down = _unreachable(runners[rank0], [(host, p) for p in free])
        finally:
            runners[index].run(shell.join(["kill", pid]) + " 2>/dev/null", timeout=10)
        for h, p in down:
            out.append(finding("PREFLIGHT-ROLLOUT-UNREACHABLE", "error", ports[p][1],
                               f"Trainer rank 0 ({r0}) cannot reach rollout node {nodes[index].host} at {h}:{p} "
                               f"({ports[p][0]}) although a test listener was open there: the trainer would time out.",
                               f"Open port {p} from {r0} to {h} (firewall, security group), or fix the node's "
                               "address."))
    return out


def _sync_port_checks(eff: Resolved, runners: dict[int, Runner], trainers: list[int]) -> list[Finding]:
    """Server mode: each rollout node's weight-sync group port reachable from every trainer node besides rank 0
    (rank 0, which opens the group, is checked with the HTTP port). ms-swift 4.x syncs weights from global rank 0
    only, so this is a warning: it matters once another node becomes node 0."""
    spec = eff.spec
    out, nodes = [], spec.cluster.nodes
    own = [] if spec.rollout.vllm_server_host else [i for i, n in enumerate(nodes) if n.role == "rollout"]
    for (host, _), port, index in zip(eff.server_endpoints, eff.group_ports, own, strict=False):
        if index not in runners or len(trainers) < 2 or _taken(runners[index], [port]):
            continue  # a taken port is reported by _rollout_checks
        pid = _listen(runners[index], nodes[index], [port])
        try:
            results = parallel(lambda i, h=host, p=port: _unreachable(runners[i], [(h, p)]), trainers[1:])
        finally:
            runners[index].run(f"kill {pid} 2>/dev/null", timeout=10)
        out += [finding("PREFLIGHT-SYNC-PORT", "warning", "rollout.vllm_server_group_port",
                        f"{nodes[i].host} cannot reach the weight-sync group port {host}:{port} of rollout node "
                        f"{nodes[index].host}: weights would not reach vLLM if this node became trainer rank 0.",
                        f"Open port {port} from every trainer node to {host} (firewall, security group).")
                for i, down in results if not isinstance(down, Exception) and down]
    return out


def _port_checks(eff: Resolved, runners: dict[int, Runner]) -> list[Finding]:
    trainers = [i for i, n in enumerate(eff.spec.cluster.nodes) if n.role == "trainer" and i in runners]
    if not trainers:
        return []
    out = _master_checks(eff, runners, trainers)
    if eff.server:
        out += _rollout_checks(eff, runners, trainers[0]) + _sync_port_checks(eff, runners, trainers)
    return out


def preflight(job: JobSpec | Resolved, pool: Pool | None = None, progress=lambda host, msg: None
              ) -> tuple[list[HostFacts], list[Finding]]:
    """Check every node of a job (its spec or Resolved values) in parallel; returns per-node facts and findings."""
    eff = resolve(job)
    spec = eff.spec
    pool = pool or Pool()
    findings: list[Finding] = []

    def connect(i):
        progress(spec.cluster.nodes[i].host, "connecting")
        return runner_for(spec.cluster.nodes[i], pool)

    runners = {}
    facts: list[HostFacts] = []
    for i, r in parallel(connect, list(range(len(spec.cluster.nodes)))):
        node = spec.cluster.nodes[i]
        if isinstance(r, UnknownHostKey):
            findings.append(finding("PREFLIGHT-UNKNOWN-HOST-KEY", "error", f"cluster.nodes[{i}].host",
                                    f"{node.host} presented an unknown {r.key.get_name()} key {r.fingerprint}.",
                                    "Compare the fingerprint with `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on "
                                    "the machine, then trust it on the Cluster page."))
        elif isinstance(r, Exception):
            findings.append(finding("PREFLIGHT-UNREACHABLE", "error", f"cluster.nodes[{i}].host", str(r),
                                    "Check the host name, user, port and key of this node."))
        else:
            runners[i] = r
        facts.append(HostFacts(node.host, error=None if i in runners else str(r)))
    for i, res in parallel(lambda i: _probe(spec, i, runners[i]), list(runners)):
        node = spec.cluster.nodes[i]
        if isinstance(res, Exception):
            facts[i].error = str(res)
            findings.append(finding("PREFLIGHT-UNREACHABLE", "error", f"cluster.nodes[{i}].host", str(res),
                                    "Check the connection to this node."))
            continue
        facts[i] = res
        progress(node.host, "checked")
        findings += _host_findings(spec, i, res) + _compat_findings(spec, i, res)
    findings += _consistency(spec, facts)
    findings += _py_spy_findings(spec, runners, progress)
    try:
        findings += _port_checks(eff, runners)
    except SshError as e:
        findings.append(finding("PREFLIGHT-UNREACHABLE", "error", "cluster.nodes", str(e), "Check the connection."))
    return facts, findings


def _host_findings(spec: JobSpec, i: int, f: HostFacts) -> list[Finding]:
    node, out = spec.cluster.nodes[i], []
    path = f"cluster.nodes[{i}]"
    if f.error:
        out.append(finding("PREFLIGHT-ENV", "error", f"{path}.python_env", f"{node.host}: {f.error}",
                           "Set python_env to the venv or conda env that has ms-swift on this node."))
        return out
    swift = f.versions.get("ms-swift")
    if not swift:
        out.append(finding("PREFLIGHT-NO-SWIFT", "error", f"{path}.python_env",
                           f"{node.host}: ms-swift is not installed in {node.python_env or 'the login environment'}.",
                           "Install ms-swift there or point python_env at the right environment."))
    elif parse_version(swift)[:2] != parse_version(spec.swift_version)[:2]:
        out.append(finding("PREFLIGHT-SWIFT-VERSION", "error", "swift_version",
                           f"{node.host} has ms-swift {swift} but the job targets {spec.swift_version}.",
                           f"Set swift_version to {'.'.join(swift.split('.')[:2])} so the flags match.",
                           {"swift_version": ".".join(swift.split(".")[:2])}))
    needs_vllm = spec.rollout.use_vllm and (node.role == "rollout" or spec.rollout.vllm_mode != "server")
    if swift and needs_vllm and not f.versions.get("vllm"):
        out.append(finding("PREFLIGHT-NO-VLLM", "error", "rollout.use_vllm",
                           f"{node.host}: use_vllm is on but vLLM is not installed in "
                           f"{node.python_env or 'the login environment'} (ms-swift fails after loading the model).",
                           "Install vllm there, or turn use_vllm off (slow transformers generation).",
                           {"rollout.use_vllm": False, "rollout.vllm_mode": None}))
    for p, exists in f.paths.items():
        if not exists:
            out.append(finding("PREFLIGHT-PATH-MISSING", "error", "train.model" if p in (spec.train.model or "")
                               else "train.dataset", f"{node.host}: {p.rsplit('#', 1)[0]} does not exist.",
                               "Copy it to every node (same path) or use a shared file system."))
    if f.gpus:
        have = {g["gpu_index"]: g for g in f.gpus}
        missing = [g for g in node.gpus if g not in have]
        if missing:
            out.append(finding("PREFLIGHT-GPU-MISSING", "error", f"{path}.gpus",
                               f"{node.host} has GPUs {sorted(have)}; {missing} do not exist.",
                               f"Use ids from {sorted(have)}."))
        busy = {g: have[g] for g in node.gpus if g in have and (have[g]["processes"] or have[g]["mem_used"] > 1024)}
        if busy:
            detail = "; ".join(f"GPU {g}: {gpu['mem_used']:.0f} MiB used, " + (", ".join(
                f"pid {p['pid']} ({p['used_mib']:.0f} MiB)" for p in gpu["processes"]) or "no compute process")
                for g, gpu in busy.items())
            out.append(finding("PREFLIGHT-GPU-BUSY", "warning", f"{path}.gpus",
                               f"{node.host}: requested GPU(s) {sorted(busy)} are in use ({detail}).",
                               "Free them or pick other GPU ids."))
    elif node.gpus:
        out.append(finding("PREFLIGHT-NO-GPU", "warning", f"{path}.gpus",
                           f"{node.host}: no GPU found (nvidia-smi, and NVML on the local node): no driver, or a CPU-only machine.",
                           "Check the NVIDIA driver; CPU-only runs need ACCELERATE_USE_CPU=true."))
    if f.driver_cuda and f.torch_cuda and _major_minor(f.driver_cuda) < _major_minor(f.torch_cuda):
        out.append(finding("PREFLIGHT-CUDA-DRIVER", "error", f"{path}.python_env",
                           f"{node.host}: the NVIDIA driver {f.driver} supports CUDA up to {f.driver_cuda}, but torch "
                           f"{f.versions.get('torch')} in {node.python_env or 'the login environment'} was built for "
                           f"CUDA {f.torch_cuda}.",
                           f"Install a torch build for CUDA {f.driver_cuda} or older in that environment, or update "
                           "the driver."))
    if f.disk_free_gib is not None and f.disk_free_gib < 20:
        out.append(finding("PREFLIGHT-DISK", "warning", "cluster.run_root",
                           f"{node.host}: only {f.disk_free_gib:.0f} GiB free for run directories and checkpoints.",
                           "Free disk or move run_root / output_dir to a larger volume."))
    if f.proxy and spec.rollout.vllm_mode == "server":
        out.append(finding("PREFLIGHT-PROXY", "warning", "env", f"{node.host} sets {', '.join(f.proxy)}: server mode "
                           "traffic to the rollout servers may go through the proxy and fail (ms-swift #5545).",
                           "Unset http_proxy/https_proxy for the job (or set no_proxy for the rollout hosts)."))
    if f.clock_skew_s is not None and abs(f.clock_skew_s) > 30:
        out.append(finding("PREFLIGHT-CLOCK", "warning", f"{path}.host",
                           f"{node.host}'s clock is off by {f.clock_skew_s:+.0f} s.", "Enable NTP on the node."))
    return out


def _compat_findings(spec: JobSpec, i: int, f: HostFacts) -> list[Finding]:
    """Installed versions outside what the node's ms-swift requires (grpo_ui/knowledge/data/compat.yaml): these runs fail
    only after the model is loaded, or in the first weight sync."""
    node, swift = spec.cluster.nodes[i], (f.versions or {}).get("ms-swift")
    return [finding("PREFLIGHT-COMPAT", "warning" if c.known_bad else "error", f"cluster.nodes[{i}].python_env",
                    f"{node.host}: {c.package} {c.installed} with ms-swift {swift}: "
                    + (f"reported broken ({c.why})." if c.known_bad else f"ms-swift requires {c.package} {c.wanted} "
                       f"({c.why})."),
                    f"Install a {c.package} version {'other than' if c.known_bad else 'within'} {c.wanted} in "
                    f"{node.python_env or 'the login environment'} on every node.")
            for c in conflicts(f.versions or {})]


def _py_spy_findings(spec: JobSpec, runners: dict[int, Runner], progress) -> list[Finding]:
    """py-spy on every trainer node: the doctor dumps each rank's stack with it when a job looks hung. When neither
    grpo-ui's tools prefix (run_root/.grpo-ui-tools), the job's environment nor PATH has it, the node's python3
    pip-installs it into that prefix (the job's environment is left as it is), with the job's environment variables
    (e.g. an index URL)."""
    trainers = [i for i, n in enumerate(spec.cluster.nodes) if n.role == "trainer" and i in runners]

    def ensure(i: int) -> str:
        node = spec.cluster.nodes[i]
        candidates = py_spy_candidates(spec.cluster.run_root, node.python_env)
        prefix = candidates[0].removesuffix("/bin/py-spy")
        env = "".join(f"export {k}={shell.quote(v)}; " for k, v in {**spec.env, **node.env}.items())
        install = (f'[ -n "$spy" ] || python3 -m pip install --disable-pip-version-check -q --retries 1 --timeout 15 '
                   f"--prefix {shell.path(prefix)} py-spy 2>&1 | tail -n 3; ")
        return runners[i].run(_activate(node.python_env) + env + find_py_spy(candidates) + install
                              + find_py_spy(candidates) + '"${spy:-py-spy}" --version 2>&1', timeout=180).out

    out = []
    for i, res in parallel(ensure, trainers):
        node = spec.cluster.nodes[i]
        last = res.strip().splitlines()[-1] if isinstance(res, str) and res.strip() else ""
        if last.startswith("py-spy "):
            progress(node.host, last)
            continue
        detail = str(res) if isinstance(res, Exception) else " ".join(res.split())[-300:]
        out.append(finding("PREFLIGHT-PY-SPY", "warning", f"cluster.nodes[{i}].python_env",
                           f"{node.host}: py-spy is missing and could not be installed with pip ({detail}): the "
                           "doctor cannot show where each rank is if the job hangs.",
                           "pip install py-spy in the job's environment (or give the node a package index, e.g. "
                           "PIP_INDEX_URL in the job's env)."))
    return out


def _major_minor(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:2] if x.isdigit())


def _consistency(spec: JobSpec, facts: list[HostFacts]) -> list[Finding]:
    out = []
    ok = [f for f in facts if f.versions]
    for pkg in PACKAGES:
        seen = {f.host: f.versions.get(pkg) for f in ok}
        if len(set(seen.values())) > 1:
            detail = ", ".join(f"{h}: {v or 'missing'}" for h, v in seen.items())
            out.append(finding("PREFLIGHT-VERSION-MISMATCH", "error" if pkg in MUST_MATCH else "warning",
                               "cluster.nodes", f"{pkg} differs between nodes ({detail}).",
                               f"Install the same {pkg} version on every node (field report 003)."))
    return out
