"""Running one command for a tool: its process group (`process`), its output streamed,
redacted and spilled (`output`), the processes it left behind (`leftovers`) and the environment
it gets (`environment`). Shared by YAML tools, `bash`, hooks and the land check."""
