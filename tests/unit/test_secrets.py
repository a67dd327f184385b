"""Secrets are read on the control machine from where group_data says, or refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.config.loading import ConfigError
from llmhost.render import render_env
from llmhost.secrets import resolve_secrets
from tests.helpers import lab_guest

KEY = "k3y-" + "x" * 28


def test_the_api_key_comes_from_the_environment_variable_group_data_names() -> None:
    secrets = resolve_secrets(lab_guest(), environ={"LLMHOST_API_KEY": KEY})
    assert secrets.api_key.get_secret_value() == KEY
    assert KEY not in repr(secrets) and KEY not in str(secrets.api_key)
    assert secrets.auth_headers() == {"Authorization": f"Bearer {KEY}"}


def test_a_key_file_and_a_hub_token_go_only_into_the_env_file(tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    cfg = lab_guest(secrets={"api_key": {"file": str(key_file)}, "hf_token": {"env": "HUB_TOKEN"}})
    secrets = resolve_secrets(cfg, environ={"HUB_TOKEN": "hf_" + "y" * 30})
    env = render_env(cfg, cfg.served_model, secrets)
    assert f"VLLM_API_KEY={KEY}\n" in env and "HF_TOKEN=hf_" + "y" * 30 + "\n" in env
    assert KEY not in render_env(cfg, cfg.served_model)  # no secrets given, none written


@pytest.mark.parametrize(
    ("secrets", "environ", "fragment"),
    [
        ({}, {}, "secrets.api_key: environment variable LLMHOST_API_KEY is not set"),
        ({"api_key": {"file": "/nonexistent/key"}}, {}, "cannot read file /nonexistent/key"),
        ({}, {"LLMHOST_API_KEY": "short"}, "8-512 printable characters"),
        ({}, {"LLMHOST_API_KEY": "two words here"}, "without spaces or newlines"),
    ],
)
def test_a_secret_that_cannot_be_had_is_refused_naming_host_and_field(
    secrets: dict, environ: dict, fragment: str
) -> None:
    cfg = lab_guest(secrets=secrets) if secrets else lab_guest()
    with pytest.raises(ConfigError) as err:
        resolve_secrets(cfg, environ=environ)
    message = str(err.value)
    assert message.startswith(f"invalid group_data for host '{cfg.host_name}':")
    assert fragment in message
    for value in environ.values():
        assert value not in message
