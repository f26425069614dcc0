"""cluster_tests: the pre-launch checklist of a multi-node training job, as a pytest suite.

Run it with ``pytest --hostfile HOSTFILE`` from a checkout, or ``cluster-tests --hostfile
HOSTFILE`` (``pytest -p cluster_tests ...``) from anywhere where it is installed.

PYTEST_DONT_REWRITE: this file has no assertion to rewrite, and the `cluster-tests` command
imports it before pytest starts (pytest would warn that it cannot rewrite it; the modules of the
package are rewritten as before).
"""

__version__ = "0.1.0"
