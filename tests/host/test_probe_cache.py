"""The frameworks probe of this Python is kept in the kit's cache until what it imports changes."""

from __future__ import annotations

import sys

from kit.cache import keep, read_kept
from kit.host.fingerprint import ImageProbe
from kit.host.probe_cache import probe_entry, probe_key, probe_this_python


def test_the_probe_is_made_once_and_then_read_from_its_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE", str(tmp_path))
    entry = probe_entry()
    assert not entry.exists()
    probed = probe_this_python()  # the real probe: this Python's torch and frameworks
    assert probed is not None and probed.torch and entry.is_file()
    assert ImageProbe.model_validate_json(read_kept(entry, 1 << 20) or b"") == probed
    planted = probed.model_copy(update={"torch": "0.0.0-kept"})
    keep(entry, planted.model_dump_json().encode())
    assert probe_this_python() == planted  # read, not probed again
    keep(entry, b'{"torch": ')  # an entry that no longer reads as a probe's is probed again
    assert probe_this_python() == probed
    entry.write_text(planted.model_dump_json())  # an answer not sealed by the kit is not read
    assert probe_this_python() == probed
    assert ImageProbe.model_validate_json(read_kept(entry, 1 << 20) or b"") == probed


def test_installing_removing_or_steering_a_framework_names_another_entry(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    before = probe_key()
    assert probe_key() == before
    (site / "vllm-0.30.0.dist-info").mkdir()  # as pip leaves an installed distribution
    installed = probe_key()
    assert installed != before
    (site / "vllm-0.30.0.dist-info").rmdir()
    assert probe_key() == before
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/cuda/lib64")
    assert probe_key() not in (before, installed)
