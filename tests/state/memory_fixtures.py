"""Histories and decisions in every shape a long-lived Squad team writes, for the memory tests.

The team (Kestrel: firmware for a solar weather station) and every line here are made up for
these tests.
"""

from __future__ import annotations

CONTEXT = (
    "# Project Context\n\n"
    "- **Owner:** Wren\n"
    "- **Project:** Kestrel, firmware for a solar weather station\n\n"
    "## Core Context\n\n"
    "The sensor bus runs at 100 kHz. Flash is 512 KB.\n\n"
)

BULLETS_OLDEST = CONTEXT + (
    "## Learnings\n\n"
    "- **[technical]** 2025-11-03: The humidity sensor needs 15 ms after power-up before "
    "its first read.\n"
    "- **[process]** 2025-11-10: Flash builds only from a clean tree; stale objects hid a "
    "linker bug once.\n"
    "  - The CI job now runs `make clean` first.\n"
    "- **[architecture]** 2025-12-01: Keep the radio driver behind one queue; two writers "
    "corrupted frames.\n"
)
"""Bullets, oldest first (dates rise down the file), one with a nested bullet."""

BULLETS_NEWEST = CONTEXT + (
    "## Learnings\n\n"
    "Most recent first.\n\n"
    "- **[team]** Osprey reviews every change to the bootloader.\n"
    "- **[technical]** The anemometer reports in pulses, not m/s.\n"
    "- **[general]** The rig lives in room 4.\n"
)
"""Bullets without dates, newest first, as the lead-in says."""

BLOCKS_NEWEST = (
    "# Project Context\n\n"
    "Tern tests the Kestrel firmware on the bench rig.\n\n"
    "## Learnings\n\n"
    "### Brown-out resets hide behind the watchdog (2026-01-20)\n\n"
    "When the supply dips below 2.9 V the watchdog fires before the brown-out detector.\n\n"
    "#### What to check\n\n"
    "- The supply log of the rig\n"
    "- The reset-cause register\n\n"
    "### The bench rig's clock drifts (2025-12-14)\n\n"
    "Its RTC loses about two seconds a day; compare with the host clock.\n\n"
    "### First flash of the rig (2025-11-02)\n\n"
    "- Use the slow SWD speed\n"
    "- Hold reset while attaching\n"
)
"""`### Title (date)` blocks, newest first, with `####` sub-headings and bullets inside."""

BLOCKS_OLDEST = (
    "# Project Context\n\n"
    "Osprey leads the Kestrel team.\n\n"
    "## Learnings\n\n"
    "### Planning in two-week rounds works (2025-10-06)\n\n"
    "Shorter rounds left no time for field tests.\n\n"
    "### Field tests need a printed checklist (2025-11-17)\n\n"
    "- Batteries charged\n"
    "- Logger cleared\n\n"
    "### Weekly demo on Thursdays (2026-01-08)\n\n"
    "Fridays clashed with the lab's maintenance window.\n"
)
"""`### Title (date)` blocks, oldest first."""

DECISIONS_H3 = (
    "# Decisions\n\n"
    "Team-wide choices for Kestrel.\n\n"
    "## Active\n\n"
    "### 2025-11-04: Use a single radio queue\n\n"
    "**By:** Osprey\n\n"
    "All radio frames go through one queue owned by the radio task.\n\n"
    "#### Files Updated\n\n"
    "- src/radio/queue.c\n\n"
    "### 2025-12-02: Pin the toolchain to 13.2\n\n"
    "**By:** Wren\n\n"
    "Newer releases changed the float ABI.\n\n"
    "### Files Updated\n\n"
    "- toolchain.cmake\n\n"
    "### Cross-References\n\n"
    "- The radio queue decision.\n\n"
    "## Superseded\n\n"
    "### 2025-10-01: Poll sensors every second\n\n"
    "**By:** Osprey\n\n"
    "Replaced by interrupt-driven reads.\n"
)
"""`### {date}: {title}` decisions: one with a `####` sub-section, one reusing `###` for its
sub-sections, and a `## Superseded` group heading between them."""

DECISIONS_H2 = (
    "# Kestrel decisions\n\n"
    "## 2026-01-05: Log in CBOR, not JSON\n\n"
    "**By:** Tern\n\n"
    "CBOR halves the size of the log on flash.\n\n"
    "### Files Updated\n\n"
    "- src/log/encode.c\n\n"
    "### Cross-References\n\n"
    "- The flash budget note in the README.\n\n"
    "## 2026-01-12: Retry uploads three times\n\n"
    "**By:** Osprey\n\n"
    "Cellular drops are short; three tries cover them.\n\n"
    "### Files Updated\n\n"
    "- src/net/upload.c\n\n"
    "### Cross-References\n\n"
    "- The flash budget note in the README.\n"
)
"""`## ` decisions whose `###` sub-sections belong to them; both end in the same
Cross-References sub-section."""

DECISION_FILE = (
    "# Decision: Sample wind speed at 4 Hz\n\n"
    "**By:** Osprey\n"
    "**Date:** 2026-02-01\n\n"
    "## Context\n\n"
    "Gusts shorter than half a second were lost at 1 Hz.\n\n"
    "## Consequences\n\n"
    "- Tern updates the expected rates of the bench rig.\n"
)
"""A `# Decision:` file whose author and date are in its body, not in its name."""


def dated(i: int) -> str:
    """The i-th day after 2024-01-01, as YYYY-MM-DD (i up to about 700)."""
    import datetime as dt

    return (dt.date(2024, 1, 1) + dt.timedelta(days=i)).isoformat()


def block_entry(i: int, *, plain: bool = False) -> str:
    """A `### ` learning block: with a `####` sub-heading and bullets, or (`plain`) paragraphs."""
    head = (f"### Finding {i:03} on the rig ({dated(i)})\n\n"
            f"Finding {i} says the rig behaves {'oddly ' * 12}after a cold start.\n")
    if plain:
        return head + f"\nPower cycle it twice and read the log; entry {i} ends here.\n"
    return head + f"\n#### Steps {i}\n\n- Power cycle twice\n- Read the log\n"


def bullet_entry(i: int) -> str:
    return (f"- **[technical]** {dated(i)}: Finding {i:03} says the rig behaves "
            f"{'oddly ' * 12}after a cold start.\n")


def grown_history(count: int, *, blocks: bool, newest_first: bool, plain: bool = False) -> str:
    """A history of `count` dated learnings in one shape and order, after CONTEXT."""
    order = range(count - 1, -1, -1) if newest_first else range(count)
    if blocks:
        body = "\n".join(block_entry(i, plain=plain) for i in order)
    else:
        body = "".join(bullet_entry(i) for i in order)
    return f"{CONTEXT}## Learnings\n\n{body}"
