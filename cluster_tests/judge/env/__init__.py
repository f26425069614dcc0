"""E: the launch's environment, its rehearsal legs, the JIT builds."""
