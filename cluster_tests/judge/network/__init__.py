"""F: reachability, ports, firewalls, the launch interface, own addresses."""
