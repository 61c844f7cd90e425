"""Custom tools: Python tool files and YAML shell tools found on disk."""
