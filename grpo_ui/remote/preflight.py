"""Preflight: check every host in parallel before a launch, as findings (the same form as the validation rules)
plus one HostFacts record per node: reachable, GPUs, versions in the node's environment, ports, paths, disk, clock."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field

from grpo_ui.findings import Finding, finding
from grpo_ui.remote.runner import Runner, parallel, runner_for
from grpo_ui.remote.ssh import Pool, SshError, UnknownHostKey
from grpo_ui.render import shell_path
from grpo_ui.spec import JobSpec, parse_version

PACKAGES = ("ms-swift", "torch", "vllm", "trl", "transformers", "deepspeed")
MUST_MATCH = ("ms-swift", "torch", "vllm")
PROBE = r"""
import json, os, shutil, sys, time
from importlib import metadata
v = {}
for p in %(packages)r:
    try:
        v[p] = metadata.version(p)
    except metadata.PackageNotFoundError:
        v[p] = None
paths = {p: os.path.exists(os.path.expanduser(p)) for p in %(paths)r}
root = os.path.expanduser(%(root)r)
while not os.path.exists(root):
    root = os.path.dirname(root) or "/"
print(json.dumps({"python": sys.version.split()[0], "versions": v, "paths": paths, "time": time.time(),
                  "disk_free_gib": shutil.disk_usage(root).free / 2**30,
                  "proxy": [k for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY") if os.environ.get(k)]}))
"""
GPU_QUERY = "nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader,nounits"
APPS_QUERY = "nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits"


@dataclass
class HostFacts:
    host: str
    reachable: bool = False
    python: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    gpus: list[dict] = field(default_factory=list)
    gpu_processes: int = 0
    driver: str | None = None
    disk_free_gib: float | None = None
    clock_skew_s: float | None = None
    proxy: list[str] = field(default_factory=list)
    paths: dict[str, bool] = field(default_factory=dict)
    error: str | None = None


def _local_paths(spec: JobSpec) -> list[str]:
    """Model and dataset values that are paths (not hub ids): start with / . or ~."""
    values = [spec.train.model, *spec.train.dataset]
    return [v.split("#")[0] for v in values if v.startswith(("/", "./", "~"))]


def _activate(python_env: str | None) -> str:
    if not python_env:
        return ""
    env = shell_path(python_env)
    return f"export PATH={env}/bin:$PATH; "


def _probe(spec: JobSpec, index: int, runner: Runner) -> HostFacts:
    node = spec.cluster.nodes[index]
    facts = HostFacts(node.host, reachable=True)
    code = PROBE % {"packages": PACKAGES, "paths": _local_paths(spec), "root": spec.cluster.run_root}
    res = runner.run(_activate(node.python_env) + f"python3 -c {shlex.quote(code)}", timeout=60)
    if res.rc:
        facts.error = f"python probe failed in {node.python_env or 'the login environment'}: {res.err.strip()[-300:]}"
        return facts
    data = json.loads(res.out.strip().splitlines()[-1])
    facts.python, facts.versions, facts.paths = data["python"], data["versions"], data["paths"]
    facts.disk_free_gib, facts.proxy = data["disk_free_gib"], data["proxy"]
    facts.clock_skew_s = data["time"] - time.time()
    gpu = runner.run(_activate(node.python_env) + f"{GPU_QUERY} && {APPS_QUERY}", timeout=30)
    if gpu.rc == 0:
        for line in gpu.out.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 5 and parts[0].isdigit():
                facts.gpus.append({"index": int(parts[0]), "name": parts[1], "memory_total_mib": float(parts[2]),
                                   "memory_used_mib": float(parts[3])})
                facts.driver = parts[4]
            elif len(parts) == 3:
                facts.gpu_processes += 1
    return facts


def _port_checks(spec: JobSpec, runners: dict[int, Runner]) -> list[Finding]:
    """MASTER_PORT free on the master and reachable from every worker; rollout ports from trainer rank 0."""
    out = []
    trainers = [i for i, n in enumerate(spec.cluster.nodes) if n.role == "trainer" and i in runners]
    if not trainers:
        return out
    master, port, addr = trainers[0], spec.cluster.master_port, spec.master_addr()
    busy = runners[master].run(f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo busy", timeout=10)
    if "busy" in busy.out:
        out.append(finding("PREFLIGHT-PORT-TAKEN", "error", "cluster.master_port",
                           f"MASTER_PORT {port} is already in use on {spec.cluster.nodes[master].host}.",
                           "Pick another master_port, or stop what listens there."))
        return out
    if len(trainers) > 1:
        node = spec.cluster.nodes[master]
        listen = (_activate(node.python_env) + "nohup python3 -c " + shlex.quote(
            f"import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('0.0.0.0', {port})); s.listen(16); s.settimeout(15)\n"
            f"end=time.time()+15\nwhile time.time()<end:\n  try: s.accept()[0].close()\n  except OSError: pass")
            + " > /dev/null 2>&1 & echo $!")
        pid = runners[master].run(listen, timeout=10).out.strip()
        time.sleep(0.5)
        try:
            for i in trainers[1:]:
                ok = runners[i].run(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{addr}/{port}' && echo ok", timeout=15)
                if "ok" not in ok.out:
                    out.append(finding("PREFLIGHT-MASTER-UNREACHABLE", "error", f"cluster.nodes[{i}].host",
                                       f"{spec.cluster.nodes[i].host} cannot reach MASTER_ADDR {addr}:{port}: the "
                                       "rendezvous would hang.",
                                       "Open the port between the nodes (firewall, security group) or set "
                                       "master_addr to an address the workers can reach."))
        finally:
            runners[master].run(f"kill {pid} 2>/dev/null", timeout=10)
    if spec.rollout.use_vllm and spec.rollout.vllm_mode == "server":
        for k, (host, http) in enumerate(spec.server_endpoints()):
            for p in (http, (spec.rollout.vllm_server_group_port or [51216 + k])[0]):
                ok = runners[master].run(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{p}' && echo ok", timeout=15)
                if "ok" not in ok.out and p == http:
                    out.append(finding("PREFLIGHT-ROLLOUT-UNREACHABLE", "warning", "rollout.vllm_server_host",
                                       f"Trainer rank 0 cannot reach rollout server {host}:{p} (fine if the server "
                                       "is not started yet; the launcher starts it first).",
                                       f"Check that {host}:{p} and group port {51216 + k} are open from rank 0."))
    return out


def preflight(spec: JobSpec, pool: Pool | None = None, progress=lambda host, msg: None
              ) -> tuple[list[HostFacts], list[Finding]]:
    """Check every node in parallel; returns per-node facts and findings."""
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
        findings += _host_findings(spec, i, res)
    findings += _consistency(spec, facts)
    try:
        findings += _port_checks(spec, runners)
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
            out.append(finding("PREFLIGHT-PATH-MISSING", "error", "train.model" if p in spec.train.model
                               else "train.dataset", f"{node.host}: {p} does not exist.",
                               "Copy it to every node (same path) or use a shared file system."))
    if f.gpus:
        have = {g["index"]: g for g in f.gpus}
        missing = [g for g in node.gpus if g not in have]
        if missing:
            out.append(finding("PREFLIGHT-GPU-MISSING", "error", f"{path}.gpus",
                               f"{node.host} has GPUs {sorted(have)}; {missing} do not exist.",
                               f"Use ids from {sorted(have)}."))
        busy = [g for g in node.gpus if g in have and have[g]["memory_used_mib"] > 1024]
        if busy:
            out.append(finding("PREFLIGHT-GPU-BUSY", "warning", f"{path}.gpus",
                               f"{node.host}: GPU(s) {busy} already hold memory ({f.gpu_processes} compute "
                               "process(es) running).", "Free them or pick other GPU ids."))
    elif node.gpus:
        out.append(finding("PREFLIGHT-NO-GPU", "warning", f"{path}.gpus",
                           f"{node.host}: nvidia-smi found no GPU (no driver, or a CPU-only machine).",
                           "Check the NVIDIA driver; CPU-only runs need ACCELERATE_USE_CPU=true."))
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
