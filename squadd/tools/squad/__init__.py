"""The five squad tools: route, decide, memory, status and skill."""
