"""pyinfra facts llmhost decides with; each parser is tested on real captured output."""
