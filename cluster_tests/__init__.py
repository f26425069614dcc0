"""cluster_tests: the pre-launch checklist of a multi-node training job, as a pytest suite.

Run it with ``pytest --hostfile HOSTFILE`` from a checkout, or ``pytest --pyargs cluster_tests
--hostfile HOSTFILE`` where it is installed.
"""

__version__ = "0.1.0"
