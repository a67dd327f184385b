"""Typed group_data, in four modules that import downward only (no cycle):

- `types`: Strict, paths, ports, version patterns (shared with the catalog);
- `guest`: a serving guest's model; `proxmox_host`: a Proxmox host's model;
- `loading`: validate host.data into one of them, or one ConfigError naming host and fields.

This package module imports nothing, so `llmhost.catalog` can use `types` without pulling in
the guest model (which itself needs the catalog).
"""
