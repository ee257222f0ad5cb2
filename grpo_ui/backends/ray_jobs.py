"""The Ray Jobs REST API, as the Ray dashboard serves it (Ray 2.x: ``/api/jobs/``, ``/api/version``) and the State
API's node and placement group lists (``/api/v0/nodes``, ``/api/v0/placement_groups``): submit a job (with a package
for its runtime environment), read its status and driver log, stop it, list the cluster's nodes and the placement
groups a job waits for.
Plain HTTP from the app: the app needs no Ray of its own (Ray's JobSubmissionClient wraps these same endpoints and
would bring Ray's server dependencies into the app). The API has no authentication (SECURITY.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from grpo_ui.core.errors import UserError

# Ray's JobStatus values → grpo-ui's job states
STATES = {"PENDING": "queued", "RUNNING": "running", "SUCCEEDED": "succeeded", "FAILED": "failed",
          "STOPPED": "stopped"}
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


class JobsApiError(UserError):
    """The Jobs API did not answer, or refused: the message names the address and what it said."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status, when it answered


@dataclass(frozen=True)
class RayNode:
    """One node as the cluster knows it."""

    node_id: str
    ip: str
    alive: bool
    head: bool
    resources: dict[str, float]


class JobsApi:
    """One Ray cluster's Jobs API at ``address`` (http://HEAD:PORT)."""

    def __init__(self, address: str, timeout: float = 20.0):
        self.address, self.timeout = address.rstrip("/"), timeout

    def _call(self, method: str, path: str, body: dict | None = None, data: bytes | None = None) -> dict | list:
        if body is not None:
            data = json.dumps(body).encode()
        req = urllib.request.Request(self.address + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if body is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            said = e.read().decode(errors="replace").strip()[-1000:]
            raise JobsApiError(f"Ray Jobs API at {self.address}: {method} {path} answered {e.code}: {said}",
                               e.code) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            why = getattr(e, "reason", None) or e
            raise JobsApiError(f"Ray Jobs API at {self.address} does not answer: {why}") from None

    def version(self) -> str:
        """The cluster's Ray version."""
        return self._call("GET", "/api/version")["ray_version"]

    def submit(self, submission_id: str, entrypoint: str, runtime_env: dict, metadata: dict[str, str],
               resources: dict[str, float]) -> None:
        """Submit ``entrypoint`` (a shell command run on the node that ``resources`` leads to) under our own id, with
        ``runtime_env`` (its env_vars, and Ray packages) for the job's every process; the dashboard shows all of it:
        no secrets."""
        self._call("POST", "/api/jobs/", {"entrypoint": entrypoint, "submission_id": submission_id,
                                          "runtime_env": runtime_env, "metadata": metadata,
                                          "entrypoint_resources": resources})

    def upload_package(self, name: str, data: bytes) -> str:
        """Keep a zip in the cluster's GCS as a Ray package, as Ray's CLI does for py_modules (``name``:
        _ray_pkg_<hash>.zip); returns its URI for a runtime environment."""
        self._call("PUT", f"/api/packages/gcs/{name}", data=data)
        return f"gcs://{name}"

    def status(self, submission_id: str) -> dict | None:
        """The job's details (status, message, start/end times in ms, driver exit code, …); None when the cluster
        does not know it."""
        try:
            return self._call("GET", f"/api/jobs/{submission_id}")
        except JobsApiError as e:
            if e.status == 404:
                return None
            raise

    def logs(self, submission_id: str) -> str:
        """The driver's whole log (what the entrypoint printed)."""
        return self._call("GET", f"/api/jobs/{submission_id}/logs").get("logs", "")

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job (SIGTERM to the entrypoint, then SIGKILL); False when it had already ended."""
        try:
            return bool(self._call("POST", f"/api/jobs/{submission_id}/stop").get("stopped"))
        except JobsApiError as e:
            if e.status == 404:
                return False
            raise

    def waiting_groups(self, job_id: str) -> list[dict]:
        """The job's placement groups Ray has not placed yet (the State API's, each with its bundles); ``job_id`` is
        Ray's hex id of the job (its details' job_id), not the submission id."""
        rows = self._call("GET", "/api/v0/placement_groups?limit=10000&detail=true")["data"]["result"]["result"]
        return [r for r in rows if r.get("creator_job_id") == job_id and r.get("state") == "PENDING"]

    def nodes(self) -> list[RayNode]:
        """The cluster's nodes (the State API's list)."""
        rows = self._call("GET", "/api/v0/nodes?limit=10000")["data"]["result"]["result"]
        return [RayNode(r["node_id"], r["node_ip"], r["state"] == "ALIVE", r["is_head_node"], r["resources_total"])
                for r in rows]
