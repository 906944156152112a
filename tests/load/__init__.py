"""Load and soak tests of the served app (issue 7): ``python -m tests.load.loadtest --help``."""
