"""Front ends (Discord, console): thin layers over the same calls as the CLI."""
