"""The language tests use the integration tests' sandbox fixtures."""

from tests.integration.conftest import default_model_back, sandbox  # noqa: F401 - fixtures
