"""`python -m faultfinder` runs the CLI."""

from faultfinder.cli import main

main()
