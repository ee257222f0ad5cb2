"""The lock files every install comes from (make run, make test, CI, the ms-swift venvs) against the ranges they were
resolved from: each package a requirements file names is pinned in its lock inside its range, every pinned package
carries hashes, and the test lock keeps the app lock's versions (both go into one .venv). A range changed without
`make lock` fails here."""

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parent.parent
LOCKS = {"requirements.txt": "requirements.lock", "requirements-test.txt": "requirements-test.lock",
         "requirements-swift.txt": "requirements-swift.lock", "requirements-swift3.txt": "requirements-swift3.lock",
         "requirements-megatron.txt": "requirements-megatron.lock"}


def pins(lock: str) -> dict[str, tuple[str, list[str]]]:
    """Each entry of a lock file: its name → (version, sha256 hashes)."""
    text = re.sub(r"#.*", "", (ROOT / lock).read_text())
    entries = re.split(r"\n(?=\S)", text)  # an entry starts at the line's start; its hashes follow, indented
    found = {}
    for entry in entries:
        if m := re.match(r"([A-Za-z0-9._-]+)==(\S+)", entry):
            found[canonicalize_name(m[1])] = (m[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", entry))
    return found


def ranges(requirements: str) -> list[Requirement]:
    """The requirements a file names, with those of the files it includes (-r)."""
    found = []
    for line in (ROOT / requirements).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            found += ranges(line[3:].strip())
        elif line:
            found.append(Requirement(line))
    return found


@pytest.mark.parametrize("requirements", LOCKS)
def test_each_lock_pins_every_requirement_inside_its_range_with_hashes(requirements):
    lock = LOCKS[requirements]
    locked = pins(lock)
    assert locked, lock
    for req in ranges(requirements):
        name = canonicalize_name(req.name)
        assert name in locked, f"{lock} lacks {req.name} ({requirements}): run make lock"
        assert req.specifier.contains(locked[name][0], prereleases=True), (
            f"{lock} pins {name}=={locked[name][0]}, outside {req} ({requirements}): run make lock")
    assert not [name for name, (_, hashes) in locked.items() if not hashes], f"{lock}: entries without a hash"


def test_the_test_lock_keeps_the_app_lock_versions():
    app, test = pins("requirements.lock"), pins("requirements-test.lock")
    assert {name: test.get(name, (None,))[0] for name in app} == {name: version for name, (version, _) in app.items()}


def test_ms_swift_3_alone_is_pinned_with_its_hash():
    """The swift3 venv's ms-swift, installed without its dependencies (the Makefile's swift3-venv)."""
    (name, (version, hashes)), = pins("requirements-swift3-nodeps.lock").items()
    assert name == "ms-swift" and version.startswith("3.") and hashes
