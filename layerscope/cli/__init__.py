"""The command line: one small function per subcommand; main(argv) -> exit code."""
