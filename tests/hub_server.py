"""A model hub on 127.0.0.1 for the tests: files served at Hugging Face's and ModelScope's URL layouts, with their
answers for gated and missing repos, and every request recorded (path and the token it carried).

The layouts are the ones the real clients request (tests/test_hub.py checks that huggingface_hub's hf_hub_download
and modelscope's model_file_download, pointed at this server by HF_ENDPOINT / MODELSCOPE_ENDPOINT, fetch the same
files from it):
- Hugging Face: HEAD and GET ``/{repo}/resolve/{revision}/{file}`` (ETag, X-Repo-Commit), 401 with X-Error-Code
  GatedRepo for a gated repo without the token, 404 RepoNotFound / EntryNotFound;
- ModelScope: ``/api/v1/models/{repo}/revisions`` (its branches, in ModelScope's JSON envelope) and
  ``/api/v1/models/{repo}/repo?Revision=…&FilePath=…`` (the file); 401 for a gated repo without the token, 404 for
  a missing one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    """``repos``: repo id → {file name: bytes}; ``gated``: repo ids that need ``token``."""

    def __init__(self, repos: dict[str, dict[str, bytes]], gated: tuple[str, ...] = (), token: str = "secret-token"):
        self.repos, self.gated, self.token = repos, set(gated), token
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, token sent)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub.answer(self, body=False)

            def do_GET(self):
                hub.answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def _token(self, handler) -> str | None:
        auth = handler.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth.removeprefix("Bearer ")
        cookie = handler.headers.get("Cookie", "")
        for part in cookie.split(";"):
            name, _, value = part.strip().partition("=")
            if name == "m_session_id":
                return value
        return None

    def answer(self, handler, body: bool) -> None:
        split = urlsplit(handler.path)
        path, query = unquote(split.path), parse_qs(split.query)
        token = self._token(handler)
        self.requests.append((handler.command, handler.path, token))
        if path.startswith("/api/v1/models/"):
            self._modelscope(handler, path.removeprefix("/api/v1/models/"), query, token, body)
        else:
            self._hugging_face(handler, path.lstrip("/"), token, body)

    def _allowed(self, repo: str, token: str | None) -> bool:
        return repo not in self.gated or token == self.token

    @staticmethod
    def _send(handler, status: int, data: bytes, headers: dict | None = None, body: bool = True,
              content_type: str = "application/json") -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            handler.send_header(k, v)
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def _hugging_face(self, handler, path: str, token: str | None, body: bool) -> None:
        parts = path.split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return self._send(handler, 404, b'{"error": "Not Found"}', body=body)
        repo, name = "/".join(parts[:2]), "/".join(parts[4:])
        if repo not in self.repos:
            return self._send(handler, 404, b'{"error": "Repository Not Found"}', {"X-Error-Code": "RepoNotFound"},
                              body)
        if not self._allowed(repo, token):
            message = f"Access to model {repo} is restricted. You must have access to it and be authenticated."
            return self._send(handler, 401, json.dumps({"error": message}).encode(),
                              {"X-Error-Code": "GatedRepo", "X-Error-Message": message}, body)
        data = self.repos[repo].get(name)
        if data is None:
            return self._send(handler, 404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"}, body)
        etag = '"' + hashlib.sha1(data).hexdigest() + '"'
        self._send(handler, 200, data, {"ETag": etag, "X-Repo-Commit": COMMIT}, body, "application/octet-stream")

    def _modelscope(self, handler, path: str, query: dict, token: str | None, body: bool) -> None:
        parts = path.split("/")
        repo, rest = "/".join(parts[:2]), parts[2:]
        if repo not in self.repos:
            return self._send(handler, 404, json.dumps({"Code": 10010205001, "Message": f"model {repo} not found",
                                                        "Success": False}).encode(), body=body)
        if not self._allowed(repo, token):
            return self._send(handler, 401, json.dumps({"Code": 10010205003, "Message": "unauthorized",
                                                        "Success": False}).encode(), body=body)
        files = self.repos[repo]

        def ok(data) -> None:
            self._send(handler, 200, json.dumps({"Code": 200, "Data": data, "Message": "success",
                                                 "Success": True}).encode(), body=body)

        if rest == ["revisions"]:
            return ok({"RevisionMap": {"Branches": [{"Revision": "master", "CommitId": COMMIT}], "Tags": []}})
        if rest == ["repo"]:
            name = query.get("FilePath", [""])[0]
            if name not in files:
                return self._send(handler, 404, json.dumps({"Code": 10010205001, "Message": "file not found",
                                                            "Success": False}).encode(), body=body)
            return self._send(handler, 200, files[name], body=body, content_type="application/octet-stream")
        self._send(handler, 404, b'{"Success": false}', body=body)
