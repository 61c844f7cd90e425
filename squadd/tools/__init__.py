"""Tools: the `Tool` model, the one invocation pipeline, truncation, squad and custom tools."""
