"""N: name resolution."""
