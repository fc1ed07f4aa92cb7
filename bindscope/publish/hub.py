"""``bindscope release --push``: upload a release folder to a Hugging Face Hub dataset repository.

Uses ``huggingface_hub`` (https://huggingface.co/docs/huggingface_hub): :meth:`HfApi.whoami` first (is the Hub
reachable, is the token valid?), then :meth:`HfApi.create_repo` (``repo_type="dataset"``, ``exist_ok=True``,
the ``private`` flag) and :meth:`HfApi.upload_folder` (one commit with the given message; large folders are
committed in several parts by huggingface_hub). Local-only files (``.bindscope-*`` and the ownership marker
``.bindscope.json``) are not uploaded.

The endpoint is ``HF_ENDPOINT`` (default https://huggingface.co) and the token ``HF_TOKEN`` or the one saved
by ``hf auth login``, as everywhere in huggingface_hub.
"""

from __future__ import annotations

import os
from pathlib import Path

from bindscope.errors import BadInput

LOCAL_ONLY = [".bindscope-*", ".bindscope.json"]


class HubError(RuntimeError):
    """The Hub could not be reached or refused the upload. The message says what happened and that nothing
    (or what) was uploaded."""


def connect(repo_id: str, token: str | None = None, endpoint: str | None = None):
    """Check ``repo_id`` and reach the Hub with the token (``whoami``); return ``(HfApi, user name)``.

    Call this before any long work that precedes an upload: it fails fast and changes nothing.

    Raises:
        BadInput: ``repo_id`` is malformed or has no namespace.
        HubError: offline mode, no network, no token, or a rejected token.
    """
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalTokenNotFoundError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise BadInput(f"repo_id {repo_id!r} is not a Hub repository id ({exc}); use NAMESPACE/NAME",
                       param="repo_id") from None
    if "/" not in repo_id:
        raise BadInput(f"repo_id {repo_id!r}: give the namespace too, e.g. your-user/{repo_id}", param="repo_id")
    api = HfApi(endpoint=endpoint, token=token)
    where = api.endpoint
    if constants.HF_HUB_OFFLINE:
        raise HubError("HF_HUB_OFFLINE is set: huggingface_hub is in offline mode; unset it to push. "
                       "Nothing was uploaded.")
    unreachable = f"cannot reach the Hugging Face Hub at {where}"
    try:
        user = api.whoami()
    except LocalTokenNotFoundError:
        raise HubError("no Hugging Face token: run `hf auth login` or set HF_TOKEN. Nothing was uploaded.") from None
    except HfHubHTTPError as exc:
        raise HubError(f"the Hub at {where} rejected the token ({exc}). Nothing was uploaded.") from None
    except (OSError, ConnectionError) as exc:
        raise HubError(f"{unreachable} ({type(exc).__name__}: {exc}). Nothing was uploaded.") from None
    except Exception as exc:  # httpx transport errors (ConnectError, timeouts) do not derive from OSError
        if any(word in type(exc).__name__.lower() for word in ("connect", "timeout", "network", "transport")):
            raise HubError(f"{unreachable} ({type(exc).__name__}: {exc}). Nothing was uploaded.") from None
        raise
    return api, str(user.get("name", "?"))


def push_release(folder: str | os.PathLike, repo_id: str, private: bool = False,
                 commit_message: str | None = None, token: str | None = None, endpoint: str | None = None,
                 progress: bool = True) -> str:
    """Upload the release ``folder`` to the dataset repository ``repo_id``; return the commit URL.

    Args:
        folder: a release folder made by :func:`bindscope.publish.release.make_release`.
        repo_id: ``"user/name"`` or ``"org/name"``.
        private: create the repository private (an existing repository keeps its visibility).
        commit_message: the commit title (default ``"Upload bindscope release"``).
        token: a Hub token (default: ``HF_TOKEN`` or the saved login).
        endpoint: the Hub URL (default: ``HF_ENDPOINT`` or https://huggingface.co).
        progress: show ``huggingface_hub``'s upload progress bars.

    Raises:
        BadInput: ``folder`` is not a release; ``repo_id`` is malformed.
        HubError: see :func:`connect` (raised before the repository is created or anything is uploaded);
            the Hub refused to create the repository or the commit.
    """
    from huggingface_hub.errors import HfHubHTTPError

    from bindscope.publish.release import progress_bars, read_card_header

    folder = Path(folder)
    read_card_header(folder)  # DatasetError (a BadInput) unless it is a release folder with a card
    api, user = connect(repo_id, token, endpoint)
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        with progress_bars(progress):
            info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="dataset",
                                     commit_message=commit_message or "Upload bindscope release",
                                     ignore_patterns=list(LOCAL_ONLY))
    except HfHubHTTPError as exc:
        raise HubError(f"the Hub at {api.endpoint} refused the upload to {repo_id} as {user} ({exc}); "
                       "no commit was made") from None
    return str(info.commit_url)
