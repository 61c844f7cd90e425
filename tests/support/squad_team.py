"""A large, long-lived Squad team written the way Squad writes its files (the suite's own text).

21 members with emoji statuses and mixed display-name case, a member listed without a charter
and a row with no name, routing tables with an `Agent` column and decorated names, examples
in an HTML comment and a code fence, skills in all three skill folders, and a `.gitignore` from
an older squadd. `TEAM_FACTS` says what each reader should find.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from squadd.state.layout import SquadLayout


@dataclass(frozen=True)
class Agent:
    display: str
    role: str
    status: str = "✅ Active"

    @property
    def folder(self) -> str:
        return self.display.lower()


AGENTS = (
    Agent("ORBIT", "Lead Architect"),
    Agent("VECTOR", "Backend Engineer"),
    Agent("Marlow", "Frontend Engineer"),
    Agent("Quill", "Docs Writer"),
    Agent("Juniper", "Test Engineer"),
    Agent("TELEMETRY", "Observability"),
    Agent("Bramble", "Data Engineer"),
    Agent("Cobalt", "Security Reviewer"),
    Agent("Sable", "Release Manager"),
    Agent("Wren", "Accessibility"),
    Agent("Harbor", "Infrastructure"),
    Agent("Ferrous", "Performance"),
    Agent("Lumen", "Design Systems"),
    Agent("Tamsin", "Mobile"),
    Agent("Osprey", "API Gateway"),
    Agent("Pilot", "Developer Experience"),
    Agent("Nimbus", "Cloud Costs", "💤 Inactive"),
    Agent("Scribe", "Session Logger", "📋 Silent"),
    Agent("Watchman", "Work Monitor", "🔄 Monitor"),
    Agent("Ember", "Incident Response"),
    Agent("Kestrel", "Localization"),
)

TEAM_MD = """# Orbital Team

> A long-lived team for the launch-tracker service.

## Project Context

- **Owner:** the platform group
- **Stack:** Python services, a TypeScript web client

## Members

| Name | Role | Charter | Status |
|------|------|---------|--------|
{rows}
| Ghost | Former Lead | `.squad/agents/ghost/charter.md` | ✅ Active |
|  | (vacant seat) | | 📋 Silent |

## Coordinator

The coordinator reads this roster before every spawn.

## Launch Rituals

Friday demos; everyone attends.
"""

ROUTING_MD = """# Work Routing

How work is handed out. Rows are tried from the top.

## Routing Table

| Work Type | Agent | Examples |
|-----------|-------|----------|
| Service endpoints, database queries | VECTOR 🔧 | add a REST endpoint, speed up the orders query |
| Web pages, components, styling | **Marlow** 🎨 | fix the navbar, build the settings page |
| Documentation and guides | Quill ✍️ | write the upgrade guide, fix README typos |
| Tests and flaky builds | @juniper 🧪 | add regression tests, quarantine a flaky test |
| Metrics, dashboards, tracing | TELEMETRY 📡 | add a latency dashboard |
| Cost reports | Nimbus ☁️ | monthly spend report for the launch budget |
| Session logging | Scribe | automatic, never routed |
| Threat models, dependency audits | Cobalt 🛡️ | audit the dependencies |
| Legacy pipelines | Ghost 👻 | rewrite the nightly pipeline |
| Mystery work | ??? | nobody knows |

## Issue Labels

| Label | Agent |
|-------|-------|
| squad:vector | VECTOR |

<!-- An example, not a rule:
| Work Type | Agent | Examples |
|---|---|---|
| Hidden launch work | ORBIT | launch sequence |
-->

```markdown
| Work Type | Agent | Examples |
|---|---|---|
| Fenced launch work | ORBIT | launch sequence |
```
"""

CHARTER = """# {display} — {role}

## Identity

- **Name:** {display}
- **Role:** {role}
- **Expertise:** the {role_lower} side of launch-tracker

## What I Own

- Everything {role_lower}.

## How I Work

- I read decisions.md before starting.

## Boundaries

**I handle:** {role_lower} work.

## Model

- **Preferred:** auto

## Collaboration

Ask ORBIT when unsure.

## Voice

Short and direct.
"""

HISTORY = """# Project Context

- **Owner:** {display} ({role})

## Learnings

### Orders index (2026-03-02)

The orders table needs its composite index on (tenant, created).

### Retry budget (2026-03-09)

Clients retry 429s at most three times.
"""

SKILLS = {
    (".github", "release-checklist"): (
        '---\nname: "release-checklist"\ndescription: >\n  Steps to cut a launch-tracker '
        'release,\n  from tagging to the changelog.\nconfidence: "high"\n---\n\n'
        "# Release checklist\n\n1. Tag.\n2. Publish.\n"),
    (".github", "api-errors"): (
        '---\nname: "api-errors"\ndescription: "How the API reports errors to clients."\n---\n\n'
        "# API errors\n"),
    (".squad", "api-errors"): (
        '---\nname: "api-errors"\ndescription: "An older copy, hidden by .github/skills."\n'
        "---\n\n# Old API errors\n"),
    (".squad", "incident-triage"): (
        '---\nname: "incident-triage"\ndescription: "Sorting incidents by blast radius."\n'
        "---\n\n# Incident triage\n"),
    (".copilot", "translation-memory"): (
        '---\nname: "translation-memory"\ndescription: "Reusing approved translations."\n'
        "---\n\n# Translation memory\n"),
    (".copilot", "no-front-matter"): "# Plain skill\n\nJust text.\n",
}

SKILL_DESCRIPTIONS = {
    "release-checklist": "Steps to cut a launch-tracker release, from tagging to the changelog.",
    "api-errors": "How the API reports errors to clients.",
    "incident-triage": "Sorting incidents by blast radius.",
    "translation-memory": "Reusing approved translations.",
    "no-front-matter": "Plain skill",
}

OLD_GITIGNORE = "run/\nsessions/\ntool-output/\nlog/\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def build_team(repo: Path) -> SquadLayout:
    """Write the team into `repo/.squad/` (and its skill folders) and return its layout."""
    squad = repo / ".squad"
    rows = "\n".join(f"| {a.display} | {a.role} | `.squad/agents/{a.folder}/charter.md` | "
                     f"{a.status} |" for a in AGENTS)
    _write(squad / "team.md", TEAM_MD.format(rows=rows))
    _write(squad / "routing.md", ROUTING_MD)
    _write(squad / "decisions.md", "# Decisions\n\n### 2026-02-01: Use Postgres\n\n"
                                   "**By:** VECTOR\n\nOne database for everything.\n")
    (squad / "decisions" / "inbox").mkdir(parents=True)
    _write(squad / ".gitignore", OLD_GITIGNORE)
    for agent in AGENTS:
        fields = {"display": agent.display, "role": agent.role, "role_lower": agent.role.lower()}
        charter = CHARTER.format(**fields)
        if agent.display == "ORBIT":
            charter += "\n## Rituals\n\nRuns the Friday demo.\n"
        _write(squad / "agents" / agent.folder / "charter.md", charter)
        _write(squad / "agents" / agent.folder / "history.md", HISTORY.format(**fields))
    for (root, name), text in SKILLS.items():
        folder = repo / root / "skills" if root != ".squad" else squad / "skills"
        _write(folder / name / "SKILL.md", text)
    return SquadLayout.at(squad)
