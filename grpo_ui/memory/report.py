"""What the memory estimate says: each term, each phase, each GPU role's peak and verdict against its card, and the
estimate's own measured error margin that the verdict carries."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

GIB = 2 ** 30
# The estimate's own error, measured: on 9 in 10 of the calibration set's fit rows (bench/calibration.py) the
# measured peak was at most the estimate plus this share of what the estimate models (everything but vLLM's
# reservation, which vLLM sizes itself to util × capacity). A job fits when its peak plus this margin fits the card;
# within the card without the margin it is tight. bench/memory_accuracy.py prints the figure and how many held-out
# rows it covers; tests/test_memory.py keeps it equal to what the fit rows give.
ESTIMATE_MARGIN = 0.32


class EstimateError(ValueError):
    """The estimate cannot be made; the message names the field and what to do."""


class UnknownModel(EstimateError):
    """The model's architecture is not known: name it from the catalogue or give its config.json."""


@dataclass(frozen=True)
class Term:
    name: str
    gib: float
    formula: str
    reclaimable: bool = False  # held by torch's cache, freed before an OOM: not counted against the capacity


@dataclass
class Phase:
    name: str  # "training" (forward/backward), "optimizer step" or "rollout"
    terms: list[Term]

    @property
    def total(self) -> float:
        """Everything on the GPU, the allocator's reserve included (what nvidia-smi shows)."""
        return sum(t.gib for t in self.terms)

    @property
    def needed(self) -> float:
        """What the phase must have to run (the reserve left out)."""
        return sum(t.gib for t in self.terms if not t.reclaimable)

    @property
    def modelled(self) -> float:
        """What the estimate models of the phase: the reserve and vLLM's self-sized reservation left out."""
        return sum(t.gib for t in self.terms if not t.reclaimable and not t.name.startswith("vLLM"))

    @property
    def with_margin(self) -> float:
        """What the phase needs with the estimate's measured error margin (ESTIMATE_MARGIN) on what it models."""
        return self.needed + ESTIMATE_MARGIN * self.modelled


@dataclass(frozen=True)
class VllmShare:
    """vLLM's share of one GPU as the estimate sizes it, in GiB: whether vLLM fits its share is decided here (the
    rules' field advisory SEED-VLLM-UTIL-LOW and MEMORY-VLLM-START ask it). ``capacity_gib`` None: no GPU model
    chosen. A rollout server's batch is its own (its max_num_seqs): it wants one sequence, so only the start counts."""

    util: float                   # vllm_gpu_memory_utilization
    tp: int                       # vllm_tensor_parallel_size
    capacity_gib: float | None
    weights_gib: float            # its copy of the weights per GPU (÷ TP)
    overhead_gib: float           # profile activations, sampler buffers
    sequence_gib: float           # the KV cache of one full-length sequence
    sequences_wanted: int         # the sequences a rollout generates at once

    @property
    def budget_gib(self) -> float | None:
        """What vLLM may reserve: util × capacity."""
        return None if self.capacity_gib is None else self.util * self.capacity_gib

    @property
    def start_gib(self) -> float:
        """What vLLM needs to start: its weights, one full sequence of KV cache and its overhead."""
        return self.weights_gib + self.sequence_gib + self.overhead_gib

    @property
    def starts(self) -> bool:
        return self.budget_gib is None or self.budget_gib >= self.start_gib

    @property
    def sequences_held(self) -> int | None:
        """The sequences its KV cache holds at once (None without a GPU model)."""
        if self.budget_gib is None:
            return None
        return max(0, int((self.budget_gib - self.weights_gib - self.overhead_gib) / self.sequence_gib))

    @property
    def short(self) -> bool:
        """It cannot start, or its KV cache holds fewer sequences than a rollout generates at once."""
        return not self.starts or (self.sequences_held is not None and self.sequences_held < self.sequences_wanted)

    def util_for_all(self) -> float:
        """The utilisation whose share holds every sequence a rollout wants (needs a GPU model)."""
        need = self.weights_gib + self.overhead_gib + self.sequence_gib * self.sequences_wanted
        return need / self.capacity_gib

    def cannot_start(self) -> str | None:
        """Why vLLM cannot start, or None."""
        if self.starts:
            return None
        return (f"vLLM cannot start: its budget ({self.budget_gib:.1f} GiB = util × capacity) is below its weights + "
                f"one sequence of KV ({self.start_gib:.1f} GiB).")


@dataclass
class RoleReport:
    """One GPU role (trainer GPU, or rollout-server GPU in server mode)."""

    role: str
    gpu: str | None
    capacity_gib: float | None
    phases: list[Phase]
    notes: list[str] = field(default_factory=list)
    vllm: VllmShare | None = None  # the vLLM on this GPU (colocated, or a rollout server's), when there is one

    @property
    def peak_gib(self) -> float:
        return max(p.needed for p in self.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda p: p.needed).name

    @property
    def expected_gib(self) -> float:
        """What nvidia-smi is expected to show at the peak, the allocator's reserve included."""
        return max(p.total for p in self.phases)

    @property
    def headroom_gib(self) -> float | None:
        return None if self.capacity_gib is None else self.capacity_gib - self.peak_gib

    @property
    def margin_peak_gib(self) -> float:
        """The peak with the estimate's measured error margin (Phase.with_margin)."""
        return max(p.with_margin for p in self.phases)

    @property
    def verdict(self) -> str:
        """fits (with the estimate's error margin), tight (within the card, not with the margin), oom, or unknown
        without a GPU model."""
        if self.capacity_gib is None:
            return "unknown"
        if self.margin_peak_gib <= self.capacity_gib:
            return "fits"
        return "tight" if self.peak_gib <= self.capacity_gib else "oom"


@dataclass
class MemoryReport:
    model: str
    params_b: float
    roles: list[RoleReport]
    host_ram_gib: dict[str, float]
    assumptions: list[str]

    @property
    def trainer(self) -> RoleReport:
        return self.roles[0]

    @property
    def verdict(self) -> str:
        order = ["oom", "unknown", "tight", "fits"]
        return min((r.verdict for r in self.roles), key=order.index)

    def to_dict(self) -> dict:
        return {"model": self.model, "params_b": round(self.params_b, 3), "verdict": self.verdict,
                "roles": [{"role": r.role, "gpu": r.gpu, "capacity_gib": r.capacity_gib,
                           "peak_gib": round(r.peak_gib, 2),
                           "margin_peak_gib": round(r.margin_peak_gib, 2), "expected_gib": round(r.expected_gib, 2),
                           "peak_phase": r.peak_phase, "verdict": r.verdict,
                           "headroom_gib": None if r.headroom_gib is None else round(r.headroom_gib, 2),
                           "notes": r.notes,
                           "phases": [{"name": p.name, "total_gib": round(p.total, 2),
                                       "terms": [dict(asdict(t), gib=round(t.gib, 3)) for t in p.terms]}
                                      for p in r.phases]} for r in self.roles],
                "host_ram_gib": {k: round(v, 1) for k, v in self.host_ram_gib.items()},
                "assumptions": self.assumptions}


def format_report(report: MemoryReport) -> str:
    lines = [f"{report.model} ({report.params_b:.2f} B params) — verdict: {report.verdict.upper()}"]
    for r in report.roles:
        cap = f"{r.capacity_gib:.1f} GiB {r.gpu or ''}".rstrip() if r.capacity_gib else "no GPU model chosen"
        margin = (f" (with the estimate's +{ESTIMATE_MARGIN:.0%} error margin {r.margin_peak_gib:.1f} GiB)"
                  if r.verdict == "tight" else "")
        lines.append(f"\n[{r.role} GPU: {cap}] peak {r.peak_gib:.1f} GiB in {r.peak_phase} → {r.verdict}{margin}"
                     + (f", headroom {r.headroom_gib:+.1f} GiB" if r.headroom_gib is not None else "")
                     + (f"; nvidia-smi will show about {r.expected_gib:.1f} GiB" if r.capacity_gib else ""))
        for p in r.phases:
            lines.append(f"  {p.name} phase: {p.total:.1f} GiB")
            lines += [f"    {t.name:<36} {t.gib:8.2f}  {t.formula}" for t in p.terms if t.gib]
        lines += [f"  note: {n}" for n in r.notes]
    lines.append("\nhost RAM per trainer node: " + ", ".join(f"{v:.0f} GiB" for v in report.host_ram_gib.values()))
    lines += [f"assumes {a}" for a in report.assumptions]
    return "\n".join(lines)
