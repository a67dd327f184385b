"""The embedded default: the local Debian 12 LXC guest that `make sandbox-up` creates."""

from llmhost.testbed.sandbox import load_state

_state = load_state()

sandbox = [
    (
        _state.ip,
        {
            "ssh_user": _state.ssh_user,
            "ssh_key": _state.ssh_key,
            "ssh_strict_host_key_checking": "no",
            "ssh_known_hosts_file": "/dev/null",
            # Package sources the sandbox serves on its bridge (no NAT: the only way out).
            "package_sources": {
                "index_url": _state.pypi_index,
                "find_links": _state.find_links,
                "apt_proxy": _state.apt_proxy,
            },
        },
    )
]
