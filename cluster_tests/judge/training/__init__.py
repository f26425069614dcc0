"""T: the training smoke jobs: argv, diagnosis, explanation, result."""
