"""What `squadd doctor`'s checks share: the context they read and fill, and a check's result.
Its own module so that the checks kept beside `cli/doctor.py` need not import it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from squadd.state.layout import SquadLayout

if TYPE_CHECKING:
    from squadd.config import Settings

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass
class DoctorContext:
    """What the checks know: where to look, and what earlier checks found."""

    start: Path
    layout: SquadLayout | None = None
    settings: Settings | None = None
    cluster_url: str | None = None
    """`--cluster URL`: check this cluster (else `[cluster] url`, if set)."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)
