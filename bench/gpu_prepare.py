"""What a GPU machine without internet needs to run this project's GPU checks, made on a machine with it.

`scripts/gpu-prepare.sh` calls this. It writes, in ignored folders of the project (they travel with the
working tree to the GPU machine):

- `.whl/`: wheels for the GPU machine's Python (CPython 3.12, x86-64, manylinux) of every package that
  `pip install` of the project (with its `ctranslate2` extra) would add to what that machine already
  has (`ON_GPU_MACHINE`, and everything those need), plus the pure-Python packages those need in turn
  (so their versions fit, whatever older copies the machine holds). Found by pip's own resolver
  (`pip install --dry-run --report`) for that platform; a package published only as source (langid)
  is built here into a wheel first, which must come out pure Python (`py3-none-any`).
- `.gpu-data/multi30k/`: Multi30k as `interlingua data multi30k --from` writes it (checked against
  its published SHA-256 digests), with its corpus.yaml.
- `.gpu-data/manifest.json`: every file of both with its size and SHA-256, each wheel's name and
  version, the platform, and the size of what travels: the project's files (tracked and untracked but
  not ignored) and these two folders. Over `--limit-mib` (64) the preparation fails, naming the sizes.

Run again, it keeps the wheels it already has (by their digests in pip's report), removes wheels no
longer wanted, and rewrites the manifest: the result depends only on the resolution.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]

ON_GPU_MACHINE = ("torch", "triton", "numpy", "scipy", "scikit-learn", "sentencepiece", "sacrebleu", "safetensors",
                  "prometheus-client", "tensorboard", "pyyaml", "tqdm", "matplotlib", "httpx", "h11", "pytest",
                  "hypothesis", "onnxruntime")
"""The packages the GPU machine has installed (with whatever they need): none of them is carried, except
a pure-Python one that a carried package needs (then the carried copy, on PYTHONPATH first, is used)."""

PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
EXTRAS = ("ctranslate2",)
"""Optional dependency groups of the project carried too (`interlingua export ctranslate2`)."""
LIMIT_MIB = 64

WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-(?P<build>\d[^-]*))?-(?P<python>[^-]+)-(?P<abi>[^-]+)"
                        r"-(?P<platform>[^-]+)\.whl$")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_fields(filename: str) -> dict[str, str]:
    """A wheel file name's parts (PEP 427): name (canonical), version, python, abi, platform tags."""
    m = WHEEL_NAME.match(filename)
    if not m:
        raise ValueError(f"not a wheel file name: {filename}")
    return {"name": canonicalize_name(m["name"]), "version": m["version"], "python": m["python"], "abi": m["abi"],
            "platform": m["platform"]}


def is_pure(filename: str) -> bool:
    """Whether a wheel is pure Python (installs on any platform and Python 3)."""
    fields = wheel_fields(filename)
    return fields["abi"] == "none" and fields["platform"] == "any"


def project_requirements(pyproject: Path = REPO / "pyproject.toml", extras: Iterable[str] = EXTRAS) -> list[str]:
    """The project's dependencies and those of `extras`, as pip requirement strings."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


def target_environment() -> dict[str, str]:
    """The marker environment of the GPU machine's Python (PEP 508), for reading requirements."""
    return {"python_version": PYTHON_VERSION, "python_full_version": f"{PYTHON_VERSION}.0", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "platform_python_implementation": "CPython", "implementation_name": "cpython", "extra": ""}


def requirements_of(item: dict[str, Any]) -> set[str]:
    """The canonical names a resolved package (an entry of pip's report) needs on the GPU machine."""
    env = target_environment()
    names = set()
    for text in item["metadata"].get("requires_dist") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            names.add(canonicalize_name(req.name))
    return names


def to_carry(resolved: list[dict[str, Any]], present: Iterable[str] = ON_GPU_MACHINE) -> dict[str, dict[str, Any]]:
    """Of pip's resolution (report entries), what the GPU machine lacks: every package that neither one of
    `present` nor anything they need (within the resolution) is; then, with them, the pure-Python
    packages they need, transitively. By canonical name."""
    by_name = {canonicalize_name(i["metadata"]["name"]): i for i in resolved}
    there: set[str] = set()
    todo = [canonicalize_name(n) for n in present if canonicalize_name(n) in by_name]
    while todo:
        name = todo.pop()
        if name not in there:
            there.add(name)
            todo += [n for n in requirements_of(by_name[name]) if n in by_name]
    carry = {n for n in by_name if n not in there}
    todo = list(carry)
    while todo:
        for n in requirements_of(by_name[todo.pop()]):
            if n in by_name and n not in carry and is_pure(_file_name(by_name[n])):
                carry.add(n)
                todo.append(n)
    return {n: by_name[n] for n in sorted(carry)}


def _file_name(item: dict[str, Any]) -> str:
    return item["download_info"]["url"].rsplit("/", 1)[-1]


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"gpu-prepare: `{' '.join(cmd)}` failed:\n{done.stderr[-3000:]}")


def _platform_args() -> list[str]:
    return ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
            *[a for p in PLATFORMS for a in ("--platform", p)]]


def build_source_only(reqs: list[str], built: Path, wheels: Path) -> None:
    """Wheels, in `built`, of the packages the resolution for this machine's Python takes as source
    (published without wheels); each must be pure Python, so that it installs on the GPU machine too.
    One already in `wheels` (an earlier preparation's) is reused, not built again."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *reqs)
        items = json.loads(report.read_text())["install"]
    for item in items:
        if _file_name(item).endswith(".whl"):
            continue
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        for earlier in wheels.glob("*.whl"):
            if (wheel_fields(earlier.name)["name"], wheel_fields(earlier.name)["version"]) == \
                    (canonicalize_name(name), version) and is_pure(earlier.name):
                shutil.copy2(earlier, built / earlier.name)
        have = [p for p in built.glob("*.whl") if wheel_fields(p.name)["name"] == canonicalize_name(name)
                and wheel_fields(p.name)["version"] == version]
        if not have:
            _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(built), f"{name}=={version}")
            have = [p for p in built.glob("*.whl") if wheel_fields(p.name)["name"] == canonicalize_name(name)]
        if not have or not is_pure(have[0].name):
            raise SystemExit(f"gpu-prepare: {name} {version} has no wheel for the GPU machine, and the one built "
                             f"here is not pure Python: {[p.name for p in have]}")


def resolve_for_gpu_machine(reqs: list[str], built: Path) -> list[dict[str, Any]]:
    """pip's resolution of `reqs` for the GPU machine's Python and platform (report entries), wheels only;
    `built` holds wheels of source-only packages."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), "--target",
             str(Path(tmp) / "target"), "--find-links", str(built), *_platform_args(), *reqs)
        return json.loads(report.read_text())["install"]


def fetch_wheels(carry: dict[str, dict[str, Any]], wheels: Path, built: Path) -> None:
    """Each wheel of `carry` in `wheels`: kept where already there with pip's digest, else downloaded with
    pip (or copied from `built`); wheels no longer wanted are removed."""
    wheels.mkdir(parents=True, exist_ok=True)
    wanted = {_file_name(item): item for item in carry.values()}
    missing = []
    for filename, item in wanted.items():
        path = wheels / filename
        digest = (item["download_info"].get("archive_info", {}).get("hashes") or {}).get("sha256")
        if path.is_file() and (digest is None or sha256(path) == digest):
            continue
        local = built / filename
        if local.is_file():
            shutil.copy2(local, path)
        else:
            missing.append(f"{item['metadata']['name']}=={item['metadata']['version']}")
    if missing:
        _pip("download", "--no-deps", "--quiet", "--dest", str(wheels), "--find-links", str(built),
             *_platform_args(), *missing)
    for path in wheels.glob("*.whl"):
        if path.name not in wanted:
            path.unlink()
    absent = sorted(set(wanted) - {p.name for p in wheels.glob("*.whl")})
    if absent:
        raise SystemExit(f"gpu-prepare: pip did not fetch {', '.join(absent)}")


def fetch_data(data: Path, multi30k: Path) -> Path:
    """Multi30k in `data`/multi30k as `interlingua data multi30k --from` writes it; its corpus.yaml."""
    cmd = [sys.executable, "-m", "interlingua.cli", "data", "multi30k", "--from", str(multi30k), "--dest",
           str(data / "multi30k")]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"gpu-prepare: `{' '.join(cmd)}` failed:\n{done.stderr[-3000:]}")
    return data / "multi30k" / "corpus.yaml"


def travelling_project_bytes(repo: Path = REPO) -> int:
    """Bytes of the files that travel as the working tree: tracked, and untracked but not ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sum((repo / name).stat().st_size for name in set(listed) if name and (repo / name).is_file())


def _files(folder: Path, skip: Iterable[Path] = ()) -> list[Path]:
    skipped = {p.resolve() for p in skip}
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.resolve() not in skipped)


def build_manifest(wheels: Path, data: Path, project_bytes: int, limit_mib: float = LIMIT_MIB,
                   carried: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The manifest of a prepared pair of folders: each wheel's file, name, version, tags, bytes and SHA-256;
    each data file's path (relative to `data`), bytes and SHA-256; the bytes that travel and the limit.
    `carried`: pip's report entries of the wheels (records why each is there: requested or needed)."""
    manifest_path = data / "manifest.json"
    wheel_rows = []
    for path in sorted(wheels.glob("*.whl")):
        fields = wheel_fields(path.name)
        row = {"file": path.name, "name": fields["name"], "version": fields["version"],
               "tags": f"{fields['python']}-{fields['abi']}-{fields['platform']}", "pure": is_pure(path.name),
               "bytes": path.stat().st_size, "sha256": sha256(path)}
        if carried and fields["name"] in carried:
            row["requested"] = bool(carried[fields["name"]].get("requested"))
        wheel_rows.append(row)
    data_rows = [{"file": p.relative_to(data).as_posix(), "bytes": p.stat().st_size, "sha256": sha256(p)}
                 for p in _files(data, skip=[manifest_path])]
    wheel_bytes, data_bytes = sum(r["bytes"] for r in wheel_rows), sum(r["bytes"] for r in data_rows)
    total = project_bytes + wheel_bytes + data_bytes
    return {
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": PYTHON_VERSION, "implementation": "cp", "platforms": list(PLATFORMS),
        "present_on_gpu_machine": list(ON_GPU_MACHINE),
        "wheels": wheel_rows, "data": data_rows,
        "bytes": {"project": project_bytes, "wheels": wheel_bytes, "data": data_bytes, "total": total,
                  "limit": int(limit_mib * 2**20)},
    }


def check_size(manifest: dict[str, Any]) -> None:
    b = manifest["bytes"]
    if b["total"] > b["limit"]:
        mib = {k: round(v / 2**20, 1) for k, v in b.items()}
        raise SystemExit(f"gpu-prepare: {mib['total']} MiB would travel, over the limit of {mib['limit']} MiB "
                         f"(project {mib['project']}, wheels {mib['wheels']}, data {mib['data']} MiB)")


def write_manifest(manifest: dict[str, Any], data: Path) -> Path:
    data.mkdir(parents=True, exist_ok=True)
    path = data / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, default=REPO / ".whl", help="wheel folder (default .whl)")
    ap.add_argument("--data", type=Path, default=REPO / ".gpu-data", help="data folder (default .gpu-data)")
    ap.add_argument("--multi30k", type=Path, default=REPO.parent / "shared" / "data" / "multi30k",
                    help="local Multi30k files to copy (default ../shared/data/multi30k)")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help="most MiB that may travel (default 64)")
    ap.add_argument("--extras", nargs="*", default=list(EXTRAS),
                    help="optional dependency groups of the project to carry too (default: ctranslate2, 43 MB; "
                         "give none to leave it out)")
    args = ap.parse_args(argv)
    args.wheels.mkdir(parents=True, exist_ok=True)
    reqs = project_requirements(extras=args.extras)
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp)
        build_source_only(reqs, built, args.wheels)
        carry = to_carry(resolve_for_gpu_machine(reqs, built))
        fetch_wheels(carry, args.wheels, built)
    fetch_data(args.data, args.multi30k)
    manifest = build_manifest(args.wheels, args.data, travelling_project_bytes(), args.limit_mib, carry)
    path = write_manifest(manifest, args.data)
    mib = {k: round(v / 2**20, 1) for k, v in manifest["bytes"].items()}
    print(f"{len(manifest['wheels'])} wheels ({mib['wheels']} MiB): "
          + ", ".join(f"{w['name']} {w['version']}" for w in manifest["wheels"]))
    print(f"data {mib['data']} MiB; travels {mib['total']} MiB with the project ({mib['project']} MiB) of at most "
          f"{mib['limit']} MiB; manifest {path}")
    check_size(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
