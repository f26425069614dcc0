"""What several sections' judges share: interfaces and addresses, fix commands, tool output parsers,
stacks, typed facts."""
