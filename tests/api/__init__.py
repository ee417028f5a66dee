"""The public API and its protocol, runtime config, durability, the single-writer lock, the command line,
headless runs, and the code blocks of the docs."""
