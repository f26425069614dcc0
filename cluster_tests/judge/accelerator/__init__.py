"""A: the accelerators' inventory."""
