"""Free the GPUs from leftover vLLM workers, on any guest, and verify memory is back.

    pyinfra inventory/lab.py deploys/cleanup.py
    pyinfra inventory/lab.py deploys/cleanup.py --data cleanup_force=true   # kill any holder

Processes of running llmhost units are left to systemd; holders outside the service user
and vLLM are reported, not killed, unless cleanup_force is set. Only serving guests hold
GPUs for vLLM: other hosts of the site are left alone, one line each.
"""

from pyinfra import host, logger
from pyinfra.operations import python, server

from llmhost import interrupt
from llmhost.config.loading import load_guest
from llmhost.connection import no_delay
from llmhost.groups import is_serving_guest, leave_alone
from llmhost.render import gpu_free_command
from llmhost.tasks.uv_vllm import install_gpu_free

interrupt.install()
no_delay(host)  # ~6 ms a guest command instead of ~49 (llmhost/connection.py)

if is_serving_guest(host):
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
else:
    leave_alone(host, "cleanup.py", "serving guest")
