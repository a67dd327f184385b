"""Site-wide defaults for every serving guest; groups and --data override them."""

# Pins: one venv per vLLM version under /opt/llmhost/venvs.
vllm = {"version": "0.16.0", "cuda_variant": "cu129", "python": "3.12", "uv_version": "0.13.9"}
port = 8000
service_user = "vllm"
root_dir = "/opt/llmhost"
models_dir = "/srv/llmhost/models"
