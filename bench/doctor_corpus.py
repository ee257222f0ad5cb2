"""The doctor on what users paste: every excerpt of tests/data/doctor_corpus/ (real log lines from public issues of
ms-swift, TRL, open-r1, verl, vLLM, DeepSpeed and OpenRLHF, sources in its manifest.yaml) read by the `doctor`
command's own path (logfiles.snapshot → diagnose).

Strict score: a failing excerpt counts as diagnosed when a finding of its kind (KIND_FINDINGS) is raised and the first
line of that finding's evidence contains the manifest's evidence substring (the line a good diagnosis points to) and,
where the manifest names a rank, the finding names that rank. A healthy excerpt counts when no error or warning is
raised.

The scores are printed apart: the corpus the rules were written on, then each fresh round (``fresh: round N``),
collected after the rules of its time were frozen, scored unseen once, then looked at and fixed against — round 3
together with round 5 — so all are now part of what the rules were fitted to. The corpus README keeps each round's
unseen score, the out-of-sample figures; the next fresh round is the next one.

Run: PYTHONPATH=. python bench/doctor_corpus.py
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from grpo_ui.doctor.diagnose import diagnose
from grpo_ui.doctor.logfiles import snapshot
from grpo_ui.doctor.snapshot import Alert

CORPUS = Path(__file__).resolve().parent.parent / "tests/data/doctor_corpus"

# The findings that diagnose each kind of the corpus (the corpus's vocabulary → the doctor's finding ids).
KIND_FINDINGS = {
    "training-oom": {"OOM"},
    "vllm-memory": {"OOM", "KV-CACHE-TOO-SMALL", "VLLM-MEMORY-PROFILE"},
    "nan": {"NAN-METRICS"},
    "metrics-nan": {"NAN-METRICS"},
    "metrics-kl-zero": {"KL-STUCK-ZERO", "GRAD-NORM-ZERO"},
    "metrics-reward-std-zero": {"NO-LEARNING-SIGNAL"},
    "metrics-truncated": {"COMPLETIONS-CLIPPED"},
    "checkpoint-save": {"CHECKPOINT-INCOMPLETE"},
    "rootcause-rank": {"NODE-FAILED"},
    "nccl-timeout": {"NCCL-TIMEOUT"},
    "nccl-error": {"NCCL-ERROR", "GPU-DUPLICATE"},
    "version-mismatch": {"VERSION-MISMATCH", "PACKAGE-MISSING"},
    "reward-error": {"REWARD-FUNC-FAILED", "REWARD-NONE"},
    "vllm-sleep-wake": {"VLLM-SLEEP-STUCK", "VLLM-SLEEP-CRASH", "NATIVE-CRASH"},
    "weight-sync": {"WEIGHT-SYNC-STALL", "WEIGHT-SYNC-FAILED"},
    "max-model-len": {"MAX-MODEL-LEN"},
    "vllm-engine-died": {"VLLM-ENGINE-DEAD"},
    "deepspeed-error": {"DEEPSPEED-ERROR"},
    "distributed-error": {"DIST-INIT"},
    "swift-args": {"ARGS-INVALID"},
    "cuda-error": {"CUDA-ERROR"},
    "rollout-unreachable": {"ROLLOUT-UNREACHABLE"},
    "padding-side": {"RIGHT-PADDING"},
    "host-oom": {"HOST-OOM"},
    "worker-died": {"NODE-FAILED"},  # a process's death is reported as the node (process) that failed first
}
RANK_NAMED = re.compile(r"\brank (\d+)\b")


@dataclass
class Result:
    entry: dict
    alerts: list[Alert]
    state: str
    hit: Alert | None   # the finding that diagnoses a failing excerpt
    ok: bool

    @property
    def healthy(self) -> bool:
        return self.entry["kind"] == "healthy"


def load(corpus: Path = CORPUS) -> list[dict]:
    return yaml.safe_load((corpus / "manifest.yaml").read_text())


def first_evidence_line(a: Alert) -> str:
    return next((line for line in a.evidence.splitlines() if line.strip()), "")


def diagnoses(a: Alert, entry: dict) -> bool:
    """Whether this finding is the diagnosis the manifest asks for."""
    if a.id not in KIND_FINDINGS[entry["kind"]] or entry["evidence"] not in first_evidence_line(a):
        return False
    return "rank" not in entry or str(entry["rank"]) in RANK_NAMED.findall(a.where + " " + a.title)


def judge(entry: dict, corpus: Path = CORPUS) -> Result:
    snap = snapshot([corpus / entry["file"]], quiet_for=0.0)
    alerts = diagnose(snap)
    if entry["kind"] == "healthy":
        return Result(entry, alerts, snap.job_state, None, not any(a.severity in ("error", "warning") for a in alerts))
    hit = next((a for a in alerts if diagnoses(a, entry)), None)
    return Result(entry, alerts, snap.job_state, hit, hit is not None)


def evaluate(corpus: Path = CORPUS) -> list[Result]:
    return [judge(e, corpus) for e in load(corpus)]


def score(results: list[Result]) -> tuple[int, int, int, int]:
    """(failing excerpts diagnosed, failing excerpts, healthy logs with an error or warning, healthy logs)."""
    failing = [r for r in results if not r.healthy]
    healthy = [r for r in results if r.healthy]
    return sum(r.ok for r in failing), len(failing), sum(not r.ok for r in healthy), len(healthy)


def table(results: list[Result]) -> str:
    """One row per excerpt: file, kind, verdict, the state said, what was raised."""
    rows = []
    for r in results:
        verdict = "ok" if r.ok else ("FALSE ALARM" if r.healthy else "MISS")
        raised = ", ".join(a.id for a in r.alerts) or "no findings"
        rows.append(f"{r.entry['file']:40s} {r.entry['kind']:24s} {verdict:11s} {r.state:9s} {raised}")
    return "\n".join(rows)


def report(results: list[Result], label: str) -> str:
    hit, failing, alarms, healthy = score(results)
    share = f"{hit / failing:.0%}" if failing else "n/a"
    return (f"{label}: {hit}/{failing} failing excerpts diagnosed ({share}), {alarms}/{healthy} healthy logs with an "
            "error or warning")


ROUNDS = {None: "corpus", "round 1": "fresh round 1 (looked at and fixed against)",
          "round 2": "fresh round 2 (looked at and fixed against)",
          "round 3": "fresh round 3 (6/9 unseen, then looked at and fixed against with round 5)",
          "round 4": "fresh round 4 (5/15 unseen, then looked at and fixed against)",
          "round 5": "fresh round 5 (17/20 unseen, then looked at and fixed against)"}


def rounds(results: list[Result]) -> dict[str | None, list[Result]]:
    """The results by round: None (the corpus), then each fresh round by its name."""
    return {key: [r for r in results if r.entry.get("fresh") == key] for key in ROUNDS}


def main() -> None:
    results = evaluate()
    print(table(results))
    print()
    for r in results:
        if not r.ok:
            raised = "; ".join(f"{a.id}: {first_evidence_line(a)[:100]}" for a in r.alerts) or "no findings"
            print(f"miss {r.entry['file']} ({r.entry['kind']}): want {r.entry.get('evidence', 'nothing raised')!r}"
                  f"\n     got {raised}")
    states = sum(r.state == r.entry["state"] for r in results)
    print(f"\nstate as the manifest says: {states}/{len(results)}")
    for key, found in rounds(results).items():
        print(report(found, ROUNDS[key]))


if __name__ == "__main__":
    main()
