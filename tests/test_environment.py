"""What a run records of its environment: the installed distributions, read once and read again
when a distribution is installed or removed."""

from __future__ import annotations

import importlib

from radt.launch import environment


def dist_info(folder, name: str, version: str):
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return info


def test_installed_packages_follow_installs_and_removals(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    before = environment.installed_packages()
    assert "radt-env-probe" not in before
    assert environment.installed_packages() is before  # nothing changed: the answer kept
    info = dist_info(site, "radt_env_probe", "1.0")  # installed
    importlib.invalidate_caches()
    assert "radt_env_probe==1.0" in environment.installed_packages().splitlines()
    for child in info.iterdir():  # upgraded: the old .dist-info removed, a new one made
        child.unlink()
    info.rmdir()
    dist_info(site, "radt_env_probe", "2.0")
    importlib.invalidate_caches()
    pins = environment.installed_packages().splitlines()
    assert "radt_env_probe==2.0" in pins and "radt_env_probe==1.0" not in pins
    monkeypatch.undo()  # off sys.path: gone
    importlib.invalidate_caches()
    assert "radt_env_probe" not in environment.installed_packages()
    # the kept answer is the one a fresh read gives
    environment._PACKAGES = None
    assert environment.installed_packages() == before
