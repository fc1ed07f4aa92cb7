"""A local HTTP stand-in for the part of the Hugging Face Hub API that ``HfApi.create_repo`` and
``HfApi.upload_folder`` use, so that ``bindscope release --push`` can be tested without network.

Endpoints (as called by huggingface_hub 2.x): ``GET /api/whoami-v2``, ``POST /api/repos/create``,
``POST /api/validate-yaml`` (checks the card header like the Hub: a YAML mapping, ``configs`` entries with
``config_name`` and ``data_files`` of ``split``/``path``, a known ``size_categories`` value),
``POST /api/datasets/<repo>/preupload/<rev>`` (answers "regular" for every file, so file contents travel
base64-encoded inside the commit instead of through LFS/Xet storage) and ``POST /api/datasets/<repo>/commit/<rev>``
(NDJSON). It records every request, the repositories created and the files of every commit.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

SIZE_CATEGORIES = {"n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M", "10M<n<100M", "100M<n<1B",
                   "1B<n<10B", "10B<n<100B", "100B<n<1T", "n>1T"}


def card_errors(content: str) -> list[str]:
    """What the Hub would reject in a dataset card's YAML header (a subset of its checks)."""
    if not content.startswith("---\n"):
        return ["no YAML header"]
    header = yaml.safe_load(content[4:content.index("\n---\n", 4)])
    if not isinstance(header, dict):
        return ["YAML header is not a mapping"]
    errors = [f"size_categories: {v!r} is not allowed" for v in header.get("size_categories", [])
              if v not in SIZE_CATEGORIES]
    for config in header.get("configs", []):
        if not isinstance(config.get("config_name"), str):
            errors.append("configs: config_name missing")
        for files in config.get("data_files", []):
            if not (isinstance(files, dict) and isinstance(files.get("split"), str) and "path" in files):
                errors.append(f"configs.{config.get('config_name')}: data_files entries need split and path")
    return errors


class HubStandIn:
    def __init__(self):
        self.requests: list[tuple[str, str]] = []
        self.repos: list[dict] = []
        self.commits: list[dict] = []
        self.authorization: list[str] = []
        self.validated_cards: list[str] = []
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_GET(self):
                standin.requests.append(("GET", self.path))
                standin.authorization.append(self.headers.get("Authorization", ""))
                if self.path.startswith("/api/whoami-v2"):
                    return self._reply(200, {"type": "user", "name": "tester", "orgs": [],
                                             "auth": {"type": "access_token", "accessToken": {"role": "write"}}})
                self._reply(404, {"error": f"not in the stand-in: GET {self.path}"})

            def do_POST(self):
                path = self.path.split("?")[0]
                standin.requests.append(("POST", path))
                standin.authorization.append(self.headers.get("Authorization", ""))
                body = self._body()
                if path == "/api/repos/create":
                    payload = json.loads(body)
                    standin.repos.append(payload)
                    repo = f"{payload['organization']}/{payload['name']}"
                    return self._reply(200, {"url": f"{standin.url}/datasets/{repo}", "name": repo})
                if path == "/api/validate-yaml":
                    payload = json.loads(body)
                    standin.validated_cards.append(payload["content"])
                    errors = card_errors(payload["content"]) if payload.get("repoType") == "dataset" else []
                    return self._reply(400 if errors else 200, {"errors": [{"message": e} for e in errors],
                                                                "warnings": []})
                parts = path.split("/")
                if path.startswith("/api/datasets/") and "/preupload/" in path:
                    files = json.loads(body)["files"]
                    return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                        "shouldIgnore": False, "oid": None} for f in files]})
                if path.startswith("/api/datasets/") and "/commit/" in path:
                    lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                    header = next(x["value"] for x in lines if x["key"] == "header")
                    files = {x["value"]["path"]: base64.b64decode(x["value"]["content"])
                             for x in lines if x["key"] == "file"}
                    repo = "/".join(parts[3:5])
                    standin.commits.append({"repo": repo, "revision": parts[-1], "summary": header["summary"],
                                            "files": files, "other": [x for x in lines if x["key"] not in
                                                                      ("header", "file")]})
                    return self._reply(200, {"commitUrl": f"{standin.url}/datasets/{repo}/commit/{'a' * 40}",
                                             "commitOid": "a" * 40, "pullRequestUrl": None})
                self._reply(404, {"error": f"not in the stand-in: POST {path}"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "HubStandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
