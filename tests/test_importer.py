"""Importer: each shell construct a launch script uses, encodings and bad files, config files (uploaded vs local),
what only the caller's shell knows, topology and disagreements. End-to-end fidelity against bash and ms-swift is
tests/test_import_corpus.py; these are the single constructs, each shown on its own."""

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from grpo_ui.core.findings import has_errors
from grpo_ui.importer import import_scripts, import_uploads
from grpo_ui.importer.bash import parse
from grpo_ui.launch.render import render
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.swift_cli import train_command
from grpo_ui.spec.yaml_io import spec_to_yaml

HEAD = "swift rlhf --rlhf_type grpo --dataset d --reward_funcs format "


def args(text: str) -> list[str]:
    (inv,) = parse(text, "t.sh")[0]
    return [w.text for w in inv.args]


def env(text: str) -> dict[str, str]:
    (inv,) = parse(text, "t.sh")[0]
    return {k: w.text for k, w in inv.env.items()}


def ids(findings) -> set[str]:
    return {f.id for f in findings}


@pytest.mark.parametrize("text,expected", [
    ("swift rlhf --dataset AI-MO/NuminaMath-TIR#1000 --x 1  # note", ["--dataset", "AI-MO/NuminaMath-TIR#1000", "--x",
                                                                    "1"]),
    ("swift rlhf --a 'x y' \"z  w\" v\\ u", ["--a", "x y", "z  w", "v u"]),
    ("swift rlhf --a 'it'\\''s' \"say \\\"hi\\\" \\$5\"", ["--a", "it's", 'say "hi" $5']),
    ("swift rlhf --a $'tab\\there'", ["--a", "tab\there"]),
    ("swift rlhf \\\n  --a 1 \\\n  --b 2", ["--a", "1", "--b", "2"]),
    ("swift rlhf --system \"line 1\nline # 2\"", ["--system", "line 1\nline # 2"]),
    ("M=q/m\nswift rlhf --model $M --n ${M}-x", ["--model", "q/m", "--n", "q/m-x"]),
    ("swift rlhf --n ${N:-4} --m ${N-5} --k ${UNSET:+yes}", ["--n", "4", "--m", "5", "--k"]),
    ("N=8\nswift rlhf --g $((N / 3)) --h $(( (N + 1) * 2 ))", ["--g", "2", "--h", "18"]),
    ("A=(--x 1 --y 'a b')\nswift rlhf \"${A[@]}\" ${A[1]}", ["--x", "1", "--y", "a b", "1"]),
    ("F='--p 1 --q 2'\nswift rlhf $F \"$F\"", ["--p", "1", "--q", "2", "--p 1 --q 2"]),
    ("R=a\nR+=' b'\nswift rlhf --r $R", ["--r", "a", "b"]),
    ("run() { swift rlhf --f 1; }\nrun", ["--f", "1"]),
    ("nohup swift rlhf --n 1 > log 2>&1 &", ["--n", "1"]),
    ("swift rlhf --n 1 2>&1 | tee log && echo ok", ["--n", "1"]),
])
def test_words_as_bash_expands_them(text, expected):
    assert args(text) == expected


def test_environment_is_exported_variables_and_prefixes_only():
    text = ("export A=1\nB=2\nexport C\nC=3\nA=4\ndeclare -x D=5\nexport E=6\nunset E\n"
            "X=7 env Y=8 swift rlhf --n 1")
    assert env(text) == {"A": "4", "C": "3", "D": "5", "X": "7", "Y": "8"}


def test_several_invocations_and_the_torchrun_form():
    text = ("CUDA_VISIBLE_DEVICES=0 swift rollout --model m &\n"
            "torchrun --nproc_per_node=4 --nnodes 2 --node_rank=1 --master_addr=10.0.0.1 swift/cli/rlhf.py --n 1\n"
            "python -m torch.distributed.run --nproc-per-node 2 /x/swift/cli/rlhf.py --n 2\nswift export --m 1\n")
    rollout, torchrun, python = parse(text, "t.sh")[0]
    assert rollout.kind == "rollout" and rollout.env["CUDA_VISIBLE_DEVICES"].text == "0"
    assert {k: w.text for k, w in torchrun.env.items()} == {"NPROC_PER_NODE": "4", "NNODES": "2", "NODE_RANK": "1",
                                                            "MASTER_ADDR": "10.0.0.1"}
    assert python.env["NPROC_PER_NODE"].text == "2" and [w.text for w in python.args] == ["--n", "2"]


def test_what_bash_cannot_decide_here_is_reported_not_guessed():
    invs, notices = parse("if [ x = y ]; then swift rlhf --a 1; fi\nsource env.sh\nswift rlhf --b 1 \\\n"
                          "  # --c 2 \\\n  --d 3\n", "t.sh")
    assert [w.text for w in invs[0].args] == ["--b", "1"]
    assert [n.kind for n in notices] == ["flow", "source", "orphan"]
    _, findings = import_scripts([("t.sh", HEAD + "\n  # --num_generations 4 \\\n  --beta 0\n")])
    assert "IMPORT-ORPHAN-FLAGS" in ids(findings)


def test_field_report_004_script_keeps_everything_after_the_hash():
    """The '#' inside the dataset name once dropped ZeRO-2 and colocated vLLM, so the estimate said FITS."""
    script = ("CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 swift rlhf --rlhf_type grpo --model Qwen/Qwen2-7B-Instruct"
              " --dataset AI-MO/NuminaMath-TIR#1000 --deepspeed zero2 --use_vllm true --vllm_mode colocate "
              "--vllm_gpu_memory_utilization 0.8 --reward_funcs accuracy --per_device_train_batch_size 2")
    spec, findings = import_scripts([("004.sh", script)])
    assert spec.train.deepspeed == "zero2" and spec.rollout.use_vllm and spec.rollout.vllm_mode == "colocate"
    assert spec.rollout.vllm_gpu_memory_utilization == 0.8 and not has_errors(findings)


def test_nothing_lost_nothing_invented():
    script = (HEAD + "--model m --logging_steps 1 --report_to tensorboard wandb --learning_rate 1e-6 "
              "--save_total_limit 2 --deepspeed zero3 --dataloader_num_workers 4 --num_train_epochs 1 "
              "--gradient_checkpointing_kwargs '{\"use_reentrant\": false}'")
    spec, findings = import_scripts([("a.sh", script)])
    t = spec.train
    assert (t.logging_steps, t.report_to, t.learning_rate, t.save_total_limit) == (1, ["tensorboard", "wandb"], 1e-6, 2)
    assert (t.deepspeed, t.dataloader_num_workers, t.num_train_epochs) == ("zero3", 4, 1)
    assert "output_dir" not in t.model_fields_set and "torch_dtype" not in t.model_fields_set
    assert spec.extra_args == ["--gradient_checkpointing_kwargs", '{"use_reentrant": false}']
    assert "IMPORT-UNKNOWN-FLAG" in ids(findings) and next(f for f in findings if f.id == "IMPORT-UNKNOWN-FLAG"
                                                            ).severity == "info"
    argv = train_command(spec).argv
    assert "--output_dir" not in argv and argv[-2:] == spec.extra_args


def test_unresolved_values_are_findings_with_the_line_never_a_literal_in_a_script():
    script = "#!/bin/bash\n\nswift rlhf --rlhf_type grpo \\\n  --model $MODEL \\\n  --num_generations $NGEN \\\n" \
             "  --output_dir out/$(date +%s) --dataset d --reward_funcs format\n"
    spec, findings = import_scripts([("run.sh", script)])
    msgs = {f.fields[0]: f.message for f in findings if f.id == "IMPORT-UNRESOLVED"}
    assert "line 4" in msgs["train.model"] and "--model" in msgs["train.model"] and "$MODEL" in msgs["train.model"]
    assert "line 5" in msgs["train.num_generations"] and "$(date +%s)" in msgs["train.output_dir"]
    assert spec.unresolved == {"train.model": "$MODEL", "train.num_generations": "$NGEN",
                               "train.output_dir": "out/$(date +%s)"}
    assert spec.train.model is None and "num_generations" not in spec.train.model_fields_set
    text = "".join(render(spec, "j").files.values())
    assert "$MODEL" not in text and "$NGEN" not in text and "date +%s" not in text


def test_a_value_its_field_rejects_is_a_finding_not_a_traceback():
    spec, findings = import_scripts([("a.sh", HEAD + "--model m --num_generations eight --beta -1")])
    bad = {f.fields[0]: f.message for f in findings if f.id == "IMPORT-BAD-VALUE"}
    assert set(bad) == {"train.num_generations", "train.beta"} and "'eight'" in bad["train.num_generations"]
    assert spec.unresolved["train.num_generations"] == "eight"


def test_encodings_and_line_ends():
    script = (HEAD + "--model m --system '你是一个数学助手'\n")
    for data, finding_id in [(script.encode("utf-8"), None), (b"\xef\xbb\xbf" + script.encode(), None),
                             (script.encode("gbk"), "IMPORT-ENCODING"), (script.encode("gb18030"), "IMPORT-ENCODING"),
                             (script.replace("\n", "\r\n").encode(), "IMPORT-CRLF")]:
        spec, findings = import_scripts([("a.sh", data)])
        assert spec.train.system == "你是一个数学助手" and spec.train.model == "m", data[:20]
        assert ({finding_id} if finding_id else set()) == ids(findings) & {"IMPORT-ENCODING", "IMPORT-CRLF"}
    assert next(f for f in import_scripts([("a.sh", script.encode("gbk"))])[1]).severity == "info"


@pytest.mark.parametrize("data,words", [
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary"),
    (b"#" * (2 << 20), "too large"),
    (b"swift rlhf \xff\xfe\xfa --model m", "neither UTF-8 nor GBK"),
])
def test_binary_huge_and_undecodable_files_are_clear_errors_naming_the_file(data, words):
    with pytest.raises(SpecError) as e:
        import_scripts([("weights.bin", data)])
    assert "weights.bin" in str(e.value) and words in str(e.value)


def test_no_swift_rlhf_is_a_clear_error():
    with pytest.raises(SpecError, match="no `swift rlhf`"):
        import_scripts([("x.sh", "echo hello\n")])
    _, f = import_scripts([("dpo.sh", "swift rlhf --rlhf_type dpo --model m")])
    assert "IMPORT-NOT-GRPO" in ids(f)


CONFIG = b"ENV: {NPROC_PER_NODE: 2, CUDA_VISIBLE_DEVICES: '0,1'}\nrlhf_type: grpo\nmodel: Qwen/Qwen3-8B\n" \
         b"reward_funcs: [accuracy, format]\nuse_vllm: true\nvllm_mode: colocate\ndataset: [d1]\nnum_generations: 8\n"


def test_positional_yaml_the_command_line_overrides_it_and_its_env_block_counts():
    spec, findings = import_scripts([("run.sh", "swift rlhf grpo.yaml --num_generations 16 2>&1 | tee log\n")],
                                    files={"grpo.yaml": CONFIG})
    assert spec.train.model == "Qwen/Qwen3-8B" and spec.train.reward_funcs == ["accuracy", "format"]
    assert spec.train.num_generations == 16 and spec.cluster.nodes[0].gpus == [0, 1] and not findings


def test_config_flag_values_win_over_the_command_line_as_in_3_x():
    spec, _ = import_scripts([("r.sh", "swift rlhf --config c.yaml --num_generations 4")], "3.12",
                             files={"c.yaml": b"model: m\ndataset: [d]\nreward_funcs: [format]\nnum_generations: 8\n"})
    assert spec.train.model == "m" and spec.train.num_generations == 8


def test_the_web_page_never_reads_a_referenced_file_from_disk(tmp_path, monkeypatch):
    (tmp_path / "grpo.yaml").write_bytes(CONFIG)
    monkeypatch.chdir(tmp_path)
    script = b"swift rlhf grpo.yaml --model m\n"
    spec, findings = import_uploads({"run.sh": script})
    missing = [f for f in findings if f.id == "IMPORT-CONFIG-MISSING"]
    assert missing and "grpo.yaml" in missing[0].message and spec.train.num_generations == 8  # ms-swift's default
    assert "num_generations" not in spec.train.model_fields_set
    uploaded, findings = import_uploads({"run.sh": script, "grpo.yaml": CONFIG})
    assert uploaded.train.num_generations == 8 and "num_generations" in uploaded.train.model_fields_set
    local, _ = import_scripts([("run.sh", script)], local_dir=tmp_path)  # the command line may read next to the script
    assert "num_generations" in local.train.model_fields_set


@pytest.mark.parametrize("version", ["3.12", "4.6"])
def test_an_absolute_config_path_in_an_uploaded_script_is_never_read_from_the_app_host(tmp_path, version):
    """`--config /etc/passwd`-style paths: the web import names the file as missing and reads nothing from disk."""
    on_host = tmp_path / "host.yaml"
    on_host.write_bytes(b"model: read-from-the-app-host\nnum_generations: 4\n")
    spec, findings = import_uploads({"run.sh": f"swift rlhf --config {on_host} --model m\n".encode()}, version)
    assert spec.train.model == "m" and "num_generations" not in spec.train.model_fields_set
    assert any(f.id == "IMPORT-CONFIG-MISSING" and str(on_host) in f.message for f in findings)


def test_a_single_job_yaml_upload_is_a_spec():
    spec, findings = import_uploads({"job.yaml": spec_to_yaml(import_scripts([("a.sh", HEAD + "--model m")])[0]
                                                              ).encode()})
    assert spec.train.model == "m" and not findings


def node(rank: int, nproc: int = 4, gpus: str = "0,1,2,3", extra: str = "", master: str = "10.1.1.1") -> str:
    return (f"export NNODES=2 NODE_RANK={rank} MASTER_ADDR={master} MASTER_PORT=29500 NPROC_PER_NODE={nproc}\n"
            f"export CUDA_VISIBLE_DEVICES={gpus}\n" + HEAD + f"--model m --use_vllm true --vllm_mode colocate{extra}\n")


def test_node_scripts_build_the_cluster_in_rank_order():
    spec, findings = import_scripts([("n1.sh", node(1)), ("n0.sh", node(0, master="127.0.0.1"))])
    assert [n.host for n in spec.cluster.nodes] == ["10.1.1.1", "node1"] and spec.cluster.master_addr == "10.1.1.1"
    assert resolve(spec).world_size == 8 and spec.cluster.nodes[0].env == {}  # launch variables are grpo-ui's to set
    assert not has_errors(findings) and "IMPORT-LAUNCH-ENV" not in ids(findings)  # node 0's 127.0.0.1: same master


def test_disagreements_between_node_scripts_are_findings():
    _, bad = import_scripts([("n0.sh", node(0)), ("n1.sh", node(1, 2, "0,1", " --num_generations 4"))])
    msgs = " ".join(f.message for f in bad if f.severity == "error")
    assert "--num_generations" in msgs and "NPROC_PER_NODE" in msgs
    _, bad = import_scripts([("n0.sh", node(0)), ("n1.sh", node(1, master="10.9.9.9"))])
    assert "NODE-ENV-DIFFER" in ids(bad)


def test_gpu_count_against_nproc_per_node_is_field_report_003():
    spec, findings = import_scripts([("a.sh", node(0, 4, "0,1,2,3,4,5,6,7").replace("NNODES=2", "NNODES=1"))])
    (f,) = [f for f in findings if f.id == "IMPORT-NPROC-GPUS"]
    assert f.severity == "error" and "NPROC_PER_NODE=4" in f.message and "8 GPU" in f.message
    assert spec.cluster.nodes[0].gpus == list(range(8)) and spec.cluster.nodes[0].env == {}
    assert "NPROC_PER_NODE=8" in render(spec, "j").files["node_0.sh"]  # launch variables follow the node's gpus


def test_launch_variables_a_script_sets_differently_are_findings_not_node_env():
    """grpo-ui sets NODE_RANK, MASTER_ADDR and friends itself (a spec's env may not): rank 1 pointing at itself is
    reported, and the node keeps no env override."""
    spec, findings = import_scripts([("n0.sh", node(0)), ("n1.sh", node(1, master="127.0.0.1"))])
    (f,) = [f for f in findings if f.id == "IMPORT-LAUNCH-ENV"]
    assert "n1.sh sets MASTER_ADDR=127.0.0.1" in f.message and "MASTER_ADDR=10.1.1.1" in f.message
    assert f.fields == ("cluster.nodes[1]",) and all(not n.env for n in spec.cluster.nodes)


def test_nnodes_against_the_scripts_given():
    spec, findings = import_scripts([("all.sh", node(0))])
    assert len(spec.trainer_nodes()) == 2 and "IMPORT-ONE-SCRIPT-NODES" in ids(findings)
    three = node(0).replace("NNODES=2", "NNODES=3")
    _, findings = import_scripts([("a.sh", three), ("b.sh", node(1).replace("NNODES=2", "NNODES=3"))])
    assert "IMPORT-NNODES" in ids(findings)


def test_rollout_hosts_and_ports_come_from_the_trainer_flags():
    train = HEAD + "--model m --use_vllm true --vllm_mode server --vllm_server_host 10.1.2.3 10.1.2.4 " \
                   "--vllm_server_port 8001 8002 --sleep_level 1\n"
    rollouts = [(f"r{i}.sh", f"CUDA_VISIBLE_DEVICES=0,1 swift rollout --model m --vllm_data_parallel_size 2 "
                 f"--port 800{i + 1}\n") for i in range(2)]
    spec, findings = import_scripts([("t.sh", train), *rollouts])
    assert spec.rollout.vllm_server_host == ["10.1.2.3", "10.1.2.4"] and spec.rollout.vllm_server_port == [8001, 8002]
    assert [n.host for n in spec.rollout_nodes()] == ["10.1.2.3", "10.1.2.4"]
    assert spec.rollout.sleep_level == 1  # kept; the rules say ms-swift ignores it in server mode
    files = render(spec, "j").files
    assert "--port 8002\n" in files["rollout_1.sh"] and "rollout0" not in "".join(files.values())


def test_secrets_are_named_never_kept():
    spec, findings = import_scripts([("a.sh", "export WANDB_API_KEY=abc123 WANDB_PROJECT=p\n" + HEAD + "--model m")])
    assert spec.secret_env == ["WANDB_API_KEY"] and spec.env == {"WANDB_PROJECT": "p"}
    assert "abc123" not in spec_to_yaml(spec) and "IMPORT-SECRET" in ids(findings)


OLD_SCRIPT = r"""#!/bin/bash
# ms-swift 3.2 era, two GPUs of four for vLLM
export CUDA_VISIBLE_DEVICES=0,1,2,3
WANDB_API_KEY=abc NPROC_PER_NODE=4 \
nohup swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-7B \
    --train_type lora \
    --use_vllm true \
    --vllm_device auto \
    --num_infer_workers 2 \
    --gc_collect_after_offload true \
    --tensor_parallel_size 2 \
    --reward_funcs accuracy format \
    --dataset 'AI-MO/NuminaMath-TIR#1000' \
    --num_generations 8 \
    --system "You are a 'math' tutor" \
    --my_custom_flag 3 > train.log 2>&1 &
"""


def test_a_3_2_script_for_4_6_names_every_renamed_and_removed_flag():
    s, findings = import_scripts([("old.sh", OLD_SCRIPT)], "4.6")
    by_id = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f.message)
    removed = " ".join(by_id["IMPORT-REMOVED-FLAG"])
    for flag in ("--vllm_device", "--num_infer_workers", "--gc_collect_after_offload"):
        assert flag in removed
    renamed = " ".join(by_id["IMPORT-RENAMED-FLAG"])
    assert "--train_type" in renamed and "--tensor_parallel_size" in renamed
    assert s.extra_args == ["--my_custom_flag", "3"]
    assert s.train.system == "You are a 'math' tutor" and s.train.dataset == ["AI-MO/NuminaMath-TIR#1000"]
    assert s.rollout.vllm_tensor_parallel_size == 2 and s.cluster.nodes[0].gpus == [0, 1, 2, 3]


def test_a_flag_the_target_version_does_not_have_yet_is_not_accepted():
    """gc_collect_after_offload arrived in 3.2.1: a 3.2.0 target must not take it."""
    _, findings = import_scripts([("a.sh", HEAD + "--model m --gc_collect_after_offload true")], "3.2.0")
    (f,) = [f for f in findings if "--gc_collect_after_offload" in f.message]
    assert f.id == "IMPORT-REMOVED-FLAG" and "3.2.1" in f.message
    spec, findings = import_scripts([("a.sh", HEAD + "--model m --gc_collect_after_offload true")], "3.5")
    assert spec.extra_args == ["--gc_collect_after_offload", "true"]


SHELL_BITS = ["swift", "rlhf", "rollout", "--model", "m", "$X", "${X:-1}", "${A[@]}", "$((1/0))", "$((X+", "'", '"',
              "\\", "\n", " ", "#", "&", "|", ";", "(", ")", "{", "}", "X=1", "export", "A=(", "<<EOF", "`", "$(",
              "torchrun", "swift/cli/rlhf.py", "--nproc_per_node=", "if", "then", "fi", "f()", "${#X}", "~", "\r"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SHELL_BITS), max_size=40))
@example(["&", "X=1", "(", "X=1"])  # tree-sitter recovers with an assignment that has no name
def test_any_shell_text_imports_or_fails_with_a_clear_error(bits):
    """Whatever the script says: a spec with findings, or a SpecError; never another exception."""
    try:
        import_scripts([("fuzz.sh", "swift rlhf --model m " + " ".join(bits))])
    except SpecError:
        pass
