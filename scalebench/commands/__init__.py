"""One module per ``scalebench`` subcommand."""
