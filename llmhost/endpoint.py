"""Where a served model answers: its URL, the name it answers to, and the site's API key.

Why one value: the correctness probe, the load sweep, a switch's rollback target and the
readiness operation each carried their own copy of these three fields and built the key's
header themselves. The key stays out of repr (pyinfra prints operation arguments) and out of
comparisons. One `requests.Session` per endpoint: readiness polls every half second during a
switch and the correctness probe sends its prompts one after another, each on the connection
the last one left open. A connection the server closed (a restart, its keep-alive timeout) is
seen as dropped before reuse and replaced, so a session outlives a switch. The side traffic
of the probe under traffic keeps its own connections (a thread of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import requests
from pydantic import SecretStr

from llmhost.proofs.readiness import Readiness, auth_headers, probe_once, wait_ready


@dataclass(frozen=True)
class Endpoint:
    """One served model as the control machine reaches it."""

    base_url: str  # http://<guest>:<port>
    served_name: str  # the model name the server answers to (/v1/models, "model")
    api_key: SecretStr | None = field(default=None, repr=False, compare=False)
    # Connections kept open between the calls to this server (the module docstring says why).
    http: requests.Session = field(
        default_factory=requests.Session, repr=False, compare=False, hash=False
    )

    def headers(self) -> dict[str, str]:
        """The bearer header for /v1/* (none without a key)."""
        return auth_headers(self.api_key)

    def probe(self, timeout: float = 10, answer_within: float = 60) -> Readiness:
        """One look: /health, /v1/models, a one-token completion."""
        return probe_once(
            self.base_url,
            self.served_name,
            timeout,
            headers=self.headers(),
            answer_within=answer_within,
            http=self.http,
        )

    def wait_ready(
        self,
        timeout_s: float,
        log: Callable[[str], None] = print,
        interval_s: float = 2.0,
        crash_check: Callable[[], str | None] | None = None,
    ) -> Readiness:
        """Poll until it serves, `timeout_s` passes, or `crash_check` gives a reason to stop."""
        return wait_ready(
            self.base_url,
            self.served_name,
            timeout_s,
            log=log,
            interval_s=interval_s,
            crash_check=crash_check,
            headers=self.headers(),
            http=self.http,
        )
