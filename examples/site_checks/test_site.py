"""Example site checks, written with pytest-testinfra's `host` API through `cluster_host`.

Each test runs once per node of the hostfile, with the node as its id (`test_mount[node3]`),
and appears in the cluster summary ("Site checks"), in JUnit (property `node`) and under
`-k node3`, like the checklist's own checks.
"""


def test_mount(cluster_host, site):
    """The checkpoint volume is mounted on every node."""
    assert cluster_host.mount_point(site["mount"]).exists, f"{site['mount']} is not a mount point"


def test_package_version(cluster_host, site):
    """The site's standard version of a package the jobs need."""
    pkg = cluster_host.package(site["package"])
    assert pkg.is_installed, f"{site['package']} is not installed"
    assert pkg.version.startswith(site["version"]), (
        f"{site['package']} {pkg.version}, the site runs {site['version']}*")


def test_sshd_max_startups(cluster_host, site):
    """sshd takes a whole pdsh fan-out at once (MaxStartups, first number; OpenSSH's default 10
    drops connections beyond it)."""
    config = cluster_host.file("/etc/ssh/sshd_config")
    assert config.exists
    values = [line.split()[1] for line in config.content_string.splitlines()
              if line.strip().lower().startswith("maxstartups ")]
    start = int(values[0].split(":")[0]) if values else 10
    assert start >= site["max_startups"], (
        f"MaxStartups {values[0] if values else '10 (default)'} in /etc/ssh/sshd_config; "
        f"the site needs at least {site['max_startups']}")
