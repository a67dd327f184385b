"""The local test bed, not the product: the sandbox guest, the Proxmox stand-in and their
command shims. Nothing outside `testbed` (and the tests, inventories and benchmarks that
drive it) imports it; product code never knows whether it runs against a stand-in.

Driven by `llmhost sandbox up|down|status|reboot` and `llmhost standin up|down|reset`.
"""
