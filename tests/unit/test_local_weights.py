"""Weights already on the box (group_data `existing_weights`): the config's checks, the manifest
command, the guest's checker, the facts' commands and the `staged` operation against a fake
host (local, hub, already staged, a real directory in the way, the way back)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import FunctionCommand

from llmhost.catalog import load_catalog
from llmhost.config.guest import GuestConfig
from llmhost.config.loading import ConfigError, validate
from llmhost.facts.files import DirSizes, FileSizes, FileText, MatchingFiles, PathKind
from llmhost.guest import script, weights_check
from llmhost.operations import models
from llmhost.operations.models import LocalSource, StageTools, local_marker, stage_marker
from llmhost.tasks import model_stage
from llmhost.tasks.model_stage import models_to_stage
from llmhost.tasks.vllm_service import unit_inputs
from llmhost.weights import manifest_sha256
from tests.helpers import REPO

CHECKER = script("weights_check.py")
CATALOG = load_catalog(("testbed",))
KIMI = CATALOG["kimi-k2.5-int4"]
SHA_A = "a" * 64


def guest(**data: Any) -> GuestConfig:
    """The sandbox guest's data (a CPU guest of the testbed catalog) with `data` added."""
    base = {
        "accelerator": "cpu",
        "host_profile": "sandbox",
        "catalogs": ("testbed",),
        "served_model": "tiny-llama",
        "vllm": {"version": "0.32.0"},
    }
    return validate(GuestConfig, "g1", {**base, **data})


def manifest_file(tmp_path: Path, name: str = "m.json", **fields: Any) -> str:
    data = {
        "model": None,
        "repo": None,
        "revision": None,
        "files": {"model.safetensors": {"size": 4, "sha256": None}},
        **fields,
    }
    path = tmp_path / name
    path.write_text(json.dumps(data) if "raw" not in fields else fields["raw"])
    return str(path)


# --- the config ----------------------------------------------------------------------------


def test_a_local_source_is_accepted_and_read_relative_to_where_pyinfra_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest_file(tmp_path, files={"a/b.bin": {"size": 0}, "c.json": {"size": 2, "sha256": SHA_A}})
    monkeypatch.chdir(tmp_path)
    cfg = guest(existing_weights={"tiny-llama": {"path": "/srv/w/tiny", "manifest": "m.json"}})
    local = cfg.existing_weights["tiny-llama"]
    assert (local.path, local.manifest, local.verify_hashes) == ("/srv/w/tiny", "m.json", False)
    assert json.loads(local.manifest_text())["files"]["c.json"]["sha256"] == SHA_A
    assert guest().existing_weights == {}


def kimi_rev() -> str:
    return str(KIMI.revision)


REFUSED: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    # (case, manifest fields (None: no file), the existing_weights entry, the message)
    ("not a catalog model", {}, {"model": "kimi-k3"}, "'kimi-k3': not a model of the catalog"),
    (
        "a relative path",
        {},
        {"path": "srv/w"},
        "existing_weights.tiny-llama.path: must be an absolute",
    ),
    ("no manifest file", {"missing": True}, {}, "existing_weights: tiny-llama.manifest: "),
    ("manifest not JSON", {"raw": "{nope"}, {}, "not JSON"),
    ("no file listed", {"files": {}}, {}, "files: lists no file"),
    ("a size not an int", {"files": {"x": {"size": "4"}}}, {}, "files.x.size: an integer >= 0"),
    ("a negative size", {"files": {"x": {"size": -1}}}, {}, "files.x.size: an integer >= 0"),
    ("a bool size", {"files": {"x": {"size": True}}}, {}, "files.x.size: an integer >= 0"),
    ("a short sha256", {"files": {"x": {"size": 1, "sha256": "ab"}}}, {}, "files.x.sha256: 64"),
    ("a path out of the dir", {"files": {"../x": {"size": 1}}}, {}, "'../x' is not a relative"),
    ("an absolute path", {"files": {"/x": {"size": 1}}}, {}, "'/x' is not a relative path"),
    ("a key unknown", {"files": {"x": {"size": 1, "md5": "0"}}}, {}, "files.x: an object"),
    ("a top key unknown", {"sizes": 1}, {}, "unknown key 'sizes'"),
    ("a revision not a commit", {"revision": "main"}, {}, "'main' is not a 40-hex commit"),
    (
        "another commit than the pin",
        {"revision": "b" * 40},
        {"model": "kimi-k2.5-int4"},
        f"records revision {'b' * 40}, the model is pinned to ",
    ),
    (
        "another repository",
        {"repo": "someone/Kimi-K2.5"},
        {"model": "kimi-k2.5-int4"},
        "is of someone/Kimi-K2.5, the model is moonshotai/Kimi-K2.5",
    ),
    ("another model", {"model": "tiny-llama-draft"}, {}, "is for 'tiny-llama-draft'"),
    ("a bad verify_hashes", {}, {"verify_hashes": "sometimes"}, "verify_hashes"),
]


@pytest.mark.parametrize(
    ("fields", "entry", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_a_bad_local_source_is_refused_naming_host_and_field(
    tmp_path: Path, fields: dict[str, Any], entry: dict[str, Any], message: str
) -> None:
    path = str(tmp_path / "absent.json") if fields.pop("missing", False) else None
    model = entry.pop("model", "tiny-llama")
    local = {"path": "/srv/w", "manifest": path or manifest_file(tmp_path, **fields), **entry}
    with pytest.raises(ConfigError) as exc:
        guest(existing_weights={model: local})
    text = str(exc.value)
    assert "invalid group_data for host 'g1'" in text and "existing_weights" in text, text
    assert message in text, text


def test_a_hub_manifest_must_record_the_pin_the_site_applies(tmp_path: Path) -> None:
    # kimi-k2.5-eagle3-mla pins no commit in the catalog; model_revisions does.
    pin, other = "c" * 40, "d" * 40
    entry = {"path": "/srv/w/mla", "manifest": manifest_file(tmp_path, revision=pin)}
    cfg = guest(
        model_revisions={"kimi-k2.5-eagle3-mla": pin},
        existing_weights={"kimi-k2.5-eagle3-mla": entry},
    )
    assert cfg.existing_weights["kimi-k2.5-eagle3-mla"].path == "/srv/w/mla"
    with pytest.raises(
        ConfigError, match=f"records revision {pin}, the model is pinned to {other}"
    ):
        guest(
            model_revisions={"kimi-k2.5-eagle3-mla": other},
            existing_weights={"kimi-k2.5-eagle3-mla": entry},
        )
    # No pin anywhere and none recorded: nothing to compare (the served model's pin is
    # checked elsewhere); the catalog's own pin, recorded: accepted.
    guest(existing_weights={"kimi-k2.5-eagle3-mla": {**entry, "manifest": manifest_file(tmp_path)}})
    kimi = manifest_file(tmp_path, "k.json", revision=kimi_rev(), repo="moonshotai/Kimi-K2.5")
    guest(existing_weights={"kimi-k2.5-int4": {"path": "/srv/w/kimi", "manifest": kimi}})


def test_two_models_of_one_weights_set_name_one_source(tmp_path: Path) -> None:
    m = manifest_file(tmp_path)
    same = {"path": "/srv/w/kimi", "manifest": m}
    guest(existing_weights={"kimi-k2.5-int4": same, "kimi-k2.5-int4-eagle3": same})
    with pytest.raises(ConfigError, match="shares its weights with 'kimi-k2.5-int4'"):
        guest(
            existing_weights={
                "kimi-k2.5-int4": same,
                "kimi-k2.5-int4-eagle3": {**same, "path": "/srv/other"},
            }
        )


def test_weights_on_the_box_take_no_room_in_models_dir(tmp_path: Path) -> None:
    local = {"tiny-llama": {"path": "/srv/w/tiny", "manifest": manifest_file(tmp_path)}}
    [staged] = models_to_stage(guest(existing_weights=local))
    [plain] = models_to_stage(guest())
    assert (staged.weights_id, staged.disk_gb) == ("tiny-llama", 0)
    assert plain.disk_gb == CATALOG["tiny-llama"].disk_gb


# --- the manifest command and the guest's checker ------------------------------------------


def weights_dir(tmp_path: Path) -> Path:
    d = tmp_path / "weights"
    (d / "sub").mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"x" * 100)
    (d / "config.json").write_text("{}")
    (d / "sub" / "tok.json").write_text("[1]")
    (d / ".cache" / "huggingface").mkdir(parents=True)  # hf's bookkeeping: left out
    (d / ".cache" / "huggingface" / "x.lock").write_text("")
    return d


def test_the_manifest_command_lists_every_file_with_its_size_and_hashes_when_asked(
    tmp_path: Path,
) -> None:
    d = weights_dir(tmp_path)
    argv = [sys.executable, "-m", "llmhost.weights", "manifest", str(d), "--model", "tiny-llama"]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {
        "model": "tiny-llama",
        "repo": None,
        "revision": None,
        "files": {
            "config.json": {"size": 2, "sha256": None},
            "model.safetensors": {"size": 100, "sha256": None},
            "sub/tok.json": {"size": 3, "sha256": None},
        },
    }
    rev = "e" * 40
    hashed = subprocess.run(
        [*argv, "--hashes", "--revision", rev, "--repo", "org/name"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(hashed)
    assert data["revision"] == rev and data["repo"] == "org/name"
    assert data["files"]["model.safetensors"]["sha256"] == hashlib.sha256(b"x" * 100).hexdigest()
    # The guest's own maker writes the same files (no model, repo or revision).
    guest_made = subprocess.run(
        [sys.executable, str(CHECKER), "--make", str(d)], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(guest_made)["files"] == json.loads(out)["files"]
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = subprocess.run(
        [sys.executable, "-m", "llmhost.weights", "manifest", str(empty)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "lists no file" in bad.stderr


def run_checker(d: Path, manifest: dict | str, *flags: str) -> subprocess.CompletedProcess:
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    return subprocess.run(
        [sys.executable, str(CHECKER), str(d), *flags], input=text, capture_output=True, text=True
    )


def good_manifest(d: Path) -> dict:
    data = json.loads(
        subprocess.run(
            [sys.executable, str(CHECKER), "--make", str(d), "--hashes"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    return data


CHECKS: list[tuple[str, str, tuple[str, ...], int, list[str]]] = [
    # (case, what is done to the directory, flags, exit status, what stderr names)
    ("good", "", (), 0, ["3 file(s), 105 bytes match"]),
    ("good, hashed", "", ("--hashes",), 0, ["3 hashed"]),
    ("missing file", "rm sub/tok.json", (), 1, ["sub/tok.json: missing (3 bytes expected)"]),
    (
        "wrong size",
        "truncate model.safetensors",
        (),
        1,
        ["model.safetensors: size 100 expected, 7 found"],
    ),
    ("wrong hash, sizes only", "flip config.json", (), 0, ["match"]),
    (
        "wrong hash, hashed",
        "flip config.json",
        ("--hashes",),
        1,
        ["config.json: sha256 ", " expected, "],
    ),
    ("extra file", "add extra.bin", (), 0, ["1 file(s) not in the manifest"]),
    ("not a directory", "rmdir", (), 1, ["is not a directory"]),
]


@pytest.mark.parametrize(
    ("change", "flags", "rc", "said"), [c[1:] for c in CHECKS], ids=[c[0] for c in CHECKS]
)
def test_the_checker_judges_a_directory_against_its_manifest(
    tmp_path: Path, change: str, flags: tuple[str, ...], rc: int, said: list[str]
) -> None:
    d = weights_dir(tmp_path)
    manifest = good_manifest(d)
    if change.startswith("rm "):
        (d / change[3:]).unlink()
    elif change.startswith("truncate "):
        (d / change[9:]).write_bytes(b"x" * 7)
    elif change.startswith("flip "):
        (d / change[5:]).write_text("[]")  # the same size, other bytes
    elif change.startswith("add "):
        (d / change[4:]).write_text("new")
    elif change == "rmdir":
        d = tmp_path / "nowhere"
    run = run_checker(d, manifest, *flags)
    assert run.returncode == rc, run.stderr
    for words in said:
        assert words in run.stderr, run.stderr
    verdict = json.loads(run.stdout)  # one JSON verdict on stdout, whatever the outcome
    assert verdict["ok"] is (rc == 0)
    if change.startswith("add "):
        assert verdict["extra"] == ["extra.bin"]
    if change.startswith("truncate "):
        problem = {"file": "model.safetensors", "problem": "size", "expected": 100, "found": 7}
        assert verdict["problems"] == [problem]


def test_the_checker_refuses_what_is_not_a_manifest(tmp_path: Path) -> None:
    d = weights_dir(tmp_path)
    assert run_checker(d, "{nope").returncode == 2
    bad = run_checker(d, {"files": {}})
    assert bad.returncode == 2 and "lists no file" in bad.stderr


def test_what_the_service_user_cannot_read_fails_the_check_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deploy runs the checker as the service user; here (root, maybe) access is faked.
    d = weights_dir(tmp_path)
    manifest = good_manifest(d)
    (d / "model.safetensors").chmod(0o600)
    (d / "sub").chmod(0o700)
    denied = {str(d / "model.safetensors"), str(d / "sub")}
    real = os.access
    monkeypatch.setattr(
        weights_check.os, "access", lambda p, m: str(p) not in denied and real(p, m)
    )
    verdict = weights_check.check(str(d), manifest)
    assert not verdict["ok"]
    said = [weights_check.describe(p) for p in verdict["problems"]]
    user = weights_check._user()
    assert said == [  # the files are this user's own here
        f"model.safetensors: not readable by {user} (model.safetensors: mode 0600, owner {user})",
        f"sub/tok.json: not readable by {user} (sub: mode 0700, owner {user})",
    ]


def test_a_file_of_mode_0000_fails_the_checker() -> None:
    """As the deploy runs it: as an unprivileged user (root reads any file, so under root,
    which CI is, the checker runs as `nobody` through runuser, as the deploy runs it as the
    service user)."""
    base = Path(tempfile.mkdtemp(prefix="llmhost-weights-"))
    try:
        base.chmod(0o755)
        d = weights_dir(base)
        for path in [d, *d.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        manifest = good_manifest(d)
        (d / "config.json").chmod(0)
        # The guest's own python3 runs it there (stdlib only); root's venv is not nobody's.
        as_user = ["runuser", "-u", "nobody", "--", "/usr/bin/python3"]
        argv = as_user if os.geteuid() == 0 else [sys.executable]
        run = subprocess.run(
            [*argv, str(CHECKER), str(d)],
            input=json.dumps(manifest),
            capture_output=True,
            text=True,
            cwd="/",
        )
        assert run.returncode == 1, run.stdout + run.stderr
        assert "config.json: not readable by " in run.stderr, run.stderr
        assert "model.safetensors" not in run.stderr  # the others are readable
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_facts_read_sizes_through_links_and_what_is_at_a_path(tmp_path: Path) -> None:
    d = weights_dir(tmp_path)
    (d / "linked.bin").symlink_to(d / "model.safetensors")  # a hub cache snapshot's kind
    sizes = FileSizes()
    out = subprocess.run(sizes.command(str(d)), shell=True, capture_output=True, text=True)
    sizes_of_d = {"config.json": 2, "linked.bin": 100, "model.safetensors": 100, "sub/tok.json": 3}
    assert sizes.process(out.stdout.splitlines()) == DirSizes(sizes_of_d)
    # A symlink loop (or a directory find may not list): a line of the answer, not a failure.
    (d / "sub" / "up").symlink_to(d)
    looped = subprocess.run(sizes.command(str(d)), shell=True, capture_output=True, text=True)
    assert looped.returncode == 0, looped.stderr
    answer = sizes.process(looped.stdout.splitlines())
    assert answer is not None and answer.sizes == sizes_of_d
    assert len(answer.errors) == 1 and "sub/up" in answer.errors[0], answer
    none = subprocess.run(
        sizes.command(str(tmp_path / "no")), shell=True, capture_output=True, text=True
    )
    assert sizes.process(none.stdout.splitlines()) is None
    (tmp_path / "link").symlink_to(d)
    kind = PathKind()
    for path, wanted in [
        (tmp_path / "link", ("link", str(d))),
        (d, ("dir", "")),
        (d / "config.json", ("file", "")),
        (tmp_path / "no", ("absent", "")),
    ]:
        out = subprocess.run(kind.command(str(path)), shell=True, capture_output=True, text=True)
        assert kind.process(out.stdout.splitlines()) == wanted


# --- the staged operation ------------------------------------------------------------------

MODELS = "/srv/llmhost/models"
SITE_DIR = "/srv/local-weights/tiny-llama"
OUT = f"{MODELS}/tiny-llama"
SIDE_MARKER = f"{MODELS}/.tiny-llama.llmhost-staged.json"
MANIFEST_COPY = f"{MODELS}/.tiny-llama.llmhost-manifest.json"
TOOLS = StageTools(
    python="/opt/llmhost/venvs/v/bin/python",
    builder="/opt/llmhost/bin/tinymodels.py",
    hf_cli="/opt/llmhost/venvs/v/bin/hf",
    importer="/opt/llmhost/bin/gguf_import.py",
    index_url="http://pypi.example/simple",
    uv="/opt/llmhost/tools/bin/uv",
    checker="/opt/llmhost/bin/weights_check.py",
    user="vllm",
)
MANIFEST = json.dumps(
    {
        "model": "tiny-llama",
        "repo": None,
        "revision": None,
        "files": {"w.bin": {"size": 10, "sha256": None}},
    }
)
LOCAL = LocalSource(
    model="tiny-llama", path=SITE_DIR, manifest_text=MANIFEST, manifest_name="m.json"
)
TINY = CATALOG["tiny-llama"]


class FakeHost:
    """The guest as facts see it: what is at each path, file texts, a directory's sizes."""

    def __init__(
        self,
        kind: tuple[str, str],
        texts: dict[str, str],
        sizes: dict[str, int] | None,
        out: str = OUT,
        errors: tuple[str, ...] = (),
    ) -> None:
        self.kind, self.texts, self.out = kind, texts, out
        self.sizes = None if sizes is None else DirSizes(sizes, errors)
        self.noops: list[str] = []

    def get_fact(self, fact: type, path: str) -> Any:
        if fact is PathKind:
            assert path == self.out
            return self.kind
        if fact is FileText:
            return self.texts.get(path)
        assert fact is FileSizes and path == SITE_DIR
        return self.sizes

    def noop(self, message: str) -> None:
        self.noops.append(message)


def run_staged(
    monkeypatch: pytest.MonkeyPatch,
    kind: tuple[str, str],
    texts: dict[str, str] | None = None,
    sizes: dict[str, int] | None = None,
    local: LocalSource | None = LOCAL,
    errors: tuple[str, ...] = (),
) -> tuple[list[str], FakeHost]:
    fake = FakeHost(kind, texts or {}, sizes, errors=errors)
    monkeypatch.setattr(models, "host", fake)
    commands = [
        str(c.args[0]) if isinstance(c, FunctionCommand) else c
        for c in models.staged._inner(profile=TINY, models_dir=MODELS, tools=TOOLS, local=local)
    ]
    return commands, fake


LINKED = {SIDE_MARKER: local_marker(LOCAL) + "\n"}
# As the service user: a file vLLM could not read fails the check.
CHECK = f"cd / && runuser -u vllm -- {TOOLS.python} {TOOLS.checker} {SITE_DIR} < {MANIFEST_COPY}"
LINK = f"ln -sfn {SITE_DIR} {OUT}.llmhost-new && mv -T {OUT}.llmhost-new {OUT}"
MARK = f"printf '%s\\n' '{local_marker(LOCAL)}' > {SIDE_MARKER}"
BUILD = f"{TOOLS.python} {TOOLS.builder} --kind tiny-llama --out {OUT}"

OPERATION: list[tuple[str, dict[str, Any], list[str]]] = [
    # (case, the guest, the commands; "refuse: ..." a refusal that fails the host)
    ("local, fresh", {"kind": ("absent", ""), "sizes": {"w.bin": 10}}, [CHECK, LINK, MARK]),
    (
        "local, linked and checked",
        {"kind": ("link", SITE_DIR), "texts": LINKED, "sizes": {"w.bin": 10, "extra": 1}},
        [],
    ),
    (
        "local, linked elsewhere",
        {"kind": ("link", "/srv/old"), "texts": LINKED, "sizes": {"w.bin": 10}},
        [CHECK, LINK, MARK],
    ),
    (
        "local, another manifest",
        {
            "kind": ("link", SITE_DIR),
            "texts": {SIDE_MARKER: '{"local": "x"}'},
            "sizes": {"w.bin": 10},
        },
        [CHECK, LINK, MARK],
    ),
    (
        "local, a file cut short",
        {"kind": ("link", SITE_DIR), "texts": LINKED, "sizes": {"w.bin": 3}},
        [
            "refuse: existing_weights of tiny-llama: /srv/local-weights/tiny-llama does not match "
            "m.json (1 problem(s)): w.bin: size 10 expected, 3 found; no unit was touched"
        ],
    ),
    (
        "local, a file missing",
        {"kind": ("absent", ""), "sizes": {}},
        [
            "refuse: existing_weights of tiny-llama: /srv/local-weights/tiny-llama does not match "
            "m.json (1 problem(s)): w.bin: missing (10 bytes expected)"
        ],
    ),
    (
        "local, a directory find may not read",
        {
            "kind": ("link", SITE_DIR),
            "texts": LINKED,
            "sizes": {},
            "errors": ("find: './sub': Permission denied",),
        },
        [
            "refuse: existing_weights of tiny-llama: /srv/local-weights/tiny-llama does not match "
            "m.json (1 problem(s)): w.bin: missing (10 bytes expected); reading it: "
            "find: './sub': Permission denied; no unit was touched"
        ],
    ),
    (
        "local, no directory",
        {"kind": ("absent", ""), "sizes": None},
        [f"refuse: existing_weights of tiny-llama: {SITE_DIR} is not a directory"],
    ),
    (
        "local, a real directory in the way",
        {"kind": ("dir", ""), "sizes": {"w.bin": 10}},
        [
            f"refuse: existing_weights of tiny-llama: {OUT} is a dir, not a link llmhost made, and "
            "llmhost does not delete weights: move it away"
        ],
    ),
    (
        "built, fresh",
        {"kind": ("absent", ""), "local": None},
        [
            BUILD,
            f"chmod -R a+rX {OUT}",
            f"printf '%s\\n' '{stage_marker(TINY)}' > {OUT}/llmhost-staged.json",
        ],
    ),
    (
        "built, already staged",
        {
            "kind": ("dir", ""),
            "local": None,
            "texts": {f"{OUT}/llmhost-staged.json": stage_marker(TINY) + "\n"},
        },
        [],
    ),
    (
        "built, llmhost's link there",
        # The marker seen through the link (a copy of a staged directory) does not count.
        {
            "kind": ("link", SITE_DIR),
            "local": None,
            "texts": {**LINKED, f"{OUT}/llmhost-staged.json": stage_marker(TINY)},
        },
        [
            f"rm -f {OUT} {SIDE_MARKER} {MANIFEST_COPY}",
            BUILD,
            f"chmod -R a+rX {OUT}",
            f"printf '%s\\n' '{stage_marker(TINY)}' > {OUT}/llmhost-staged.json",
        ],
    ),
    (
        "built, someone else's link",
        {
            "kind": ("link", "/data/t"),
            "local": None,
            "texts": {f"{OUT}/llmhost-staged.json": stage_marker(TINY)},
        },
        [],
    ),
]


@pytest.mark.parametrize(
    ("guest_state", "wanted"), [c[1:] for c in OPERATION], ids=[c[0] for c in OPERATION]
)
def test_the_staged_operation_checks_links_or_stages(
    monkeypatch: pytest.MonkeyPatch, guest_state: dict[str, Any], wanted: list[str]
) -> None:
    commands, fake = run_staged(monkeypatch, **guest_state)
    assert len(commands) == len(wanted), commands
    for got, want in zip(commands, wanted, strict=True):
        if want.startswith("refuse: "):
            assert got.startswith(want), got
        else:
            assert got == want
    assert bool(fake.noops) is (wanted == [])


def test_a_hub_model_on_the_box_is_linked_and_leaves_for_a_download(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = f"{MODELS}/{KIMI.weights_id}"
    side = f"{MODELS}/.{KIMI.weights_id}.llmhost-staged.json"
    fake = FakeHost(("link", SITE_DIR), {side: local_marker(LOCAL)}, {"w.bin": 10}, out)
    monkeypatch.setattr(models, "host", fake)
    back = [
        str(c.args[0]) if isinstance(c, FunctionCommand) else c
        for c in models.staged._inner(profile=KIMI, models_dir=MODELS, tools=TOOLS)
    ]
    assert back[0] == f"rm -f {out} {side} {MODELS}/.{KIMI.weights_id}.llmhost-manifest.json"
    assert back[1].startswith(
        f"HF_HUB_OFFLINE=0 HF_HUB_ENABLE_HF_TRANSFER=0 {TOOLS.hf_cli} download"
    )
    assert f"--revision {KIMI.revision} --local-dir {out}" in back[1]


def test_the_marker_follows_the_path_the_manifest_and_the_hash_setting() -> None:
    marker = json.loads(local_marker(LOCAL))
    assert marker == {
        "local": SITE_DIR,
        "manifest_sha256": manifest_sha256(MANIFEST),
        "hashes": False,
    }
    hashed = LocalSource(**{**LOCAL.__dict__, "hashes": True})
    assert local_marker(hashed) != local_marker(LOCAL)
    assert "--hashes" in models.local_commands(hashed, MODELS, "tiny-llama", TOOLS)[0]


def test_a_marker_beside_the_link_is_what_says_the_weights_are_newer_than_the_unit(
    tmp_path: Path,
) -> None:
    local = {"tiny-llama": {"path": "/srv/w/tiny", "manifest": manifest_file(tmp_path)}}
    linked = unit_inputs(guest(existing_weights=local), "tiny-llama")
    plain = guest()
    assert f"{plain.models_dir}/.tiny-llama.llmhost-staged.json" in linked
    assert f"{plain.models_dir}/tiny-llama/llmhost-staged.json" not in linked
    assert f"{plain.models_dir}/tiny-llama/llmhost-staged.json" in unit_inputs(plain, "tiny-llama")


class PruneHost:
    """models_dir as prune_weights sees it: directories, markers beside links, path kinds."""

    def __init__(self, models_dir: str, kinds: dict[str, str]) -> None:
        self.models_dir, self.kinds = models_dir, kinds

    def get_fact(self, fact: type, **kwargs: Any) -> Any:
        if fact is MatchingFiles:
            assert kwargs == {"directory": self.models_dir, "pattern": ".*.llmhost-staged.json"}
            return [f"{self.models_dir}/.{name}.llmhost-staged.json" for name in self.kinds]
        if fact is PathKind:
            return (self.kinds[kwargs["path"].rsplit("/", 1)[-1]], "")
        return [n for n, k in self.kinds.items() if k == "dir"]  # ChildDirectories


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def shell(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)

    def directory(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)


def test_prune_removes_llmhost_links_no_kept_model_uses_never_a_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = guest()
    m = cfg.models_dir
    # old-kimi: llmhost's link, unused; tiny-llama: kept; built: a real directory with a
    # stray marker beside it (its own directory pruning is weights_to_prune's).
    fake = PruneHost(m, {"old-kimi": "link", "tiny-llama": "link", "built": "dir"})
    rec = Recorder()
    monkeypatch.setattr(model_stage, "host", fake)
    monkeypatch.setattr(model_stage, "server", rec)
    monkeypatch.setattr(model_stage, "files", rec)
    model_stage.prune_weights._inner(cfg, ["tiny-llama"])
    links = [c for c in rec.calls if "commands" in c]
    assert [c["commands"] for c in links] == [
        [
            f"rm -f {m}/old-kimi {m}/.old-kimi.llmhost-staged.json "
            f"{m}/.old-kimi.llmhost-manifest.json"
        ]
    ]
    assert [c["path"] for c in rec.calls if "path" in c] == [f"{m}/built"]
