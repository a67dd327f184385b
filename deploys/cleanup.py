"""Free the GPUs from leftover vLLM workers, on any guest, and verify memory is back.

    pyinfra inventory/lab.py deploys/cleanup.py
    pyinfra inventory/lab.py deploys/cleanup.py --data cleanup_force=true   # kill any holder

Processes of running llmhost units are left to systemd; holders outside the service user
and vLLM are reported, not killed, unless cleanup_force is set.
"""

from pyinfra import host, logger
from pyinfra.operations import python, server

from llmhost.config.loading import load_guest
from llmhost.render import gpu_free_command
from llmhost.tasks.uv_vllm import install_gpu_free

cfg = load_guest(host)

install_gpu_free(cfg)
cleanup = server.shell(
    name="free the GPUs (SIGTERM, SIGKILL, verify memory.used)",
    commands=[" ".join(gpu_free_command(cfg, force=cfg.cleanup_force))],
)


def report() -> None:
    for line in cleanup.stdout_lines:
        logger.info(f"{host.print_prefix}{line}")


python.call(name="cleanup report", function=report)
