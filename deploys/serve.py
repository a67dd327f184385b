"""Guests: uv-managed vLLM, the model's weights, its systemd unit, then proof that it serves.

pyinfra inventory/sandbox.py deploys/serve.py
pyinfra inventory/lab.py deploys/serve.py --data served_model=minimax-m2.5
"""

from pyinfra import host

from llmhost import config
from llmhost.tasks.guest_base import guest_base
from llmhost.tasks.hooks import hooks
from llmhost.tasks.model_stage import model_stage
from llmhost.tasks.uv_vllm import uv_vllm
from llmhost.tasks.vllm_service import retire_stale_units, vllm_service

cfg = config.load_guest(host)  # bad data stops here, before any operation

guest_base(cfg)
venv, shim = uv_vllm(cfg)
weights = model_stage(cfg)
retire_stale_units(cfg)
vllm_service(cfg, upstream_changes=[venv, shim, *weights])
hooks(cfg)
