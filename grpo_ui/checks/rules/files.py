"""The files a job names (grpo_ui.spec.files), as each node will open them: a relative path needs a working
directory to be found in, because every node's script cd's into the job's run directory otherwise."""

from __future__ import annotations

from grpo_ui.checks.rules.base import rule
from grpo_ui.core.findings import finding
from grpo_ui.spec.fields import ENGINES
from grpo_ui.spec.files import job_files, node_workdir


@rule(engines=ENGINES)
def relative_files(spec, eff):
    relative = [f for f in job_files(spec) if f.relative]
    runs_swift = [i for i, n in enumerate(spec.cluster.nodes) if n.role == "trainer" or eff.server]
    homeless = [spec.cluster.nodes[i].host for i in runs_swift if not node_workdir(spec, i)]
    if relative and homeless:
        named = ", ".join(f"{f.value} ({f.field.split('.', 1)[1]})" for f in relative)
        yield finding("PATH-RELATIVE-NO-WORKDIR", "error", ("cluster.workdir", *dict.fromkeys(f.field for f in relative)),
                      f"{named}: relative, but no working directory is set for {', '.join(dict.fromkeys(homeless))}. "
                      "Each node's script cd's into the job's run directory, which holds only its scripts, so swift "
                      "would not find them there.",
                      "Set cluster.workdir to the directory the script was run from, where these paths start (for "
                      "ms-swift's example scripts: the ms-swift checkout on the nodes), or make the paths absolute; "
                      "preflight then checks each file on each node.")
