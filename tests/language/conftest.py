"""The language tests use the integration tests' sandbox fixture and helpers."""

from tests.integration.conftest import sandbox  # noqa: F401 - a pytest fixture
