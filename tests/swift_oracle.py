"""The import corpus oracle: what a launch script really runs (bash with recording stubs on PATH) and what ms-swift
makes of a command line (its own argument classes through HfArgumentParser, in the ms-swift venvs).

Used by tests/test_import_corpus.py and bench/import_corpus.py. Nothing here reads grpo-ui's importer: the recorded
side comes from bash, the parsed side from ms-swift.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).parent / "import_corpus"
SWIFT_VENV = Path(os.environ.get("GRPO_UI_SWIFT_VENV", Path.home() / ".cache/grpo-ui/swift-venv"))
SWIFT3_VENV = Path(os.environ.get("GRPO_UI_SWIFT3_VENV", Path.home() / ".cache/grpo-ui/swift3-venv"))
BASELINE_ENV = {"PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "RECORD_DIR", "LC_CTYPE"}

# Recording stubs: swift, torchrun and python write {tool, argv, env, cwd}; nohup/setsid run their command; sleep
# returns at once.
RECORDER = """#!{python} -S
import json, os, sys, time
name = os.path.basename(sys.argv[0])
record = {{"tool": name, "argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}
path = os.path.join(os.environ["RECORD_DIR"], "%.9f-%d.json" % (time.time(), os.getpid()))
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.rename(path + ".tmp", path)
"""
PASS_THROUGH = '#!/bin/bash\nexec "$@"\n'


def make_stubs(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("swift", "megatron", "torchrun", "python", "python3", "deepspeed"):
        (directory / name).write_text(RECORDER.format(python=sys.executable))
    for name in ("nohup", "setsid"):
        (directory / name).write_text(PASS_THROUGH)
    (directory / "sleep").write_text("#!/bin/bash\nexit 0\n")
    for p in directory.iterdir():
        p.chmod(0o755)
    return directory


def _session_alive(sid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            return True
    return False


@dataclass
class Run:
    """One swift rlhf/rollout (or megatron rlhf) a script ran: kind, argv after the sub-command (or rlhf.py), env,
    cwd, launcher."""

    kind: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    program: str = "swift"  # or megatron


TORCHRUN = {"nproc_per_node": "NPROC_PER_NODE", "nnodes": "NNODES", "node_rank": "NODE_RANK",
            "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}


def _as_run(record: dict) -> Run | None:
    """A recording as swift would run it; torchrun's rendezvous options become the env swift derives them from."""
    argv, env = record["argv"], {k: v for k, v in record["env"].items() if k not in BASELINE_ENV}
    if record["tool"] in ("swift", "megatron"):
        return Run(argv[0], argv[1:], env, record["cwd"], record["tool"]) if argv and argv[0] in ("rlhf", "rollout") \
            else None
    for i, token in enumerate(argv):
        if token.endswith(("swift/cli/rlhf.py", "swift/cli/rollout.py")):
            launcher = argv[:i]
            for j, option in enumerate(launcher):
                name, eq, value = option.lstrip("-").replace("-", "_").partition("=")
                if option.startswith("--") and name in TORCHRUN:
                    env[TORCHRUN[name]] = value if eq else launcher[j + 1]
            return Run(Path(token).stem, argv[i + 1:], env, record["cwd"])
    return None


def run_script(script: Path, workdir: Path, stubs: Path, env: dict[str, str] | None = None) -> list[Run]:
    """Run a script under bash in workdir with the stubs first on PATH and a bare environment; the swift runs it
    made, in order. Background jobs (``&``) are waited for through the script's session."""
    records = workdir / f".records-{script.stem}"
    shutil.rmtree(records, ignore_errors=True)
    records.mkdir(parents=True)
    base = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(workdir), "RECORD_DIR": str(records), **(env or {})}
    proc = subprocess.Popen(["bash", str(script)], cwd=workdir, env=base, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    _, err = proc.communicate(timeout=60)
    for _ in range(400):  # a backgrounded stub may still be writing its record
        if not _session_alive(proc.pid):
            break
        time.sleep(0.05)
    runs = [_as_run(json.loads(p.read_text())) for p in sorted(records.glob("*.json"))]
    return [r for r in runs if r]


def run_rendered(script: Path, workdir: Path, stubs: Path) -> list[Run]:
    """run_script on a rendered node script without its wait for the rollout servers' /health/ (it needs real
    servers; the oracle runs without them)."""
    script.write_text("".join(line for line in script.read_text().splitlines(keepends=True)
                              if not line.startswith("wait_for_health ")))
    return run_script(script, workdir, stubs)


# ms-swift's own reading of a command line: the config-file expansion its CLI does first (4.1+: a positional
# YAML/JSON with an ENV block; 3.10-4.0: --config), then HfArgumentParser over the argument class. The namespace is
# what argparse gives, before __post_init__ (which would load models and datasets).
PROBE = r"""
import json, os, sys
from transformers import HfArgumentParser
from swift.utils.utils import _patch_get_type_hints
try:
    from swift.arguments import RLHFArguments, RolloutArguments
except ImportError:
    from swift.llm.argument import RLHFArguments, RolloutArguments
import swift.cli.main as cli
from swift.version import __version__
classes = {'rlhf': RLHFArguments, 'rollout': RolloutArguments}
parsers = {}

def parser(kind):
    if kind not in parsers:
        with _patch_get_type_hints():
            parsers[kind] = HfArgumentParser([classes[kind]])
    return parsers[kind]

def plain(v):
    return v if isinstance(v, (str, int, float, bool, type(None))) else [plain(x) for x in v] \
        if isinstance(v, (list, tuple)) else repr(v)

def parse(job):
    argv, before = list(job['argv']), dict(os.environ)
    os.environ.update(job.get('env', {}))
    start = dict(os.environ)
    os.chdir(job['cwd'])
    try:
        if hasattr(cli, 'parse_yaml_args'):
            cli.parse_yaml_args(argv)
        if hasattr(cli, 'prepare_config_args'):
            cli.prepare_config_args(argv)
        ns, rest = parser(job['kind']).parse_known_args(argv)
    except (SystemExit, Exception) as e:
        return {'error': f'{type(e).__name__}: {e}'}
    finally:
        env = {k: v for k, v in os.environ.items() if start.get(k) != v and k != 'SWIFT_CONFIG_FILE'}
        os.environ.clear(); os.environ.update(before)
    return {'ns': {k: plain(v) for k, v in vars(ns).items()}, 'unknown': rest, 'env_added': env}

def defaults(kind):
    import dataclasses
    out = {}
    for f in dataclasses.fields(classes[kind]):
        value = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else '<required>')
        out[f.name] = plain(value)
    return out

def standalone(kind):  # the flags argparse lets stand without a value (nargs '?': HfArgumentParser's bools)
    return sorted(s[2:] for a in parser(kind)._actions if a.nargs == '?' for s in a.option_strings if '_' in s
                  or '-' not in s[2:])

request = json.load(sys.stdin)
print(json.dumps({'version': __version__, 'results': [parse(j) for j in request['jobs']],
                  'defaults': {k: defaults(k) for k in request.get('defaults', [])},
                  'standalone': {k: standalone(k) for k in request.get('standalone', [])}}))
"""


def probe(python: Path, jobs: list[dict], defaults: tuple[str, ...] = (), standalone: tuple[str, ...] = ()) -> dict:
    """Parse every job ({kind, argv, cwd, env}) in one ms-swift process; optionally the argument classes' defaults
    and the flags their parser lets stand without a value."""
    request = {"jobs": jobs, "defaults": list(defaults), "standalone": list(standalone)}
    proc = subprocess.run([str(python), "-c", PROBE], input=json.dumps(request),
                          capture_output=True, text=True, timeout=600, cwd=CORPUS)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def venv_python(major: int) -> Path:
    return (SWIFT3_VENV if major == 3 else SWIFT_VENV) / "bin" / "python"


# ---------------------------------------------------------------------------------------------------------------
# The corpus: each case is a script (tests/import_corpus/v4-*.sh) or a directory of node scripts and the config
# files they name (v4-*/). The prefix names the ms-swift the script is written for: v4 → 4.6, v3 → 3.12.

@dataclass
class Case:
    name: str
    version: str
    scripts: list[Path]
    files: list[Path]


def cases() -> list[Case]:
    out = []
    for path in sorted(CORPUS.iterdir()):
        if not path.name.startswith(("v3-", "v4-")):
            continue
        members = sorted(path.iterdir()) if path.is_dir() else [path]
        out.append(Case(path.stem if path.is_file() else path.name, "3.12" if path.name.startswith("v3") else "4.6",
                        [p for p in members if p.suffix == ".sh"], [p for p in members if p.suffix != ".sh"]))
    return out


# Launch variables the node templates always export; a script that leaves one unset means the value torchrun and
# ms-swift assume (one node, rank 0, port 29500, this host, one process per visible GPU).
NEUTRAL = {"NNODES": {"1"}, "NODE_RANK": {"0"}, "MASTER_PORT": {"29500"}, "MASTER_ADDR": {"localhost", "127.0.0.1"}}


def env_differences(script: dict[str, str], rendered: dict[str, str]) -> list[str]:
    out = [f"env {k}: {script.get(k)!r} → {rendered.get(k)!r}" for k in sorted(set(script) | set(rendered))
           if script.get(k) != rendered.get(k) and not _same_master(k, script, rendered)]
    extra_ok = {k for k in rendered if k not in script and (
        rendered[k] in NEUTRAL.get(k, ()) or k in ("NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES"))}
    return [d for d in out if d.split(":")[0][4:] not in extra_ok]


def _same_master(key: str, script: dict[str, str], rendered: dict[str, str]) -> bool:
    """Rank 0 hosts the rendezvous: its script's MASTER_ADDR=127.0.0.1 and the rendered node-0 address (grpo-ui sets
    launch variables itself) name the same master."""
    return (key == "MASTER_ADDR" and script.get("NODE_RANK", "0") == "0" == rendered.get("NODE_RANK", "0")
            and script.get(key) in NEUTRAL["MASTER_ADDR"] and key in rendered)


@dataclass
class CaseResult:
    case: Case
    differences: list[str]
    findings: list


def _pair(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    trainers = sorted((r for r in runs if r.kind == "rlhf"), key=lambda r: int(r.env.get("NODE_RANK", "0") or 0))
    return trainers, [r for r in runs if r.kind == "rollout"]


def evaluate(workdir: Path) -> list[CaseResult]:
    """Every case: bash's runs of the scripts and of grpo-ui's rendered scripts (import → spec → render for the same
    version), both parsed by that version's ms-swift, compared field by field, env included."""
    from grpo_ui.core.findings import finding
    from grpo_ui.importer import import_scripts
    from grpo_ui.launch.render import render, write_bundle
    from grpo_ui.spec.errors import SpecError
    from grpo_ui.spec.paths import with_changes

    stubs = make_stubs(workdir / "stubs")
    pending = []  # (case, [(script run, rendered run)], findings, problems)
    for case in cases():
        home = workdir / case.name
        home.mkdir(parents=True)
        for p in case.scripts + case.files:
            shutil.copy(p, home / p.name)
        recorded = [r for s in case.scripts for r in run_script(home / s.name, home, stubs)]
        try:
            spec, findings = import_scripts([(p.name, p.read_bytes()) for p in case.scripts], case.version,
                                            {p.name: p.read_bytes() for p in case.files})
        except SpecError as e:
            pending.append((case, [], [finding("IMPORT-FAILED", "error", "spec", str(e), "")], ["import failed"]))
            continue
        spec = with_changes(spec, {"cluster.run_root": str(home / "runs")})
        bundle = render(spec, "corpus")
        out = home / "rendered"
        write_bundle(bundle, out)
        rendered = [r for name in sorted(bundle.files) if name.endswith(".sh")
                    for r in run_rendered(out / name, home, stubs)]
        (st, sr), (rt, rr) = _pair(recorded), _pair(rendered)
        problems = [] if (len(st), len(sr)) == (len(rt), len(rr)) else [
            f"{len(st)} trainer / {len(sr)} rollout runs recorded, {len(rt)} / {len(rr)} rendered"]
        pairs = list(zip(st, rt, strict=False)) + list(zip(sr, rr, strict=False))
        pending.append((case, pairs, findings, problems))
    results = {}
    for major in (3, 4):
        todo = [(c, pairs) for c, pairs, _, _ in pending if c.version.startswith(str(major)) and pairs]
        jobs = [{"kind": r.kind, "argv": r.argv, "cwd": r.cwd, "env": r.env} for _, pairs in todo for pair in pairs
                for r in pair]
        parsed = iter(probe(venv_python(major), jobs)["results"]) if jobs else iter(())
        for case, pairs in todo:
            results[case.name] = [(a, next(parsed), b, next(parsed)) for a, b in pairs]
    return [CaseResult(case, problems + [d for pair in results.get(case.name, []) for d in compare(*pair)], findings)
            for case, _, findings, problems in pending]


def compare(script: Run, parsed_script: dict, rendered: Run, parsed_rendered: dict) -> list[str]:
    """What differs between two runs as ms-swift reads them: namespace fields, unparsed tokens, environment."""
    errors = [f"{side}: {p['error']}" for side, p in (("script", parsed_script), ("rendered", parsed_rendered))
              if "error" in p]
    if errors:
        return errors
    a, b = parsed_script["ns"], parsed_rendered["ns"]
    out = [f"{script.kind} --{k}: {a.get(k)!r} → {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if parsed_script["unknown"] != parsed_rendered["unknown"]:
        out.append(f"{script.kind} unparsed: {parsed_script['unknown']} → {parsed_rendered['unknown']}")
    return out + env_differences({**script.env, **parsed_script["env_added"]},
                                 {**rendered.env, **parsed_rendered["env_added"]})
