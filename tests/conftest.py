"""Shared fixtures: the real manifests, and a way to break a copy of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kit.manifest import manifests_dir
from kit.protocol import build_plan, load_protocol

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def protocol():
    return load_protocol()


@pytest.fixture(scope="session")
def smoke_plan(protocol):
    return build_plan(protocol, "smoke")


@pytest.fixture(scope="session")
def paper_plan(protocol):
    return build_plan(protocol, "paper")


@pytest.fixture
def manifests_copy(tmp_path, monkeypatch) -> Path:
    """A private copy of manifests/ that KIT_MANIFESTS points at, for tests that break it."""
    copy = tmp_path / "manifests"
    shutil.copytree(manifests_dir(), copy)
    monkeypatch.setenv("KIT_MANIFESTS", str(copy))
    return copy
