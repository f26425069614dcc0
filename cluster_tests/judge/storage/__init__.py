"""D: the checkpoint storage: the output directory on every node, and one volume shared by all."""
