"""Site settings for the checks in this directory (an example: copy the directory next to your
hostfile and edit). `cluster_host` comes from the cluster_tests plugin: one pytest-testinfra host
per node of the hostfile, over the run's own SSH sessions (same ssh config, user and strict host
keys, a deadline on every command).

    pytest --hostfile hostfile --site-checks test_site.py      # the checklist + these checks
    pytest --hostfile hostfile test_site.py                    # these checks only
    pytest --hostfile hostfile test_site.py -k node3           # on one node
"""

import os

import pytest


@pytest.fixture(scope="session")
def site():
    """What this site expects of every node (environment variables override the defaults)."""
    return {
        # the checkpoint volume every node mounts
        "mount": os.environ.get("SITE_MOUNT", "/mnt/output"),
        # a package the jobs need, and the version prefix the site standardised on
        "package": os.environ.get("SITE_PACKAGE", "libnccl2"),
        "version": os.environ.get("SITE_PACKAGE_VERSION", "2."),
        # sshd must take this many unauthenticated connections at once (pdsh fan-out)
        "max_startups": int(os.environ.get("SITE_MAX_STARTUPS", "100")),
    }
