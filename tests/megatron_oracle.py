"""The Megatron oracle: what ms-swift 4.6's own Megatron argument classes (MegatronRLHFArguments, the class
`megatron rlhf` parses into) make of a command line, in the Megatron venv (make megatron-venv: ms-swift 4.6,
megatron-core 0.16.1, mcore-bridge, CPU torch).

What is real and what is stood in for, said here once:
- real: ms-swift's argument classes, HfArgumentParser over them exactly as swift.utils.parse_args builds it, their
  defaults, and their ``__post_init__`` checks (megatron_args.py: the GRPO batch arithmetic, what Megatron GRPO
  refuses, recompute, pipeline split, ...), with megatron-core 0.16.1 and mcore-bridge imported for real;
- stood in: the GPU-only packages (Transformer Engine, Triton: tests/megatron_standins/standins.py, placeholder
  modules; nothing in them computes), and distributed initialisation: no process group is created; torch.distributed
  answers "initialised, world size N, rank 0" and initialize_megatron only records that world size, so the checks
  that depend on the data-parallel size see the job's world without N processes. The model is the tiny Qwen2 of
  tests/tiny_job.py (its config.json is all mcore-bridge reads here).
Megatron-Core's own checks (heads ÷ TP, experts ÷ EP, layers ÷ PP) run in initialize_model_parallel and the model's
TransformerConfig, which the stub skips: grpo-ui's rules for those cite Megatron-Core and are tested against it
directly (tests/test_megatron_oracle.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

MEGATRON_VENV = Path(os.environ.get("GRPO_UI_MEGATRON_VENV", Path.home() / ".cache/grpo-ui/megatron-venv"))
STANDINS = Path(__file__).parent / "megatron_standins"

PROBE = r"""
import contextlib, dataclasses, io, json, os, sys
import standins
standins.install()
import torch
from swift.megatron.arguments import MegatronRLHFArguments
import swift.megatron.arguments.megatron_args as megatron_args
import swift.megatron.arguments.sft_args as sft_args
from swift.utils import parse_args
from swift.version import __version__
from transformers import HfArgumentParser
from swift.utils.utils import _patch_get_type_hints

request = json.load(sys.stdin)
WORLD = {'size': 1}

def initialize_megatron(args):  # distributed init stubbed: the world the job would have, no process group
    args.rank, args.world_size = 0, WORLD['size']

megatron_args.initialize_megatron = initialize_megatron
sft_args.init_process_group = lambda *a, **k: None
torch.distributed.is_initialized = lambda: True
torch.distributed.get_world_size = lambda *a, **k: WORLD['size']
torch.distributed.get_rank = lambda *a, **k: 0

def plain(v):
    return v if isinstance(v, (str, int, float, bool, type(None))) else [plain(x) for x in v] \
        if isinstance(v, (list, tuple)) else repr(v)

def parse(job):
    with _patch_get_type_hints():
        parser = HfArgumentParser([MegatronRLHFArguments])
    try:
        ns, rest = parser.parse_known_args(job['argv'])
    except SystemExit:
        return {'error': 'argparse rejected it'}
    out = {'ns': {k: plain(v) for k, v in vars(ns).items()}, 'unknown': rest}
    if job.get('post_init'):
        WORLD['size'] = job['world']
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                args, rest = parse_args(MegatronRLHFArguments, job['argv'])
            out['post_init'] = 'ok' if not rest else f'remaining_argv: {rest}'
            out['dp'] = getattr(args, 'data_parallel_size', None)
            out['generation_batch_size'] = args.generation_batch_size
        except (ValueError, AssertionError, NotImplementedError) as e:
            out['post_init'] = f'{type(e).__name__}: {e}'
    return out

def defaults():
    out = {}
    for f in dataclasses.fields(MegatronRLHFArguments):
        value = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else '<required>')
        out[f.name] = plain(value)
    return out

def standalone():
    with _patch_get_type_hints():
        parser = HfArgumentParser([MegatronRLHFArguments])
    return sorted(s[2:] for a in parser._actions if a.nargs == '?' for s in a.option_strings)

for path, world in request.get('ray_configs', []):  # as ms-swift's Ray driver hands its train group to the workers
    from swift.ray.megatron.driver_utils import _dict_to_argv, merge_group_dict, parse_ray_yaml
    _, groups, shared = parse_ray_yaml(path)
    shared['use_ray'] = True  # MegatronRayPipeline.__init__
    request['jobs'].append({'argv': _dict_to_argv(merge_group_dict(shared, groups['train'])), 'post_init': True,
                            'world': world})

print(json.dumps({'version': __version__, 'results': [parse(j) for j in request['jobs']],
                  'defaults': defaults() if request.get('defaults') else {},
                  'standalone': standalone() if request.get('standalone') else []}))
"""


def python() -> Path:
    return MEGATRON_VENV / "bin" / "python"


def probe(jobs: list[dict], defaults: bool = False, standalone: bool = False, cwd: Path | None = None,
          ray_configs: list[tuple[str, int]] = ()) -> dict:
    """Parse every job ({argv, post_init?, world?}) with ms-swift's MegatronRLHFArguments in one process; with
    ``post_init`` also construct it (its __post_init__ checks, world size ``world``) and report what it raised.
    ``ray_configs`` ((path, training GPUs) of Ray configs): each read with ms-swift's own Ray YAML reader
    (swift/ray/megatron/driver_utils.py parse_ray_yaml, merge_group_dict, _dict_to_argv) into the train group's
    arguments as its workers get them, then parsed and constructed the same way; their results follow the jobs'."""
    env = {**os.environ, "PYTHONPATH": str(STANDINS), "MODELSCOPE_CACHE": str(cwd or Path.cwd()),
           "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([str(python()), "-c", PROBE], input=json.dumps({"jobs": jobs, "defaults": defaults,
                                                                          "standalone": standalone,
                                                                          "ray_configs": list(ray_configs)}),
                          capture_output=True, text=True, timeout=900, cwd=cwd, env=env)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])
