"""S: SSH modes, failures and the fixes of each cause, where ssh sends a name."""
