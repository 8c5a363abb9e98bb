"""The `repro` command line, one module per command group; library code never imports this package."""
