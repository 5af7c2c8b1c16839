"""One module per CLI verb: `add_parser(subparsers, name)` and `run(args) -> int`."""
