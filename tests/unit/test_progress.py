"""The progress line a long staging step prints: written so far, share of the total, rate."""

from llmhost.operations.progress import GB, progress_line


def test_a_progress_line_says_how_far_and_how_fast() -> None:
    line = progress_line("staging kimi", 137 * GB, 547 * GB, 1370.0)
    assert line == "staging kimi: 137.00 GB of ~547.0 GB (25%) written after 1370s (100 MB/s)"


def test_without_a_known_total_it_says_what_was_written() -> None:
    assert progress_line("syncing venv", GB // 2, None, 10.0) == (
        "syncing venv: 0.50 GB written after 10s (50 MB/s)"
    )
