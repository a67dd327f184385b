"""Fixtures for the tests that run the real deploys against the sandbox guest (make sandbox-up).

Each module sets up the guest state it needs through these fixtures, so it passes when run
alone on a fresh sandbox and in any order; a module that switches the served model puts the
default back when it ends. Helpers (pyinfra, guest_sh, ...) live in tests/helpers.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmhost.config.guest import GuestConfig
from llmhost.testbed import standin
from llmhost.testbed.sandbox import SandboxState, load_state
from tests.helpers import SITE, pyinfra, sandbox_guest, serve_default


@pytest.fixture(scope="session")
def sandbox() -> SandboxState:
    return load_state()  # raises with "run make sandbox-up first" when there is none


@pytest.fixture(scope="module")
def served(sandbox: SandboxState) -> GuestConfig:
    """The guest serves its default model (tiny-llama, inventory/sandbox.py) from its unit and
    has no other llmhost unit: checked (an ssh and a probe), deployed only when it does not.

    Module-scoped so that each module checks again: an earlier one may have switched models.
    """
    serve_default(sandbox)
    return sandbox_guest(sandbox)


@pytest.fixture(scope="module")
def default_model_back(sandbox: SandboxState) -> Iterator[None]:
    """For a module that switches the served model: the default is served again after it,
    whether its own tests got that far or not."""
    yield
    serve_default(sandbox)


@pytest.fixture(scope="module")
def site(served: GuestConfig) -> GuestConfig:
    """The stand-in is up and the whole sandbox site is converged by this checkout's
    deploys/site.py (the guest's config is returned)."""
    standin.up()
    run = pyinfra(*SITE)
    assert run.rc == 0, run.tail()
    return served
