"""The linter of existing run configs: its rules and the checker that reads a file and runs them."""
