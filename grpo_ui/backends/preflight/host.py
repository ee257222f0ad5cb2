"""What a host's facts say, as findings: GPUs, memory and processes on the requested GPUs, CUDA, versions against
what the node's ms-swift requires and across nodes, the working directory and the files the job names, the keys its
trackers and hubs need, rollout servers started outside the job, disk, clock, py-spy for the doctor."""

from __future__ import annotations

from grpo_ui.backends.preflight.facts import MUST_MATCH, PACKAGES, WORKDIR, HostFacts, activate
from grpo_ui.backends.remote.pyspy import find_py_spy, py_spy_candidates
from grpo_ui.backends.remote.runner import Runner, parallel
from grpo_ui.checks.rules.credentials import undeclared
from grpo_ui.core import shell
from grpo_ui.core.findings import Finding, finding
from grpo_ui.knowledge.compat import conflicts
from grpo_ui.spec.fields import parse_version
from grpo_ui.spec.files import job_files, node_workdir
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved


def host_findings(eff: Resolved, i: int, f: HostFacts) -> list[Finding]:
    """What node ``i``'s facts say about the job (its effective values: server mode as resolved)."""
    spec = eff.spec
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
    needs_vllm = eff.vllm_mode != "none" and (node.role == "rollout" or not eff.server)
    if swift and needs_vllm and not f.versions.get("vllm"):
        out.append(finding("PREFLIGHT-NO-VLLM", "error", "rollout.use_vllm",
                           f"{node.host}: use_vllm is on but vLLM is not installed in "
                           f"{node.python_env or 'the login environment'} (ms-swift fails after loading the model).",
                           "Install vllm there, or turn use_vllm off (slow transformers generation).",
                           {"rollout.use_vllm": False, "rollout.vllm_mode": None}))
    out += _missing_files(spec, i, f)
    for env, found in f.credentials.items():
        if not found:
            c = next(c for c, _ in undeclared(spec) if c.env == env)
            out.append(finding("PREFLIGHT-CREDENTIAL-MISSING", "error", "secret_env",
                               f"{node.host}: {c.what} needs {env}, and this node has neither {env} in its "
                               f"environment nor a `{c.login}` ({c.login_file}): the job would fail once the model "
                               "has loaded.", f"Declare {env} in secret_env (the Launch page asks for it), or run "
                               f"`{c.login}` on {node.host}.", {"secret_env": [*spec.secret_env, env]}))
    for where, status in f.health.items():
        if status != "200":
            out.append(finding("PREFLIGHT-ROLLOUT-DOWN", "error", ("rollout.vllm_server_host", "cluster.external_rollout"),
                               f"The rollout server at {where}, started outside this job, does not answer /health/ "
                               f"from trainer rank 0 ({node.host}): {status}. node_0.sh would wait "
                               f"{spec.rollout.vllm_server_timeout:.0f} s for it and exit 3.",
                               f"Start it (`swift rollout --model {spec.train.model or '…'} …` on that machine) and wait "
                               f"until `curl http://{where}/health/` answers, or add it to the cluster as a rollout "
                               "node."))
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
    elif node.gpus and eff.on_cpu(node):
        out.append(finding("PREFLIGHT-NO-GPU", "warning", f"{path}.gpus",
                           f"{node.host}: no GPU found (nvidia-smi, and NVML on the local node); the job runs on its "
                           "CPUs (ACCELERATE_USE_CPU), which only a tiny model can.",
                           "Check the NVIDIA driver if the machine has GPUs."))
    elif node.gpus:
        asked = f"{len(node.gpus)} GPU(s)" + (f" ({node.gpu_model})" if node.gpu_model else "")
        out.append(finding("PREFLIGHT-NO-GPU", "error", f"{path}.gpus",
                           f"{node.host}: no GPU found (nvidia-smi, and NVML on the local node), but the job asks for "
                           f"{asked} there: no driver, or a CPU-only machine. ms-swift would fail once it starts.",
                           f"Check the NVIDIA driver on {node.host} (nvidia-smi), or run the node on a machine with "
                           "GPUs; a CPU-only run says so with ACCELERATE_USE_CPU=true in env."))
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
    if f.proxy and eff.server:
        out.append(finding("PREFLIGHT-PROXY", "warning", "env", f"{node.host} sets {', '.join(f.proxy)}: server mode "
                           "traffic to the rollout servers may go through the proxy and fail (ms-swift #5545).",
                           "Unset http_proxy/https_proxy for the job (or set no_proxy for the rollout hosts)."))
    if f.clock_skew_s is not None and abs(f.clock_skew_s) > 30:
        out.append(finding("PREFLIGHT-CLOCK", "warning", f"{path}.host",
                           f"{node.host}'s clock is off by {f.clock_skew_s:+.0f} s.", "Enable NTP on the node."))
    return out


def _missing_files(spec: JobSpec, i: int, f: HostFacts) -> list[Finding]:
    """The node's working directory and the files the job names, as that node opens them (facts.local_paths)."""
    node, out = spec.cluster.nodes[i], []
    fields = {jf.value: jf.field for jf in job_files(spec)}
    if f.paths.get(WORKDIR) is False:
        workdir = node_workdir(spec, i)
        out.append(finding("PREFLIGHT-WORKDIR-MISSING", "error", f"cluster.nodes[{i}].workdir" if node.workdir
                           else "cluster.workdir", f"{node.host}: the working directory {workdir} does not exist: the "
                           "node script's `cd` would fail before swift starts.",
                           "Create it on the node (with the files the job names), or fix the path."))
    for value, exists in f.paths.items():
        if value != WORKDIR and not exists:
            where = node_workdir(spec, i) if not value.startswith(("/", "~")) else None
            out.append(finding("PREFLIGHT-PATH-MISSING", "error", fields.get(value, "train.dataset"),
                               f"{node.host}: {value.rsplit('#', 1)[0]} does not exist"
                               + (f" in {where} (the working directory)." if where else "."),
                               "Copy it to every node (same path) or use a shared file system."))
    return out


def compat_findings(spec: JobSpec, i: int, f: HostFacts) -> list[Finding]:
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


def py_spy_findings(spec: JobSpec, runners: dict[int, Runner], progress) -> list[Finding]:
    """py-spy on every trainer node: the doctor dumps each rank's stack with it when a job looks hung. When neither
    grpo-ui's tools prefix (run_root/.grpo-ui-tools), the job's environment nor PATH has it, the node's python3
    pip-installs it into that prefix (the job's environment is left as it is), with the job's environment variables
    (e.g. an index URL)."""
    trainers = [i for i, _ in spec.numbered("trainer") if i in runners]

    def ensure(i: int) -> str:
        node = spec.cluster.nodes[i]
        candidates = py_spy_candidates(spec.cluster.run_root, node.python_env)
        prefix = candidates[0].removesuffix("/bin/py-spy")
        env = "".join(f"export {k}={shell.quote(v)}; " for k, v in {**spec.env, **node.env}.items())
        install = (f'[ -n "$spy" ] || python3 -m pip install --disable-pip-version-check -q --retries 1 --timeout 15 '
                   f"--prefix {shell.path(prefix)} py-spy 2>&1 | tail -n 3; ")
        return runners[i].run(activate(node.python_env) + env + find_py_spy(candidates) + install
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


def consistency(spec: JobSpec, facts: list[HostFacts]) -> list[Finding]:
    out = []
    ok = [f for f in facts if f.versions]
    on_ray = spec.cluster.backend == "ray"
    if on_ray:
        out += _ray_versions(ok)
    for pkg in PACKAGES:
        if pkg == "ray" and not on_ray:
            continue
        seen = {f.host: f.versions.get(pkg) for f in ok}
        if len(set(seen.values())) > 1:
            detail = ", ".join(f"{h}: {v or 'missing'}" for h, v in seen.items())
            out.append(finding("PREFLIGHT-VERSION-MISMATCH", "error" if pkg in MUST_MATCH else "warning",
                               "cluster.nodes", f"{pkg} differs between nodes ({detail}).",
                               f"Install the same {pkg} version on every node (field report 003)."))
    return out


def _ray_versions(facts: list[HostFacts]) -> list[Finding]:
    """A Ray job needs Ray on every node, and one Python version everywhere (Ray refuses a node whose Ray or Python
    differs from the head's; the Ray versions are compared with the other packages')."""
    out = [finding("PREFLIGHT-RAY-MISSING", "error", "cluster.nodes",
                   f"Ray is not installed in the node environment of {', '.join(f.host for f in facts if not f.versions.get('ray'))}.",
                   "Install ray[default] (the version of the other nodes) into each node's python_env.")
           ] if any(not f.versions.get("ray") for f in facts) else []
    pythons = {f.host: f.python for f in facts}
    if len(set(pythons.values())) > 1:
        out.append(finding("PREFLIGHT-RAY-PYTHON", "error", "cluster.nodes",
                           "Python differs between nodes (" + ", ".join(f"{h}: {v}" for h, v in pythons.items())
                           + "): Ray refuses to join a node whose Python differs from the head's.",
                           "Use the same Python version in every node's python_env."))
    return out
