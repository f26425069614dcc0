"""H: the hostfile, the launch's arguments and the master address it derives."""
