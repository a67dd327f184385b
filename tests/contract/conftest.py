"""pyinfra_cli first: its gevent patch must come before anything imports ssl (requests)."""

import pyinfra_cli  # noqa: F401
