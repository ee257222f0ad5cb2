"""Model and GPU catalogue: counts computed from the architecture match the published ones; hub ids as people spell
them (quantised variants included); GPU names as nvidia-smi prints them; config.json from text, a path or a node."""

import json

import pytest

from grpo_ui.backends.remote.runner import LocalRunner
from grpo_ui.knowledge.catalog import (
    fetch_hf_config,
    find_gpu,
    find_model,
    from_hf_config,
    gpus,
    hub_models,
    model_params_b,
    models,
    quant_from_hf_config,
    quant_of,
    resolve_gpu,
)


def test_catalogue_is_broad():
    assert len(models()) >= 30
    names = " ".join(models())
    for family in ("Qwen2.5-", "Qwen3-", "Qwen3-30B-A3B", "Qwen2.5-VL-", "Qwen-7B", "Llama-3", "DeepSeek-R1-Distill",
                   "Mistral-7B", "gemma-2", "gemma-3", "Phi"):
        assert family in names
    assert len(gpus()) >= 60
    for gpu in ("Tesla V100-SXM2-32GB", "Tesla T4", "NVIDIA A100-SXM4-80GB", "NVIDIA A800-SXM4-80GB", "NVIDIA A10",
                "NVIDIA L20", "NVIDIA L40S", "NVIDIA H800", "NVIDIA H20", "NVIDIA H100 80GB HBM3", "NVIDIA H200",
                "NVIDIA B200", "NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090",
                "NVIDIA RTX A6000", "NVIDIA RTX 6000 Ada Generation"):
        assert gpu in gpus()


@pytest.mark.parametrize("name", sorted(models()))
def test_computed_parameter_count_matches_published(name):
    arch = models()[name]
    if arch.params_b:  # Qwen3.5-35B-A3B: no published count to compare with
        assert arch.total_params() / 1e9 == pytest.approx(arch.params_b, rel=0.02)
    if arch.active_params_b:
        assert arch.total_params(active=True) / 1e9 == pytest.approx(arch.active_params_b, rel=0.03)


def test_lookup_by_hub_id_alias_and_name():
    assert find_model("Qwen/Qwen2.5-7B-Instruct").name == "Qwen2.5-7B"
    assert find_model("/models/Qwen2.5-Math-7B").name == "Qwen2.5-7B"
    assert find_model("meta-llama/Llama-3.3-70B-Instruct").name == "Llama-3.1-70B"
    assert find_model("not-a-model") is None
    assert model_params_b("org/Some-13B-Chat") == 13.0
    assert find_gpu("TPU") is None


@pytest.mark.parametrize("typed,name", [
    ("Qwen/Qwen-1_8B", "Qwen-1.8B"), ("qwen/Qwen-7B-Chat-Int4", "Qwen-7B"), ("01-ai/Yi-34B", "Yi-1.5-34B"),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen2.5-7B"), ("unsloth/qwen3-14b-unsloth-bnb-4bit", "Qwen3-14B"),
    ("Qwen/Qwen2.5-Omni-7B", "Qwen2.5-Omni-7B"), ("Qwen/Qwen3.5-35B-A3B", "Qwen3.5-35B-A3B"),
    ("ZhipuAI/chatglm3-6b", "chatglm3-6b"), ("Qwen/Qwen3-8B-FP8", "Qwen3-8B")])
def test_hub_ids_as_people_spell_them(typed, name):
    assert find_model(typed).name == name


def test_every_entry_offers_hub_ids_that_lead_back_to_it():
    """The Model picker offers these ids as --model: each is owner/name, and the lookup finds its own entry."""
    assert all(arch.hub for arch in models().values()), [a.name for a in models().values() if not a.hub]
    for hub_id, arch in hub_models().items():
        owner, _, name = hub_id.partition("/")
        assert owner and name and "/" not in name, hub_id
        assert find_model(hub_id) is arch, (hub_id, arch.name, find_model(hub_id))


def test_quantisation_read_from_the_hub_id_or_config_json():
    assert [quant_of(n) for n in ("Qwen/Qwen-7B-Chat-Int4", "Qwen/Qwen2.5-72B-Instruct-GPTQ-Int8", "x/Y-AWQ",
                                  "unsloth/Llama-3.1-8B-bnb-4bit", "Qwen/Qwen3-8B-FP8", "Qwen/Qwen2.5-7B")] == [
        "gptq4", "gptq8", "awq4", "bnb4", "fp8", ""]
    assert quant_from_hf_config({"quantization_config": {"quant_method": "awq", "bits": 4}}) == "awq4"
    assert quant_from_hf_config({}) == ""


@pytest.mark.parametrize("typed,name", [
    ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"), ("nvidia geforce rtx 3090", "NVIDIA GeForce RTX 3090"),
    ("NVIDIA  H800", "NVIDIA H800"), ("NVIDIA L20", "NVIDIA L20"), ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),
    ("Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB"), ("A100 80GB", "NVIDIA A100-SXM4-80GB"),
    ("H100 80GB", "NVIDIA H100 80GB HBM3"), ("RTX 4090", "NVIDIA GeForce RTX 4090"), ("T4", "Tesla T4")])
def test_gpu_names_as_nvidia_smi_prints_them_and_short_names(typed, name):
    assert find_gpu(typed).name == name


def test_an_unknown_gpu_names_the_closest():
    with pytest.raises(ValueError, match="Closest: NVIDIA H800") as e:
        resolve_gpu("NVIDIA H880")
    assert e.value.closest[0] == "NVIDIA H800"


QWEN25_7B_CONFIG = {  # the fields of Qwen/Qwen2.5-7B-Instruct's config.json that matter
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_import_config_json_from_text_path_and_dir(tmp_path):
    text = json.dumps(QWEN25_7B_CONFIG)
    (tmp_path / "config.json").write_text(text)
    for source in (text, str(tmp_path / "config.json"), str(tmp_path), QWEN25_7B_CONFIG):
        assert from_hf_config(source).total_params() == find_model("Qwen2.5-7B").total_params()


def test_import_moe_and_vl_configs():
    moe = from_hf_config({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
                          "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                          "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                          "num_experts_per_tok": 8})
    assert moe.total_params() == models()["Qwen3-30B-A3B"].total_params()
    vl = from_hf_config({"architectures": ["Qwen2_5_VLForConditionalGeneration"], **QWEN25_7B_CONFIG,
                         "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                                           "out_hidden_size": 3584, "spatial_merge_size": 2, "patch_size": 14,
                                           "temporal_patch_size": 2}})
    assert vl.total_params() == models()["Qwen2.5-VL-7B"].total_params()


def test_import_hybrid_and_omni_configs():
    hybrid = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
              "num_hidden_layers": 48, "full_attention_interval": 4, "num_attention_heads": 16,
              "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
              "linear_key_head_dim": 128, "linear_value_head_dim": 128, "intermediate_size": 5632,
              "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_experts": 512,
              "num_experts_per_tok": 10, "vocab_size": 151936}
    arch = from_hf_config(hybrid)
    assert arch.linear_attention_layers == 36 and arch.total_params() == models()["Qwen3-Next-80B-A3B"].total_params()
    omni = from_hf_config({"architectures": ["Qwen2_5OmniModel"], "thinker_config": {
        "text_config": QWEN25_7B_CONFIG, "vision_config": {"depth": 32, "hidden_size": 1280}}})
    assert omni.hidden_size == 3584 and omni.vision.depth == 32


def test_config_json_read_on_a_node_through_its_runner(tmp_path):
    model = tmp_path / "models" / "mine"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(QWEN25_7B_CONFIG))
    cfg = fetch_hf_config(LocalRunner(), str(model))
    assert from_hf_config(cfg).total_params() == find_model("Qwen2.5-7B").total_params()
    with pytest.raises(ValueError, match="cannot read .*/nowhere/config.json"):
        fetch_hf_config(LocalRunner(), str(tmp_path / "nowhere"))


@pytest.mark.parametrize("bad,msg", [("{not json", "not valid JSON"), ('{"hidden_size": 1}', "lacks"),
                                     ("/nonexistent/config.json", "cannot read")])
def test_bad_config_is_a_clear_error(bad, msg):
    with pytest.raises(ValueError, match=msg):
        from_hf_config(bad)
