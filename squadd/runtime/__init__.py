"""The runtime: event bus, session pool, agent sessions, prompts and routing."""
