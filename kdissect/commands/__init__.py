"""One module per CLI subcommand, each exposing a click command named `command`."""
