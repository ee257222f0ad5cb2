"""The rendered single-node script of the tiny CPU job starts real ms-swift, and it trains."""

import json
import subprocess

import pytest

from grpo_ui.launch.render import render, write_bundle
from grpo_ui.spec.yaml_io import validate_spec
from tests.tiny_job import ASSETS, tiny_spec_data


@pytest.mark.slow
def test_rendered_node_script_trains_with_real_ms_swift(tmp_path, swift_python):
    if not (ASSETS / "model" / "config.json").exists():
        pytest.fail(f"tiny model missing at {ASSETS}: run `make assets` (make test does it)")
    data = tiny_spec_data(max_steps=2)
    data["cluster"]["run_root"] = str(tmp_path / "runs")
    data["train"]["output_dir"] = str(tmp_path / "out")
    spec = validate_spec(data)
    write_bundle(render(spec, "tiny-1"), tmp_path / "bundle")
    with open(tmp_path / "node.log", "w") as log:
        proc = subprocess.run(["bash", str(tmp_path / "bundle" / "node_0.sh")], stdout=log, stderr=subprocess.STDOUT,
                              timeout=600)
    text = (tmp_path / "node.log").read_text()
    assert proc.returncode == 0, text[-3000:]
    assert (tmp_path / "runs/tiny-1/exit_code.0").read_text().strip() == "0"
    (logging,) = (tmp_path / "out").glob("v*-*/logging.jsonl")
    steps = [json.loads(line) for line in logging.read_text().splitlines()]
    assert [s["global_step/max_steps"] for s in steps if "loss" in s] == ["1/2", "2/2"]
    assert "run sh: `" in text and "--nproc_per_node 1" in text  # went through torchrun, as on a GPU node
