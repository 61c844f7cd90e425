"""Model providers: one Protocol (`base.Provider`) and its implementations.

`openai` and `anthropic` talk HTTP, `command` runs an agent CLI, `replay` plays a recording.
"""
