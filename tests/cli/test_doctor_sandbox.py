"""`squadd doctor`'s sandbox check names the mechanism in use and what it enforces."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.cli.doctor import DoctorContext, check_sandbox
from squadd.config import Settings
from squadd.sandbox import bwrap, landlock

pytestmark = pytest.mark.usefixtures("fresh_choice")


def _check(tmp_path: Path, **sandbox: object) -> object:
    ctx = DoctorContext(start=tmp_path,
                        settings=Settings.model_validate({"sandbox": sandbox}))
    return check_sandbox(ctx)


def test_the_mechanism_in_use_and_what_it_enforces(tmp_path: Path) -> None:
    if bwrap.probe() is not None:
        pytest.skip("bwrap is not available here")
    result = _check(tmp_path)
    assert result.status == "ok" and result.summary.startswith("bwrap")  # type: ignore[attr-defined]
    text = "\n".join(result.details)  # type: ignore[attr-defined]
    assert "network: unshared" in text and "PID namespace" in text and "file size" in text


def test_landlock_reports_its_abi(tmp_path: Path) -> None:
    if landlock.abi() < 1:
        pytest.skip("Landlock is not available here")
    result = _check(tmp_path, mode="landlock")
    assert result.status == "ok"  # type: ignore[attr-defined]
    assert f"ABI {landlock.abi()}" in result.summary  # type: ignore[attr-defined]


def test_mode_off_is_a_warning_and_no_mechanism_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    off = _check(tmp_path, mode="off")
    assert off.status == "warn" and "unconfined" in off.summary  # type: ignore[attr-defined]
    monkeypatch.setattr(bwrap, "probe", lambda: "bwrap is not installed")
    monkeypatch.setattr(landlock, "abi", lambda: 0)
    none = _check(tmp_path)
    assert none.status == "fail"  # type: ignore[attr-defined]
    assert 'sandbox.mode = "off"' in none.summary  # type: ignore[attr-defined]
