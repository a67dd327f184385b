"""pyinfra operations pyinfra lacks: uv venvs by spec, model staging, readiness, GPU cleanup."""
