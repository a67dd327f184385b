"""vllm-router's control API as the roll uses it: who is in rotation, take one out, put it back.

Why checks after each call: `/remove_worker` answers 200 even for a URL it does not know (it
only logs "not found"), and `/add_worker` answers 400 "already exists" for a registered worker;
`/list_workers` is the truth, so every change is confirmed there. `/add_worker` blocks while the
router polls the worker's /health (every --worker-startup-check-interval), so its timeout is
the caller's, not a constant. (vllm-router 0.1.17; shared/context/vllm-router.md.)
"""

from __future__ import annotations

from dataclasses import dataclass

import requests


class RouterError(Exception):
    """The router did not do what was asked, or did not answer; the message says which."""


def same_url(url: str) -> str:
    """A worker URL as the router lists it: no trailing slash."""
    return url.rstrip("/")


@dataclass(frozen=True)
class RouterControl:
    """One router's control endpoint (http://<router>:<port>)."""

    base_url: str
    timeout_s: float = 10.0

    def workers(self) -> set[str]:
        """The worker URLs in rotation now (`GET /list_workers`)."""
        try:
            resp = requests.get(f"{self.base_url}/list_workers", timeout=self.timeout_s)
            resp.raise_for_status()
            urls = resp.json()["urls"]
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            raise RouterError(f"router {self.base_url}: /list_workers failed: {exc}") from None
        return {same_url(u) for u in urls}

    def remove(self, url: str) -> None:
        """Out of rotation at once (requests already sent keep their connection); confirmed."""
        self._post("remove_worker", url, self.timeout_s)
        if same_url(url) in self.workers():
            raise RouterError(f"router {self.base_url}: {url} is still listed after removal")

    def add(self, url: str, timeout_s: float) -> None:
        """Back in rotation once the router has seen its /health; confirmed. A worker that is
        already listed stays so (the router answers 400 "already exists")."""
        self._post("add_worker", url, timeout_s, already_ok=True)
        if same_url(url) not in self.workers():
            raise RouterError(f"router {self.base_url}: {url} is not listed after adding it")

    def _post(self, action: str, url: str, timeout_s: float, already_ok: bool = False) -> None:
        try:
            resp = requests.post(
                f"{self.base_url}/{action}", params={"url": same_url(url)}, timeout=timeout_s
            )
        except requests.RequestException as exc:
            raise RouterError(f"router {self.base_url}: /{action} {url} failed: {exc}") from None
        if resp.ok or (already_ok and resp.status_code == 400 and "already" in resp.text):
            return
        raise RouterError(
            f"router {self.base_url}: /{action} {url} answered {resp.status_code}: "
            f"{resp.text.strip()[:200]}"
        )
