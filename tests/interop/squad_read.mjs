// What Squad's own code reads from a team: only the SDK's exported parsers, printed as JSON.
// Usage: node squad_read.mjs REPO_ROOT   (REPO_ROOT holds .squad/; run from the folder whose
// node_modules holds @bradygaster/squad-sdk)
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { SquadState, FSStorageProvider, splitEntries, countEntries } from '@bradygaster/squad-sdk';
import { parseCharterMarkdown } from '@bradygaster/squad-sdk/agents';

const root = process.argv[2];
const squad = join(root, '.squad');
const state = SquadState.fromStorage(new FSStorageProvider(), root);

async function text(path) {
  try { return await readFile(path, 'utf8'); } catch { return null; }
}

async function attempt(fn) {
  try { return { ok: await fn() }; } catch (err) { return { error: String(err?.message ?? err) }; }
}

const out = {};
out.team = await attempt(async () => (await state.team.get()).members);
out.routing = await attempt(async () => (await state.routing.get()).rules);
out.decisions = await attempt(() => state.decisions.list());
const decisionsText = await text(join(squad, 'decisions.md'));
const archiveText = await text(join(squad, 'decisions-archive.md'));
out.decisionHeadings = decisionsText === null ? [] : splitEntries(decisionsText).entries.map((e) => e.heading);
out.decisionCount = decisionsText === null ? 0 : countEntries(decisionsText);
out.archiveHeadings = archiveText === null ? [] : splitEntries(archiveText).entries.map((e) => e.heading);
out.agents = {};
for (const name of await state.agents.list()) {
  const handle = state.agents.get(name);
  const charter = await attempt(async () => {
    const parsed = parseCharterMarkdown(await handle.charter());
    return { name: parsed.identity?.name ?? null, role: parsed.identity?.role ?? null };
  });
  const history = await attempt(() => handle.history());
  const archive = await text(join(squad, 'agents', name, 'history-archive.md'));
  out.agents[name] = {
    charter,
    history,
    archivedEntries: archive === null ? 0 : countEntries(archive),
  };
}
out.skills = {};
for (const id of await attempt(() => state.skills.list()).then((r) => r.ok ?? [])) {
  const skill = await attempt(() => state.skills.get(id));
  out.skills[id] = skill.ok ? { name: skill.ok.name ?? null, description: skill.ok.description ?? null } : skill;
}
process.stdout.write(JSON.stringify(out, null, 1) + '\n');
