"""Model and GPU catalogue: counts computed from the architecture match the published ones; config.json import."""

import json

import pytest

from grpo_ui.catalog import find_gpu, find_model, from_hf_config, gpus, model_params_b, models


def test_catalogue_is_broad():
    assert len(models()) >= 30
    names = " ".join(models())
    for family in ("Qwen2.5-", "Qwen3-", "Qwen3-30B-A3B", "Qwen2.5-VL-", "Qwen-7B", "Llama-3", "DeepSeek-R1-Distill",
                   "Mistral-7B", "gemma-2", "gemma-3", "Phi"):
        assert family in names
    for gpu in ("RTX 3090", "RTX 4090", "A10", "A10G", "L4", "L40S", "A100 40GB", "A100 80GB", "A800 80GB", "H20",
                "H100 80GB", "H200 141GB", "B200"):
        assert gpu in gpus()


@pytest.mark.parametrize("name", sorted(models()))
def test_computed_parameter_count_matches_published(name):
    arch = models()[name]
    assert arch.total_params() / 1e9 == pytest.approx(arch.params_b, rel=0.02)
    if arch.active_params_b:
        assert arch.total_params(active=True) / 1e9 == pytest.approx(arch.active_params_b, rel=0.03)


def test_lookup_by_hub_id_alias_and_name():
    assert find_model("Qwen/Qwen2.5-7B-Instruct").name == "Qwen2.5-7B"
    assert find_model("/models/Qwen2.5-Math-7B").name == "Qwen2.5-7B"
    assert find_model("meta-llama/Llama-3.3-70B-Instruct").name == "Llama-3.1-70B"
    assert find_model("not-a-model") is None
    assert model_params_b("org/Some-13B-Chat") == 13.0
    assert find_gpu("NVIDIA H100 80GB HBM3").name == "H100 80GB" and find_gpu("TPU") is None


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


@pytest.mark.parametrize("bad,msg", [("{not json", "not valid JSON"), ('{"hidden_size": 1}', "lacks"),
                                     ("/nonexistent/config.json", "cannot read")])
def test_bad_config_is_a_clear_error(bad, msg):
    with pytest.raises(ValueError, match=msg):
        from_hf_config(bad)
