"""The progress line a long staging step prints: written so far, share of the total, rate."""

from llmhost.operations.progress import GB, progress_line


def test_a_progress_line_says_how_far_and_how_fast() -> None:
    line = progress_line("staging kimi", 137 * GB, 547 * GB, 1370.0)
    assert line == "staging kimi: 137.00 GB of ~547.0 GB (25%) written after 1370s (100 MB/s)"


def test_without_a_known_total_it_says_what_was_written() -> None:
    assert progress_line("syncing venv", GB // 2, None, 10.0) == (
        "syncing venv: 0.50 GB written after 10s (50 MB/s)"
    )


def test_progress_lines_come_while_the_command_runs(caplog) -> None:  # noqa: ANN001
    """The reporter runs in its own greenlet, where pyinfra's host is not set by itself."""
    import logging
    from types import SimpleNamespace

    import gevent
    from pyinfra.context import ctx_host

    from llmhost.operations.progress import run_with_progress

    class Output(SimpleNamespace):
        stdout_lines: list[str]
        stderr_lines: list[str]

    class FakeHost:
        print_prefix = "[guest] "
        written = 0

        def run_shell_command(self, command: object) -> tuple[bool, Output]:
            if str(command).startswith("du "):
                self.written += 250_000_000
                return True, Output(stdout_lines=[str(self.written)], stderr_lines=[])
            gevent.sleep(0.35)  # the long command
            return True, Output(stdout_lines=[], stderr_lines=[])

    caplog.set_level(logging.INFO, logger="pyinfra")
    with ctx_host.use(FakeHost()):
        run_with_progress("staging w", "hf download ...", ["/srv/w"], 10 * GB, every_s=0.1)
    lines = [r.getMessage() for r in caplog.records]
    assert any("staging w: 0.25 GB of ~10.0 GB (2%) written after" in line for line in lines)
    assert lines[-1].startswith("[guest] staging w: done in")


def test_the_long_step_is_one_command_of_its_operation_and_a_failure_fails_its_host(
    caplog,  # noqa: ANN001
) -> None:
    """Yielded as a FunctionCommand (nothing runs in the generator): it runs the command when
    pyinfra executes it, returns True, and on a failing command returns False (this host
    fails, the run goes on) with the command's last lines in the message."""
    import logging
    from types import SimpleNamespace

    from pyinfra.api import FunctionCommand
    from pyinfra.context import ctx_host

    from llmhost.operations.progress import progress_step

    class FakeHost:
        print_prefix = "[guest] "
        executing_op_hash = None  # the failure names "an operation"

        def __init__(self, ok: bool) -> None:
            self.ok, self.ran = ok, []

        def run_shell_command(self, command: object) -> tuple[bool, SimpleNamespace]:
            self.ran.append(str(command))
            lines = [] if self.ok else ["error: no space left on device"]
            return self.ok, SimpleNamespace(stdout_lines=[], stderr_lines=lines)

        def log_styled(self, message: str, **_: object) -> None:
            logging.getLogger("pyinfra").error(message)

    caplog.set_level(logging.INFO, logger="pyinfra")
    step = progress_step("syncing venv", "uv pip sync lock.txt", ["/opt/venv"], every_s=60)
    assert isinstance(step, FunctionCommand) and "syncing_venv" in repr(step)
    for ok in (True, False):
        guest = FakeHost(ok)
        with ctx_host.use(guest):
            assert step.function(None, guest) is ok
        assert "uv pip sync lock.txt" in guest.ran
    assert "no space left on device" in caplog.text
