"""A model's config.json from its hub (grpo_ui.knowledge.hub) against a hub on 127.0.0.1 (tests/hub_server.py) that
the real clients accept: ModelScope by default, Hugging Face with use_hf, the endpoint and token variables their
clients read, the cache, and a clear error for a gated, missing or unreachable model; then both estimates of a model
the catalogue lacks, through the CLI."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_ui.knowledge import hub
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.yaml_io import spec_to_yaml
from tests.hub_server import HubServer

ROOT = Path(__file__).parent.parent
TINY = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 400}
# A MoE of a family the catalogue lacks (Qwen3-MoE layout, 16 experts, 2 per token): its active parameters come from
# the config.
MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 1024,
       "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64,
       "intermediate_size": 3072, "moe_intermediate_size": 512, "num_experts": 16, "num_experts_per_tok": 2,
       "vocab_size": 32000, "tie_word_embeddings": False}
# Qwen3.5's hybrid layout (3 Gated DeltaNet layers to 1 full attention), as its config.json nests it in text_config
QWEN35 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": {
    "model_type": "qwen3_5_text", "hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1536, "vocab_size": 4096,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
    "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 64, "linear_value_head_dim": 64}}
REPOS = {"acme/tiny": {"config.json": json.dumps(TINY).encode()},
         "acme/Moe-2B-A0.3B": {"config.json": json.dumps(MOE).encode()},
         "acme/Qwen3.5-Mini": {"config.json": json.dumps(QWEN35).encode()},
         "acme/gated": {"config.json": json.dumps(TINY).encode()}}


@pytest.fixture
def hubs(tmp_path, monkeypatch):
    """The test hub as both ModelScope and Hugging Face, an empty data directory, no tokens."""
    with HubServer(REPOS, gated=("acme/gated",)) as server:
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN", "MODELSCOPE_DOMAIN"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", server.url)
        monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path / "home"))
        hub._failures.clear()
        yield server
    hub._failures.clear()


def client(swift_python, tmp_path, server, code, **env):
    """Run a real hub client (the ms-swift venv's huggingface_hub / modelscope) against the test hub."""
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_ENDPOINT": server.url,
            "MODELSCOPE_ENDPOINT": server.url, "HF_HUB_CACHE": str(tmp_path / "hf"),
            "MODELSCOPE_CACHE": str(tmp_path / "ms"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    return subprocess.run([str(swift_python), "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=180)


def test_the_test_hub_answers_as_the_real_clients_expect(swift_python, tmp_path, hubs):
    """huggingface_hub's hf_hub_download and modelscope's model_file_download, pointed at the test hub by their
    endpoint variables, read config.json from it; the gated repo refuses huggingface_hub without HF_TOKEN (its
    GatedRepoError) and serves it with the token."""
    hf = "from huggingface_hub import hf_hub_download as d; print(open(d('acme/tiny', 'config.json')).read())"
    ms = ("from modelscope.hub.file_download import model_file_download as d; "
          "print(open(d('acme/tiny', 'config.json')).read())")
    for code in (hf, ms):
        done = client(swift_python, tmp_path, hubs, code)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout) == TINY
    gated = "from huggingface_hub import hf_hub_download as d; print(open(d('acme/gated', 'config.json')).read())"
    refused = client(swift_python, tmp_path / "a", hubs, gated)
    assert refused.returncode != 0 and "GatedRepoError" in refused.stderr
    allowed = client(swift_python, tmp_path / "b", hubs, gated, HF_TOKEN=hubs.token)
    assert allowed.returncode == 0 and json.loads(allowed.stdout) == TINY
    assert {path.split("?")[0] for _, path, _ in hubs.requests} >= {
        "/acme/tiny/resolve/main/config.json", "/api/v1/models/acme/tiny/repo"}


def test_modelscope_by_default_hugging_face_with_use_hf_and_the_cache(hubs):
    arch = hub.lookup("acme/Moe-2B-A0.3B", use_hf=False)
    assert (arch.num_experts, arch.num_experts_per_tok, arch.moe_intermediate_size) == (16, 2, 512)
    assert arch.total_params(active=True) < arch.total_params() / 2
    assert [path for _, path, _ in hubs.requests] == [
        "/api/v1/models/acme/Moe-2B-A0.3B/repo?Revision=master&FilePath=config.json"]
    hub.lookup("acme/Moe-2B-A0.3B", use_hf=False)  # cached: no second request
    assert len(hubs.requests) == 1
    assert hub.lookup("acme/tiny", use_hf=True).hidden_size == 64
    assert hubs.requests[-1][1] == "/acme/tiny/resolve/main/config.json"
    cached = Path(hub.cache_file(hub.hub_for(True), "acme/tiny"))
    assert json.loads(cached.read_text()) == TINY and str(cached).startswith(str(hub.home()))
    assert hub.lookup("./local/dir", use_hf=False) is None and hub.lookup(None, use_hf=True) is None


def test_a_new_family_s_config_from_the_hub():
    arch = hub.from_hf_config(QWEN35)
    assert (arch.linear_attention_layers, arch.full_attention_layers) == (6, 2)


def test_tokens_reach_each_hub_the_way_its_client_sends_them(hubs, monkeypatch):
    with pytest.raises(hub.HubError, match=r"refused acme/gated's config.json \(HTTP 401\) with no token "
                                           r"\(MODELSCOPE_API_TOKEN is not set\)"):
        hub.lookup("acme/gated", use_hf=False)
    monkeypatch.setenv("MODELSCOPE_API_TOKEN", hubs.token)
    hub._failures.clear()
    assert hub.lookup("acme/gated", use_hf=False).hidden_size == 64
    assert hubs.requests[-1][2] == hubs.token
    with pytest.raises(hub.HubError, match=r"Hugging Face refused .* \(HF_TOKEN is not set\)"):
        hub.lookup("acme/gated", use_hf=True)
    monkeypatch.setenv("HF_TOKEN", hubs.token)
    hub._failures.clear()
    assert hub.lookup("acme/gated", use_hf=True).hidden_size == 64


def test_missing_and_unreachable_models_are_clear_errors(hubs, monkeypatch):
    with pytest.raises(hub.HubError, match=r"ModelScope has no model acme/nothing \(HTTP 404\).*train.use_hf"):
        hub.lookup("acme/nothing", use_hf=False)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", closed)
    with pytest.raises(hub.HubError, match="cannot reach Hugging Face at .* Offline\\? Give the model's config.json"):
        hub.lookup("acme/tiny", use_hf=True)
    monkeypatch.setenv("HF_ENDPOINT", hubs.url)  # within RETRY_AFTER_S the failure is remembered, not retried
    seen = len(hubs.requests)
    with pytest.raises(hub.HubError):
        hub.fetch_config("acme/tiny", hub.Hub("Hugging Face", closed, None, "HF_ENDPOINT", "HF_TOKEN"))
    assert len(hubs.requests) == seen


def test_the_endpoint_variables_the_clients_read():
    assert hub.hub_for(False, {}).endpoint == "https://www.modelscope.cn"
    assert hub.hub_for(False, {"MODELSCOPE_DOMAIN": "modelscope.example"}).endpoint == "https://modelscope.example"
    assert hub.hub_for(False, {"MODELSCOPE_DOMAIN": "a.example", "MODELSCOPE_ENDPOINT": "http://b:1/"}).endpoint \
        == "http://b:1"
    assert hub.hub_for(True, {}).endpoint == "https://huggingface.co"
    assert hub.hub_for(True, {"HUGGING_FACE_HUB_TOKEN": "t"}).token == "t"
    assert not hub.is_hub_id("a/../b") and not hub.is_hub_id("/abs/path") and hub.is_hub_id("Qwen/Qwen3.5-9B")


def job_yaml(tmp_path, **changes) -> Path:
    spec = with_changes(JobSpec(), {"train.model": "acme/Moe-2B-A0.3B", "train.dataset": ["d.jsonl"],
                                    "train.reward_funcs": ["accuracy"], "rollout.use_vllm": True,
                                    "rollout.vllm_mode": "colocate", "cluster.nodes": [
                                        {"host": "n", "gpus": [0, 1], "gpu_model": "H100"}], **changes})
    path = tmp_path / "job.yaml"
    path.write_text(spec_to_yaml(spec))
    return path


def estimate(path: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_ui", "estimate", str(path), "--json"], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **env})


def test_both_estimates_of_a_model_only_the_hub_knows(hubs, tmp_path):
    """The CLI fetches the MoE's config.json from ModelScope (use_hf: Hugging Face): the memory estimate counts its
    parameters, the step time its active ones; offline, it says so and what to do."""
    env = {"GRPO_UI_HOME": str(tmp_path / "home"), "MODELSCOPE_ENDPOINT": hubs.url, "HF_ENDPOINT": hubs.url}
    done = estimate(job_yaml(tmp_path), env)
    out = json.loads(done.stdout)
    arch = hub.from_hf_config(MOE)
    assert out["params_b"] == pytest.approx(arch.total_params() / 1e9, abs=1e-3)
    assert out["time"]["step_s"] > 0
    assert hubs.requests[-1][1].startswith("/api/v1/models/acme/Moe-2B-A0.3B/repo")
    hf = estimate(job_yaml(tmp_path, **{"train.use_hf": True, "train.model": "acme/tiny"}), env)
    assert json.loads(hf.stdout)["model"] == "tiny" and hubs.requests[-1][1] == "/acme/tiny/resolve/main/config.json"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    offline = estimate(job_yaml(tmp_path, **{"train.model": "acme/Qwen3.5-Mini"}),
                       {**env, "MODELSCOPE_ENDPOINT": closed})
    assert offline.returncode == 2
    assert offline.stderr.startswith("cannot estimate: cannot reach ModelScope at http://127.0.0.1:")
    assert "Traceback" not in offline.stderr
