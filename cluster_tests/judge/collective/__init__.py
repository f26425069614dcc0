"""C: the all-reduce: its options, ranks, verdict, tables, pairs."""
