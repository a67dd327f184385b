"""Guests: uv-managed vLLM, the model's weights, its systemd unit, then proof that it serves.

pyinfra inventory/sandbox.py deploys/serve.py
pyinfra inventory/lab.py deploys/serve.py --data served_model=minimax-m2.5
"""

from pyinfra import host

from llmhost.config.loading import load_guest
from llmhost.tasks.gpu_userspace import gpu_userspace, preflight
from llmhost.tasks.guest_base import guest_base
from llmhost.tasks.hooks import hooks
from llmhost.tasks.model_stage import model_stage
from llmhost.tasks.uv_vllm import uv_vllm
from llmhost.tasks.vllm_service import retire_stale_units, vllm_service

cfg = load_guest(host)  # bad data stops here, before any operation
if cfg.accelerator == "cuda":
    preflight(cfg)  # a host driver other than the pin stops here too

guest_base(cfg)
if cfg.accelerator == "cuda":
    gpu_userspace(cfg)
venv, shim = uv_vllm(cfg)
weights = model_stage(cfg)
retire_stale_units(cfg)
restarts = vllm_service(cfg, upstream_changes=[venv, shim, *weights])
hooks(cfg, restarts)
